package testbed

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// kubeadmJoinConfigPath is where the kubeadm bootstrap provider's cloud-config writes a joining
// node's JoinConfiguration (bootstrap/kubeadm/pkg/cloudinit/node.go), which kubeadm join reads.
const kubeadmJoinConfigPath = "/run/kubeadm/kubeadm-join-config.yaml"

// KubeadmJoin is what a joining node's kubeadm takes from its bootstrap data to find and trust
// the control plane: JoinConfiguration.discovery.bootstrapToken.
type KubeadmJoin struct {
	APIServerEndpoint string   `json:"apiServerEndpoint"`
	Token             string   `json:"token"`
	CACertHashes      []string `json:"caCertHashes"`
}

// ParseKubeadmJoin reads the discovery of the JoinConfiguration that a cloud-config of the kubeadm
// bootstrap provider writes.
func ParseKubeadmJoin(cloudConfig []byte) (KubeadmJoin, error) {
	var cc struct {
		WriteFiles []struct {
			Path    string `json:"path"`
			Content string `json:"content"`
		} `json:"write_files"`
	}
	if err := yaml.Unmarshal(cloudConfig, &cc); err != nil {
		return KubeadmJoin{}, fmt.Errorf("not a cloud-config: %w", err)
	}
	for _, f := range cc.WriteFiles {
		if f.Path != kubeadmJoinConfigPath {
			continue
		}
		var join struct {
			Kind      string `json:"kind"`
			Discovery struct {
				BootstrapToken KubeadmJoin `json:"bootstrapToken"`
			} `json:"discovery"`
		}
		if err := yaml.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(f.Content), "---")), &join); err != nil {
			return KubeadmJoin{}, fmt.Errorf("%s: %w", kubeadmJoinConfigPath, err)
		}
		if join.Kind != "JoinConfiguration" {
			return KubeadmJoin{}, fmt.Errorf("%s holds a %q, not a JoinConfiguration", kubeadmJoinConfigPath, join.Kind)
		}
		return join.Discovery.BootstrapToken, nil
	}
	return KubeadmJoin{}, fmt.Errorf("the cloud-config writes no %s", kubeadmJoinConfigPath)
}

// CheckKubeadmJoin checks what kubeadm join would rely on in a node's bootstrap data against the
// tenant cluster: the endpoint is the cluster's control plane endpoint (host:port), its bootstrap token is one the tenant
// holds (Secret bootstrap-token-<id> in kube-system, usable for authentication), and a CA hash is
// that of the tenant's cluster CA (sha256 of its public key, as kubeadm pins it).
func (t *Tenant) CheckKubeadmJoin(ctx context.Context, cloudConfig []byte, endpoint string) (KubeadmJoin, error) {
	join, err := ParseKubeadmJoin(cloudConfig)
	if err != nil {
		return join, err
	}
	var errs []error
	if join.APIServerEndpoint != endpoint {
		errs = append(errs, fmt.Errorf("apiServerEndpoint %q, the cluster's control plane endpoint is %s", join.APIServerEndpoint, endpoint))
	}
	id, tokenSecret, ok := strings.Cut(join.Token, ".")
	if !ok {
		errs = append(errs, errors.New("no bootstrap token of the form <id>.<secret>"))
	} else {
		token := &corev1.Secret{}
		if err := t.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + id}, token); err != nil {
			errs = append(errs, fmt.Errorf("the bootstrap token %s... in the tenant: %w", id, err))
		} else if string(token.Data["token-secret"]) != tokenSecret || string(token.Data["usage-bootstrap-authentication"]) != "true" {
			errs = append(errs, fmt.Errorf("the tenant's Secret %s does not authenticate that token", token.Name))
		}
	}
	hash, err := caHash(t.CA())
	if err != nil {
		return join, err
	}
	if !slices.Contains(join.CACertHashes, hash) {
		errs = append(errs, fmt.Errorf("caCertHashes %v, the tenant's cluster CA is %s", join.CACertHashes, hash))
	}
	return join, errors.Join(errs...)
}

// caHash is kubeadm's pin of a CA: "sha256:" and the hex SHA-256 of its SubjectPublicKeyInfo.
func caHash(caPEM []byte) (string, error) {
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return "", errors.New("the CA is no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

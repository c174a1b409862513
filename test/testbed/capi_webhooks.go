package testbed

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ClusterAPIWebhooks is the directory, in assets, of Cluster API core's webhook configurations
// (manifests.yaml: defaulting and validation of its kinds) and of the CRD patches that turn its
// conversion webhook on (conversion/), as its release installs them but for where they point.
func ClusterAPIWebhooks(assets string) string { return filepath.Join(assets, "webhook") }

// The names of core's webhook configurations as its release names them (its kustomization's
// namePrefix "capi-").
const (
	clusterAPIMutatingWebhooks   = "capi-mutating-webhook-configuration"
	clusterAPIValidatingWebhooks = "capi-validating-webhook-configuration"
)

// webhookServing is where the core manager serves its webhooks: a loopback port and a serving
// certificate signed by a CA of the testbed's, all kept in the manager's work directory so that a
// manager started again there serves them where the API server already sends them.
type webhookServing struct {
	port    int
	certDir string
	caPEM   []byte
}

// hostPort is the address the API server calls the webhooks at.
func (w webhookServing) hostPort() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(w.port))
}

// webhookServingIn returns the webhook serving of workDir, made on first use: a free port, a CA and
// a serving certificate for 127.0.0.1 and localhost (tls.crt, tls.key in certDir).
func webhookServingIn(workDir string) (webhookServing, error) {
	w := webhookServing{certDir: filepath.Join(workDir, "capi-webhook-certs")}
	portFile, caFile := filepath.Join(workDir, "capi-webhook-port"), filepath.Join(w.certDir, "ca.crt")
	port, portErr := os.ReadFile(portFile) //nolint:gosec // G304: the testbed's own work directory
	ca, caErr := os.ReadFile(caFile)       //nolint:gosec // G304: the testbed's own work directory
	if portErr == nil && caErr == nil {
		p, err := strconv.Atoi(strings.TrimSpace(string(port)))
		w.port, w.caPEM = p, ca
		return w, err
	}
	if !errors.Is(portErr, os.ErrNotExist) && portErr != nil {
		return w, portErr
	}
	addr, err := FreeLocalAddr()
	if err != nil {
		return w, err
	}
	_, p, _ := net.SplitHostPort(addr)
	if w.port, err = strconv.Atoi(p); err != nil {
		return w, err
	}
	if w.caPEM, err = writeServingCert(w.certDir); err != nil {
		return w, fmt.Errorf("webhook serving certificate: %w", err)
	}
	if err := os.WriteFile(caFile, w.caPEM, 0o600); err != nil { //nolint:gosec // G703: the testbed's own work directory
		return w, err
	}
	return w, os.WriteFile(portFile, []byte(p), 0o600)
}

// writeServingCert makes a CA and a serving certificate it signs for 127.0.0.1 and localhost,
// writes the certificate and its key into dir as tls.crt and tls.key (what the manager's webhook
// server reads), and returns the CA's certificate (PEM), the caBundle the API server trusts.
func writeServingCert(dir string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "testbed webhook CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano() + 1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// installClusterAPIWebhooks points the API server at the core manager's webhooks, as a release
// of Cluster API core does (cert-manager injecting the CA): its defaulting and validating webhook
// configurations, and the conversion webhook of the CRDs its release converts, each at
// https://127.0.0.1:<port> with the testbed's CA. It is idempotent, and waits until the API
// server calls the webhooks.
func installClusterAPIWebhooks(ctx context.Context, cfg *rest.Config, assets string, w webhookServing) error {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	dir := ClusterAPIWebhooks(assets)
	if err := applyWebhookConfigurations(ctx, c, filepath.Join(dir, "manifests.yaml"), w); err != nil {
		return err
	}
	if err := enableConversion(ctx, c, filepath.Join(dir, "conversion"), w); err != nil {
		return err
	}
	return waitForDefaulting(ctx, c)
}

// applyWebhookConfigurations creates or updates core's webhook configurations (mutating and
// validating), each webhook's Service replaced by the manager's URL.
func applyWebhookConfigurations(ctx context.Context, c client.Client, manifests string, w webhookServing) error {
	data, err := os.ReadFile(manifests) //nolint:gosec // G304: a file of the Cluster API build
	if err != nil {
		return fmt.Errorf("%w (run make capi to add it to the build)", err)
	}
	objs, err := DecodeManifests(data)
	if err != nil {
		return err
	}
	names := map[string]string{
		"MutatingWebhookConfiguration":   clusterAPIMutatingWebhooks,
		"ValidatingWebhookConfiguration": clusterAPIValidatingWebhooks,
	}
	for _, u := range objs {
		name, ok := names[u.GetKind()]
		if !ok {
			return fmt.Errorf("%s: unexpected %s", manifests, u.GetKind())
		}
		u.SetName(name)
		webhooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		for _, hook := range webhooks {
			if hook, ok := hook.(map[string]any); ok {
				hook["clientConfig"] = clientConfigFor(hook["clientConfig"], w)
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, webhooks, "webhooks"); err != nil {
			return err
		}
		if err := createOrReplace(ctx, c, u); err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), name, err)
		}
	}
	return nil
}

// clientConfigFor is a webhook's clientConfig that calls the manager's URL at the path of the
// Service it named, trusting the testbed's CA.
func clientConfigFor(clientConfig any, w webhookServing) map[string]any {
	path, _, _ := unstructured.NestedString(map[string]any{"c": clientConfig}, "c", "service", "path")
	return map[string]any{"url": "https://" + w.hostPort() + path, "caBundle": base64.StdEncoding.EncodeToString(w.caPEM)}
}

// createOrReplace creates obj, or replaces the object of its name with it.
func createOrReplace(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current, ok := obj.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("%T is no client.Object", obj)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), current); err != nil {
			return err
		}
		obj.SetResourceVersion(current.GetResourceVersion())
		return c.Update(ctx, obj)
	})
}

// enableConversion turns the conversion webhook on for every CRD that core's patches name, as
// its release does: the API server then converts between their versions (v1beta1, v1beta2)
// through the manager.
func enableConversion(ctx context.Context, c client.Client, patches string, w webhookServing) error {
	files, err := filepath.Glob(filepath.Join(patches, "webhook_in_*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no conversion patches in %s (run make capi to add them to the build)", patches)
	}
	for _, file := range files {
		data, err := os.ReadFile(file) //nolint:gosec // G304: a file of the Cluster API build
		if err != nil {
			return err
		}
		patch := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &patch.Object); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: patch.GetName()}, crd); err != nil {
				return err
			}
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ConversionReviewVersions: []string{"v1"},
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://" + w.hostPort() + "/convert"), CABundle: w.caPEM},
				},
			}
			return c.Update(ctx, crd)
		})
		if apierrors.IsNotFound(err) {
			continue // a kind this management cluster does not serve
		}
		if err != nil {
			return fmt.Errorf("turn the conversion webhook on for CRD %s: %w", patch.GetName(), err)
		}
	}
	return nil
}

// waitForDefaulting waits until the API server calls core's webhooks (it learns of new
// configurations asynchronously): a MachineDeployment created in a dry run comes back defaulted.
func waitForDefaulting(ctx context.Context, c client.Client) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		md := ClusterAPIObject(MachineDeploymentGVK, "default", "webhook-probe", map[string]any{
			"clusterName": "webhook-probe",
			"template": map[string]any{"spec": map[string]any{
				"clusterName": "webhook-probe",
				"bootstrap":   map[string]any{"dataSecretName": "webhook-probe"}, //nolint:gosec // G101: a Secret's name, no credential
				"infrastructureRef": map[string]any{
					"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "ProbeMachineTemplate", "name": "webhook-probe",
				},
			}},
		})
		err := c.Create(ctx, md, client.DryRunAll)
		if err == nil {
			if _, defaulted, _ := unstructured.NestedString(md.Object, "spec", "selector", "matchLabels", "cluster.x-k8s.io/deployment-name"); defaulted {
				return nil
			}
			err = errors.New("it came back without the selector Cluster API's defaulting sets")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server does not call Cluster API's webhooks after 30s (a dry-run MachineDeployment: %w)", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

package sim

import (
	"bufio"
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

//go:embed manifests
var manifests embed.FS

// CRDs returns the stand-in CRDs of the KubeVirt and Harvester kinds.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	err := eachObject("manifests/crds", func(doc []byte) error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(doc, crd); err != nil {
			return err
		}
		out = append(out, crd)
		return nil
	})
	return out, err
}

// ApplyPolicies creates the admission policies that stand in for Harvester's and KubeVirt's
// webhooks.
func ApplyPolicies(ctx context.Context, c client.Client) error {
	return createAll(ctx, c, "manifests/policies")
}

// ApplyStorageClasses creates the storage classes Harvester's chart installs that no image makes:
// vmstate-persistence, the KubeVirt CR's vmStateStorageClass, for VMs' state PVCs.
func ApplyStorageClasses(ctx context.Context, c client.Client) error {
	return createAll(ctx, c, "manifests/storage")
}

// createAll creates every object of the files in dir.
func createAll(ctx context.Context, c client.Client, dir string) error {
	return eachObject(dir, func(doc []byte) error {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return err
		}
		return c.Create(ctx, u)
	})
}

// ApplyHarvesterRoles creates the roles Harvester installs for guest clusters and what it grants
// every authenticated user (manifests/rbac: harvesterhci.io:cloudprovider and
// harvesterhci.io:csi-driver, copied from Harvester's chart; harvester-authenticated and the
// harvester-public namespace's view binding, from Harvester's pkg/data/rbac.go).
func ApplyHarvesterRoles(ctx context.Context, c client.Client) error {
	return createAll(ctx, c, "manifests/rbac")
}

// eachObject calls fn with every YAML document of every file in dir.
func eachObject(dir string, fn func([]byte) error) error {
	return eachObjectOf(dir, func(string) bool { return true }, fn)
}

// eachObjectOf calls fn with every YAML document of the files in dir whose path file accepts.
func eachObjectOf(dir string, file func(path string) bool, fn func([]byte) error) error {
	return fs.WalkDir(manifests, dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || !file(path) {
			return err
		}
		data, err := manifests.ReadFile(path)
		if err != nil {
			return err
		}
		r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			if err := fn(doc); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
	})
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// Harvester is a simulated Harvester cluster: a real API server (envtest) with the stand-in CRDs
// and admission policies, the simulator, and optionally a fault-injecting proxy in front of it.
type Harvester struct {
	Env *envtest.Environment
	// Config reaches the API server directly, as an administrator.
	Config *rest.Config
	Client client.Client
	Sim    *Simulator
	// Proxy is set when the Harvester was started WithProxy.
	Proxy    *FaultProxy
	webhooks *webhooks
	// Kubeconfig is what a user of this Harvester gets: self-contained, through the proxy if any.
	Kubeconfig []byte
}

// Options configure StartHarvester.
type Options struct {
	Sim Config
	// WithProxy puts a FaultProxy between Kubeconfig and the API server.
	WithProxy bool
}

// StartHarvester starts a simulated Harvester. KUBEBUILDER_ASSETS must point at kube-apiserver and
// etcd (make controlplane). Stop it with Stop.
func StartHarvester(ctx context.Context, opts Options) (*Harvester, error) {
	crds, err := CRDs()
	if err != nil {
		return nil, err
	}
	h := &Harvester{Env: &envtest.Environment{CRDInstallOptions: envtest.CRDInstallOptions{CRDs: crds}}}
	if h.Config, err = h.Env.Start(); err != nil {
		return nil, fmt.Errorf("start the Harvester API server: %w", err)
	}
	h.Config.QPS, h.Config.Burst = 1000, 2000 // an administrator's client, for tests and the testbed
	ok := false
	defer func() {
		if !ok {
			_ = h.Stop()
		}
	}()
	if h.Client, err = client.New(h.Config, client.Options{Scheme: Scheme()}); err != nil {
		return nil, err
	}
	if err := ApplyPolicies(ctx, h.Client); err != nil {
		return nil, fmt.Errorf("apply admission policies: %w", err)
	}
	if err := ApplyHarvesterRoles(ctx, h.Client); err != nil {
		return nil, fmt.Errorf("apply Harvester's ClusterRoles: %w", err)
	}
	if err := ApplyStorageClasses(ctx, h.Client); err != nil {
		return nil, fmt.Errorf("apply Harvester's storage classes: %w", err)
	}
	if h.Sim, err = New(opts.Sim); err != nil {
		return nil, err
	}
	if err := h.Sim.Start(ctx, h.Config); err != nil {
		return nil, err
	}
	// The webhooks read through the simulator's cache and its indexes, as Harvester's read
	// through its informers: a live list of every VM per admission would make the API server,
	// not the provider, what a benchmark of 1000 machines measures.
	if h.webhooks, err = startWebhooks(ctx, h.Sim.c, h.Sim.cfg); err != nil {
		return nil, err
	}
	h.Kubeconfig = KubeconfigFor(h.Config)
	if opts.WithProxy {
		if h.Proxy, err = NewFaultProxy(h.Config); err != nil {
			return nil, err
		}
		h.Kubeconfig = h.Proxy.Kubeconfig()
	}
	ok = true
	return h, nil
}

// Stop stops the proxy and the API server.
func (h *Harvester) Stop() error {
	if h.Proxy != nil {
		h.Proxy.Close()
	}
	if h.webhooks != nil {
		h.webhooks.close()
	}
	return h.Env.Stop()
}

// KubeconfigFor writes a self-contained kubeconfig for cfg (certificates and token inline).
func KubeconfigFor(cfg *rest.Config) []byte {
	return kubeconfig(serverURL(cfg.Host), cfg.CAData, &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
		Impersonate: cfg.Impersonate.UserName, ImpersonateGroups: cfg.Impersonate.Groups,
	})
}

func kubeconfig(server string, ca []byte, user *clientcmdapi.AuthInfo) []byte {
	c := clientcmdapi.NewConfig()
	c.Clusters["harvester"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	c.AuthInfos["harvester"] = user
	c.Contexts["harvester"] = &clientcmdapi.Context{Cluster: "harvester", AuthInfo: "harvester"}
	c.CurrentContext = "harvester"
	out, err := clientcmd.Write(*c)
	if err != nil {
		panic(err) // only fails for unserialisable input, which this never builds
	}
	return out
}

func serverURL(host string) string {
	if strings.Contains(host, "://") {
		return host
	}
	return "https://" + host
}

// GuestRoles are Harvester's guest ClusterRoles (harvesterhci.io:cloudprovider and
// harvesterhci.io:csi-driver) as one Harvester release installs them.
type GuestRoles struct {
	// Version is the release tag, or the commit of the roles the simulator installs.
	Version string
	Roles   []*unstructured.Unstructured
}

// HarvesterGuestRoleVersions returns the guest roles of Harvester v1.4 to v1.8
// (manifests/rbac-versions, copied from each release's chart) and, last, those the simulator
// installs (manifests/rbac/harvester-guest-roles.yaml), oldest first.
func HarvesterGuestRoleVersions() ([]GuestRoles, error) {
	var out []GuestRoles
	read := func(dir, version string, keep func(*unstructured.Unstructured) bool) error {
		g := GuestRoles{Version: version}
		err := eachObjectOf(dir, func(path string) bool { return version == "" || strings.Contains(path, version) }, func(doc []byte) error {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				return err
			}
			if keep(u) {
				g.Roles = append(g.Roles, u)
			}
			return nil
		})
		out = append(out, g)
		return err
	}
	entries, err := manifests.ReadDir("manifests/rbac-versions")
	if err != nil {
		return nil, err
	}
	for _, e := range entries { // sorted by name: harvester-v1.4.3.yaml first
		version := strings.TrimSuffix(strings.TrimPrefix(e.Name(), "harvester-"), ".yaml")
		if err := read("manifests/rbac-versions", version, func(*unstructured.Unstructured) bool { return true }); err != nil {
			return nil, err
		}
	}
	guestRole := func(u *unstructured.Unstructured) bool {
		return u.GetKind() == "ClusterRole" && strings.HasPrefix(u.GetName(), "harvesterhci.io:")
	}
	if err := read("manifests/rbac", "", guestRole); err != nil {
		return nil, err
	}
	out[len(out)-1].Version = CurrentGuestRolesVersion
	return out, nil
}

// CurrentGuestRolesVersion names the guest roles the simulator installs: harvester/harvester at
// 3d63c2af (v1.9.0-rc).
const CurrentGuestRolesVersion = "3d63c2af"

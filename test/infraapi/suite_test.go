// Package infraapi checks the Cluster API infrastructure kinds (api/infrastructure/v1alpha1) on a
// real API server: what config/capi installs (the generated CRDs of config/crd/infrastructure, the
// ClusterRole that Cluster API aggregates, and the template immutability policy) is loaded into
// kube-apiserver and etcd (built from Go modules), and objects are created and changed there, so
// that the schema, defaults, CEL rules and the admission policy all run as in a cluster.
package infraapi

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	sigsyaml "sigs.k8s.io/yaml"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

var (
	k8s    client.Client
	scheme = k8sruntime.NewScheme()
	// installed is what config/capi installs, in the order of its kustomization.
	installed []*unstructured.Unstructured
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run these tests with 'make test', which builds the control plane")
		os.Exit(1)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if installed, err = kustomizationObjects(filepath.Join(repoRoot(), "config", "capi")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	var others []*unstructured.Unstructured
	for _, obj := range installed {
		if obj.GetKind() != "CustomResourceDefinition" {
			others = append(others, obj)
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, crd); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		crds = append(crds, crd)
	}
	env := &envtest.Environment{CRDInstallOptions: envtest.CRDInstallOptions{CRDs: crds}}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the API server:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()

	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, obj := range others {
		if err := k8s.Create(context.Background(), obj.DeepCopy()); err != nil {
			fmt.Fprintf(os.Stderr, "create %s %s: %v\n", obj.GetKind(), obj.GetName(), err)
			return 1
		}
	}
	return m.Run()
}

// kustomizationObjects decodes what the kustomization in dir lists: its files, and the
// kustomizations of the directories it names, as `kustomize build` would (without transformers,
// which these kustomizations do not use).
func kustomizationObjects(dir string) ([]*unstructured.Unstructured, error) {
	resources, err := kustomizationResources(dir)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, r := range resources {
		path := filepath.Join(dir, r)
		info, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("%s/kustomization.yaml lists %s: %w", dir, r, err)
		}
		if info.IsDir() {
			objs, err := kustomizationObjects(path)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		objs, err := testbed.DecodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// kustomizationResources is the resources list of dir/kustomization.yaml, which must hold nothing
// else (no transformer that the decoding above would miss).
func kustomizationResources(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k map[string]any
	if err := sigsyaml.UnmarshalStrict(data, &k); err != nil {
		return nil, err
	}
	for key := range k {
		if key != "resources" {
			return nil, fmt.Errorf("%s/kustomization.yaml has %q: this test only reads resources", dir, key)
		}
	}
	var kz struct {
		Resources []string `json:"resources"`
	}
	if err := sigsyaml.Unmarshal(data, &kz); err != nil {
		return nil, err
	}
	return kz.Resources, nil
}

func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }

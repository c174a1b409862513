package capi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// providerName is this provider's name in a user's clusterctl configuration (a custom
// `providers:` entry: clusterctl's built-in "harvester" is another provider's).
const providerName = "butler-harvester"

// TestClusterAPITemplatesRenderWithClusterctl builds a local clusterctl repository as `make
// infrastructure-components` does (components from config/clusterctl, metadata.yaml, the cluster
// templates), has the real clusterctl generate a cluster from each flavor with only the documented
// variables, and checks that nothing is left unset, that every object is there, and (kubeadm
// flavor, whose providers' CRDs come with Cluster API) that the API server accepts every object
// of it against the real CRDs with strict field validation (an unknown field is refused, not
// pruned). The talos flavor's providers are not Go modules served here: it is rendered only.
func TestClusterAPITemplatesRenderWithClusterctl(t *testing.T) {
	assets, err := testbed.ClusterAPIAssets()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	root := repoRoot()
	version := "v0.3.0"
	repo := filepath.Join(t.TempDir(), "infrastructure-"+providerName, version)
	if err := os.MkdirAll(repo, 0o750); err != nil {
		t.Fatal(err)
	}
	kustomize := exec.CommandContext(ctx, "go", "tool", "-modfile="+filepath.Join(root, "hack", "tools", "kustomize", "go.mod"), "kustomize", "build", "config/clusterctl")
	kustomize.Dir = root
	components, err := kustomize.Output()
	if err != nil {
		t.Fatalf("kustomize build config/clusterctl: %v", err)
	}
	writeFile(t, filepath.Join(repo, "infrastructure-components.yaml"), components)
	for _, name := range []string{"metadata.yaml", "templates/cluster-template.yaml", "templates/cluster-template-talos.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(repo, filepath.Base(name)), data)
	}
	objs, err := testbed.DecodeManifests(components)
	if err != nil {
		t.Fatal(err)
	}
	requireKinds(t, "infrastructure-components.yaml", objs, "CustomResourceDefinition", "Deployment", "ClusterRole", "ValidatingAdmissionPolicy")
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" && strings.HasSuffix(o.GetName(), ".infrastructure.butlerlabs.dev") && o.GetLabels()["cluster.x-k8s.io/v1beta2"] != "v1alpha1" {
			t.Errorf("CRD %s lacks the contract label cluster.x-k8s.io/v1beta2: v1alpha1 (labels %v)", o.GetName(), o.GetLabels())
		}
	}

	config := filepath.Join(t.TempDir(), "clusterctl.yaml")
	writeFile(t, config, fmt.Appendf(nil, "providers:\n- name: %s\n  type: InfrastructureProvider\n  url: file://%s\n", providerName, filepath.Join(repo, "infrastructure-components.yaml")))
	generate := func(flavor string) []*unstructured.Unstructured {
		t.Helper()
		args := []string{"generate", "cluster", "tenant", "--config", config, "--infrastructure", providerName + ":" + version,
			"--kubernetes-version", "v1.33.1", "--control-plane-machine-count", "3", "--worker-machine-count", "2", "--target-namespace", "tenants"}
		if flavor != "" {
			args = append(args, "--flavor", flavor)
		}
		cmd := exec.CommandContext(ctx, filepath.Join(assets, "clusterctl"), args...)
		cmd.Env = append(os.Environ(), "CLUSTERCTL_DISABLE_VERSIONCHECK=true", "XDG_CONFIG_HOME="+t.TempDir(),
			"CONTROL_PLANE_ENDPOINT_IP=10.40.0.250", "HARVESTER_PROVIDER_CONFIG=harvester", "HARVESTER_IMAGE=vms/ubuntu", "TALOS_VERSION=v1.9")
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if e, ok := errors.AsType[*exec.ExitError](err); ok {
				stderr = e.Stderr
			}
			t.Fatalf("clusterctl %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		if strings.Contains(string(out), "${") {
			t.Fatalf("flavor %q left a variable unset:\n%s", flavor, out)
		}
		objs, err := testbed.DecodeManifests(out)
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}

	kubeadm := generate("")
	requireKinds(t, "the kubeadm flavor", kubeadm, "Cluster", "HarvesterCluster", "HarvesterMachineTemplate", "KubeadmControlPlane", "KubeadmConfigTemplate", "MachineDeployment")
	talos := generate("talos")
	requireKinds(t, "the talos flavor", talos, "Cluster", "HarvesterCluster", "HarvesterMachineTemplate", "TalosControlPlane", "TalosConfigTemplate", "MachineDeployment")

	env := &envtest.Environment{ErrorIfCRDPathMissing: true, CRDDirectoryPaths: []string{
		testbed.ClusterAPICRDs(assets), filepath.Join(assets, "kubeadm-crds"), filepath.Join(root, "config", "crd", "infrastructure"),
	}}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenants"}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range kubeadm {
		if err := c.Create(ctx, o, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			t.Errorf("the API server refuses the kubeadm flavor's %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

func requireKinds(t *testing.T, what string, objs []*unstructured.Unstructured, kinds ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, o := range objs {
		have[o.GetKind()] = true
	}
	for _, k := range kinds {
		if !have[k] {
			t.Errorf("%s has no %s (has %v)", what, k, have)
		}
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

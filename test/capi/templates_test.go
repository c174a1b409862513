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
	assets := requireAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	components, config := clusterctlRepository(ctx, t)
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

	generate := func(flavor string) []*unstructured.Unstructured {
		t.Helper()
		args := []string{"generate", "cluster", "tenant", "--infrastructure", providerName + ":" + providerVersion,
			"--kubernetes-version", "v1.33.1", "--control-plane-machine-count", "3", "--worker-machine-count", "2", "--target-namespace", "tenants"}
		if flavor != "" {
			args = append(args, "--flavor", flavor)
		}
		out := runClusterctl(ctx, t, assets, config, []string{"CONTROL_PLANE_ENDPOINT_IP=10.40.0.250", "HARVESTER_PROVIDER_CONFIG=harvester",
			"HARVESTER_IMAGE=vms/ubuntu", "TALOS_VERSION=v1.9"}, args...)
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
		testbed.ClusterAPICRDs(assets), filepath.Join(assets, "kubeadm-crds"), filepath.Join(repoRoot(), "config", "crd", "infrastructure"),
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

// providerVersion is the version of this provider in the local clusterctl repository.
const providerVersion = "v0.3.0"

// clusterctlRepository builds a local clusterctl repository of this provider as `make
// infrastructure-components` builds its files (the components with kustomize from
// config/clusterctl, metadata.yaml, the cluster templates; the image tag that the make target sets
// does not matter to the tests). It returns the components as built and a clusterctl
// configuration that names the repository (provider providerName, version providerVersion).
func clusterctlRepository(ctx context.Context, t *testing.T) (components []byte, config string) {
	t.Helper()
	root := repoRoot()
	repo := filepath.Join(t.TempDir(), "infrastructure-"+providerName, providerVersion)
	if err := os.MkdirAll(repo, 0o750); err != nil {
		t.Fatal(err)
	}
	components = kustomizeBuild(ctx, t, "config/clusterctl")
	writeFile(t, filepath.Join(repo, "infrastructure-components.yaml"), components)
	for _, name := range []string{"metadata.yaml", "templates/cluster-template.yaml", "templates/cluster-template-talos.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(repo, filepath.Base(name)), data)
	}
	config = filepath.Join(t.TempDir(), "clusterctl.yaml")
	writeFile(t, config, fmt.Appendf(nil, "providers:\n- name: %s\n  type: InfrastructureProvider\n  url: file://%s\n", providerName, filepath.Join(repo, "infrastructure-components.yaml")))
	return components, config
}

// runClusterctl runs the real clusterctl of assets with configuration config and the variables
// env, and returns what it prints.
func runClusterctl(ctx context.Context, t *testing.T, assets, config string, env []string, args ...string) []byte {
	t.Helper()
	args = append(args, "--config", config)
	cmd := exec.CommandContext(ctx, filepath.Join(assets, "clusterctl"), args...)
	// No update check (it would ask GitHub) and no configuration but the test's own.
	cmd.Env = append(append(os.Environ(), "CLUSTERCTL_DISABLE_VERSIONCHECK=true", "XDG_CONFIG_HOME="+t.TempDir()), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if e, ok := errors.AsType[*exec.ExitError](err); ok {
			stderr = e.Stderr
		}
		t.Fatalf("clusterctl %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

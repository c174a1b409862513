package capi

import (
	"context"
	"errors"
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
// templates and ClusterClasses), has the real clusterctl generate a cluster from each flavour
// (kubeadm, talos, talos-static, hosted, and the ClusterClass flavours topology and
// hosted-topology, to which clusterctl adds their class) with only the documented variables, and
// checks that nothing is left unset, that every object is there, and that the API server accepts
// every object whose CRD it serves (Cluster API core's with the ClusterResourceSet and
// ClusterClass, the kubeadm providers', this provider's, and Steward's StewardControlPlane and
// StewardControlPlaneTemplate from test/testdata/steward) with strict field validation (an unknown
// field is refused, not pruned). The Talos providers are not Go modules served here: the talos
// flavour's TalosControlPlane and TalosConfigTemplate are checked by their shape only. Each
// flavour's ClusterResourceSet (checkAddons) and the manifests it applies in the tenant cluster
// (built-in kinds, accepted under strict validation too) are checked as well.
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
		if strings.Contains(o.GetName(), "steward") {
			t.Errorf("infrastructure-components.yaml has %s %s: the Steward RBAC is opt-in (config/steward, steward-rbac.yaml)", o.GetKind(), o.GetName())
		}
	}

	flavours := map[string][]*unstructured.Unstructured{}
	for _, flavour := range allFlavours {
		flavours[flavour] = generateFlavour(ctx, t, assets, config, flavour)
	}
	requireKinds(t, "the kubeadm flavour", flavours[""], "Cluster", "HarvesterCluster", "HarvesterMachineTemplate", "KubeadmControlPlane", "KubeadmConfigTemplate", "MachineDeployment", "ClusterResourceSet", "ConfigMap")
	requireKinds(t, "the talos flavour", flavours["talos"], "Cluster", "HarvesterCluster", "HarvesterMachineTemplate", "TalosControlPlane", "TalosConfigTemplate", "MachineDeployment", "ClusterResourceSet", "ConfigMap")
	requireKinds(t, "the talos-static flavour", flavours["talos-static"], "Cluster", "HarvesterCluster", "HarvesterMachineTemplate", "TalosControlPlane", "TalosConfigTemplate", "MachineDeployment", "ClusterResourceSet", "ConfigMap")
	requireKinds(t, "the hosted flavour", flavours["hosted"], "Cluster", "HarvesterCluster", "StewardControlPlane", "HarvesterMachineTemplate", "KubeadmConfigTemplate", "MachineDeployment", "ClusterResourceSet", "ConfigMap")
	requireKinds(t, "the topology flavour", flavours["topology"], "ClusterClass", "HarvesterClusterTemplate", "KubeadmControlPlaneTemplate", "HarvesterMachineTemplate", "KubeadmConfigTemplate", "Cluster", "ClusterResourceSet", "ConfigMap")
	requireKinds(t, "the hosted-topology flavour", flavours["hosted-topology"], "ClusterClass", "HarvesterClusterTemplate", "StewardControlPlaneTemplate", "HarvesterMachineTemplate", "KubeadmConfigTemplate", "Cluster", "ClusterResourceSet", "ConfigMap")

	env := &envtest.Environment{ErrorIfCRDPathMissing: true, CRDDirectoryPaths: []string{
		testbed.ClusterAPICRDs(assets), filepath.Join(assets, "kubeadm-crds"), filepath.Join(repoRoot(), "config", "crd", "infrastructure"), stewardCRDs(),
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
	for _, flavour := range allFlavours {
		name := flavourName(flavour)
		for _, o := range flavours[flavour] {
			if o.GetAPIVersion() == "controlplane.cluster.x-k8s.io/v1alpha3" || o.GetAPIVersion() == "bootstrap.cluster.x-k8s.io/v1alpha3" {
				continue // Talos's kinds: no CRD here
			}
			if err := c.Create(ctx, o, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
				t.Errorf("the API server refuses the %s's %s %s: %v", name, o.GetKind(), o.GetName(), err)
			}
		}
		checkAddons(ctx, t, c, name, flavours[flavour])
	}
	requireSameAddons(t, flavours)
	checkTalosVIP(t, "talos flavour", flavours["talos"])
	checkTalosVIP(t, "talos-static flavour", flavours["talos-static"])
	checkStaticFlavour(t, flavours["talos-static"])
	checkHostedFlavour(t, flavours["hosted"])
	checkClassFlavour(t, "topology flavour", flavours["topology"], "harvester-kubeadm")
	checkClassFlavour(t, "hosted-topology flavour", flavours["hosted-topology"], "harvester-hosted")

	// The cluster-level network variables: unset, the cloud provider runs on its defaults and its
	// load balancer controller off; set, they reach its flags and the HarvesterCluster.
	unset := []string{"--cluster-name=tenant", "--management-network=", "--node-ip-cidr=", "--node-exclude-ip-ranges="}
	for _, flavour := range allFlavours {
		checkLoadBalancers(t, flavourName(flavour), "off", flavours[flavour], unset...)
	}
	set := generateFlavour(ctx, t, assets, config, "", "HARVESTER_LOAD_BALANCERS=kube-vip", "HARVESTER_MANAGEMENT_NETWORK=vms/vlan40",
		"HARVESTER_NODE_IP_CIDR=10.40.0.0/24", "HARVESTER_NODE_EXCLUDE_IP_RANGES=10.40.0.250,10.40.0.251")
	checkLoadBalancers(t, "kubeadm flavour", "kube-vip", set, "--cluster-name=tenant", "--management-network=vms/vlan40",
		"--node-ip-cidr=10.40.0.0/24", "--node-exclude-ip-ranges=10.40.0.250,10.40.0.251")
	hc := only(t, "kubeadm flavour", set, "HarvesterCluster")
	if network, _, _ := unstructured.NestedString(hc.Object, "spec", "managementNetwork"); network != "vms/vlan40" {
		t.Errorf("the HarvesterCluster's spec.managementNetwork is %q, want HARVESTER_MANAGEMENT_NETWORK's vms/vlan40", network)
	}
	if err := c.Create(ctx, hc, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
		t.Errorf("the API server refuses the HarvesterCluster with a management network: %v", err)
	}
}

// generateFlavour has the real clusterctl generate cluster "tenant" in namespace "tenants" from a
// flavour ("" is the default, kubeadm) with only the variables the templates' headers call
// required (and extra ones), and checks that nothing is left unset.
func generateFlavour(ctx context.Context, t *testing.T, assets, config, flavour string, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"generate", "cluster", "tenant", "--infrastructure", providerName + ":" + providerVersion,
		"--kubernetes-version", "v1.33.1", "--control-plane-machine-count", "3", "--worker-machine-count", "2", "--target-namespace", "tenants"}
	if flavour != "" {
		args = append(args, "--flavor", flavour)
	}
	// Only the variables each flavour's header calls required.
	env := map[string][]string{
		"":      {"CONTROL_PLANE_ENDPOINT_IP=10.40.0.250", "HARVESTER_PROVIDER_CONFIG=harvester", "HARVESTER_IMAGE=vms/ubuntu"},
		"talos": {"CONTROL_PLANE_ENDPOINT_IP=10.40.0.250", "HARVESTER_PROVIDER_CONFIG=harvester", "HARVESTER_IMAGE=vms/talos", "TALOS_VERSION=v1.9"},
		"talos-static": {"CONTROL_PLANE_ENDPOINT_IP=10.40.0.250", "HARVESTER_PROVIDER_CONFIG=harvester", "HARVESTER_IMAGE=vms/talos", "TALOS_VERSION=v1.9",
			"HARVESTER_NETWORK=vms/vlan40", "HARVESTER_IP_POOL=vlan40-static", "HARVESTER_NAMESERVER=10.40.0.2"},
		"hosted":          {"HARVESTER_PROVIDER_CONFIG=harvester", "HARVESTER_IMAGE=vms/ubuntu"},
		"topology":        {"CONTROL_PLANE_ENDPOINT_IP=10.40.0.250", "HARVESTER_PROVIDER_CONFIG=harvester", "HARVESTER_IMAGE=vms/ubuntu"},
		"hosted-topology": {"HARVESTER_PROVIDER_CONFIG=harvester", "HARVESTER_IMAGE=vms/ubuntu"},
	}[flavour]
	env = append(env, extra...)
	out := runClusterctl(ctx, t, assets, config, env, args...)
	if strings.Contains(string(out), "${") {
		t.Fatalf("flavour %q left a variable unset:\n%s", flavour, out)
	}
	objs, err := testbed.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// allFlavours are the flavours of templates/ ("" is the default, kubeadm); topology and
// hosted-topology are those of ClusterClasses harvester-kubeadm and harvester-hosted.
var allFlavours = []string{"", "talos", "talos-static", "hosted", "topology", "hosted-topology"}

func flavourName(flavour string) string {
	if flavour == "" {
		return "kubeadm flavour"
	}
	return flavour + " flavour"
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
// infrastructure-components` builds its files (testbed.WriteClusterctlRepository). It returns the
// components as built and a clusterctl configuration that names the repository (provider
// providerName, version providerVersion).
func clusterctlRepository(ctx context.Context, t *testing.T) (components []byte, config string) {
	t.Helper()
	components, config, err := testbed.WriteClusterctlRepository(ctx, repoRoot(), t.TempDir(), providerName, providerVersion)
	if err != nil {
		t.Fatal(err)
	}
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

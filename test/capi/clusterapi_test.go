// Package capi runs the real Cluster API core manager and clusterctl, built from Go modules
// (hack/tools/capi.sh, CAPI_ASSETS), against a real API server (KUBEBUILDER_ASSETS): the ground
// the provider's Cluster API infrastructure provider is tested on. Cluster API pins another
// controller-runtime than the project's, so it runs as a separate process and its objects are
// unstructured here.
package capi

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// clusterFinalizer is the finalizer Cluster API's Cluster controller puts on every Cluster.
const clusterFinalizer = "cluster.cluster.x-k8s.io"

// TestClusterAPICoreManagerReconcilesACluster starts an API server with Cluster API core's CRDs
// and the real core manager, creates a Cluster whose infrastructure nothing provisions, and sees
// the Cluster controller take it (its finalizer, phase Provisioning, its conditions for the current
// generation) and, once it is deleted, let it go. clusterctl reports the pinned version.
func TestClusterAPICoreManagerReconcilesACluster(t *testing.T) {
	assets := requireAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("clusterctl", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, filepath.Join(assets, "clusterctl"), "version", "-o", "short")
		// No update check (it would ask GitHub) and no configuration but the test's own.
		cmd.Env = append(os.Environ(), "CLUSTERCTL_DISABLE_VERSIONCHECK=true", "XDG_CONFIG_HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("clusterctl version: %v\n%s", err, out)
		}
		if got, want := strings.TrimSpace(string(out)), pinnedVersion(t); got != want {
			t.Fatalf("clusterctl version -o short = %q, want %s (hack/tools/capi/go.mod)", got, want)
		}
	})

	cfg, c := startClusterAPIServer(t, assets)
	start := time.Now()
	capi := startCoreManager(ctx, t, testbed.ClusterAPIOptions{Assets: assets, Config: cfg, WorkDir: t.TempDir()})
	t.Logf("Cluster API core manager ready in %s", time.Since(start).Round(time.Millisecond))

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "capi-smoke"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// Cluster API's validation asks for an infrastructure or control plane reference: a
	// HarvesterCluster that nothing provisions.
	cluster := testbed.ClusterAPIObject(testbed.ClusterGVK, ns.Name, "smoke", map[string]any{
		"clusterNetwork":    map[string]any{"serviceDomain": "cluster.local"},
		"infrastructureRef": unprovisionedInfrastructure(ctx, t, c, ns.Name, "smoke"),
	})
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatalf("create the Cluster: %v", err)
	}

	waitFor(ctx, t, capi, "the Cluster controller to take the Cluster", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		if !slices.Contains(cluster.GetFinalizers(), clusterFinalizer) {
			return fmt.Errorf("finalizers %v, want %s", cluster.GetFinalizers(), clusterFinalizer)
		}
		if phase, _, _ := unstructured.NestedString(cluster.Object, "status", "phase"); phase != "Provisioning" {
			return fmt.Errorf("status.phase %q, want Provisioning (its infrastructure not provisioned)", phase)
		}
		if observed, _, _ := unstructured.NestedInt64(cluster.Object, "status", "observedGeneration"); observed != cluster.GetGeneration() {
			return fmt.Errorf("status.observedGeneration %d, want %d", observed, cluster.GetGeneration())
		}
		conditions, _, _ := unstructured.NestedSlice(cluster.Object, "status", "conditions")
		var types []string
		for _, cond := range conditions {
			if m, ok := cond.(map[string]any); ok {
				types = append(types, fmt.Sprint(m["type"]))
			}
		}
		for _, want := range []string{"InfrastructureReady", "ControlPlaneAvailable", "Available"} {
			if !slices.Contains(types, want) {
				return fmt.Errorf("status.conditions %v, want %s among them", types, want)
			}
		}
		return nil
	})

	if err := c.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, capi, "the Cluster controller to let the deleted Cluster go", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there, finalizers %v", cluster.GetFinalizers())
	})
}

// TestClusterAPIWebhooksServeTheManagementCluster: the API server calls the core manager's own
// webhooks, as on a management cluster where Cluster API is installed. A MachineDeployment is
// defaulted by Cluster API's code, a Machine without bootstrap is refused by its validation, and a
// Cluster written in v1beta2 reads back in v1beta1 through its conversion. While the manager is
// stopped they fail closed: nothing of Cluster API's can be written; started again in the same
// work directory, it serves them where the API server calls them.
func TestClusterAPIWebhooksServeTheManagementCluster(t *testing.T) {
	assets := requireAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg, c := startClusterAPIServer(t, assets)
	workDir := t.TempDir()
	capi := startCoreManager(ctx, t, testbed.ClusterAPIOptions{Assets: assets, Config: cfg, WorkDir: workDir})
	const namespace = "default"
	infraRef := map[string]any{"apiGroup": infrav1.GroupVersion.Group, "kind": "HarvesterMachineTemplate", "name": "workers"}

	// What a user writes of a MachineDeployment; the rest is Cluster API's defaulting.
	userMachineDeployment := func(name string) *unstructured.Unstructured {
		return testbed.ClusterAPIObject(testbed.MachineDeploymentGVK, namespace, name, map[string]any{
			"clusterName": "webhooks",
			"template": map[string]any{"spec": map[string]any{
				"clusterName": "webhooks", "bootstrap": map[string]any{"dataSecretName": "workers"}, "infrastructureRef": infraRef,
			}},
		})
	}
	md := userMachineDeployment("workers")
	if err := c.Create(ctx, md); err != nil {
		t.Fatalf("create a MachineDeployment with what a user writes: %v", err)
	}
	selector, _, _ := unstructured.NestedString(md.Object, "spec", "selector", "matchLabels", "cluster.x-k8s.io/deployment-name")
	label, _, _ := unstructured.NestedString(md.Object, "spec", "template", "metadata", "labels", "cluster.x-k8s.io/deployment-name")
	if clusterLabel := md.GetLabels()["cluster.x-k8s.io/cluster-name"]; selector != "workers" || label != "workers" || clusterLabel != "webhooks" {
		t.Errorf("the MachineDeployment was not defaulted by Cluster API's webhook: selector %q, template label %q, cluster label %q", selector, label, clusterLabel)
	}

	machine := testbed.ClusterAPIObject(testbed.MachineGVK, namespace, "no-bootstrap", map[string]any{
		"clusterName": "webhooks", "bootstrap": map[string]any{}, "infrastructureRef": infraRef,
	})
	err := c.Create(ctx, machine)
	if err == nil || !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "bootstrap") {
		t.Errorf("a Machine without bootstrap data or config: %v, want Cluster API's validation to refuse it", err)
	}

	cluster := testbed.ClusterAPIObject(testbed.ClusterGVK, namespace, "webhooks", map[string]any{
		"clusterNetwork":    map[string]any{"serviceDomain": "cluster.local"},
		"infrastructureRef": unprovisionedInfrastructure(ctx, t, c, namespace, "webhooks"),
	})
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	old := &unstructured.Unstructured{}
	old.SetGroupVersionKind(schema.GroupVersionKind{Group: testbed.ClusterGVK.Group, Version: "v1beta1", Kind: "Cluster"})
	if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), old); err != nil {
		t.Fatalf("read the Cluster in v1beta1 (through the conversion webhook): %v", err)
	}
	if domain, _, _ := unstructured.NestedString(old.Object, "spec", "clusterNetwork", "serviceDomain"); old.GetAPIVersion() != "cluster.x-k8s.io/v1beta1" || domain != "cluster.local" {
		t.Errorf("the Cluster read in v1beta1 is %s with serviceDomain %q", old.GetAPIVersion(), domain)
	}

	capi.Stop()
	if err := c.Create(ctx, userMachineDeployment("while-stopped")); err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("a MachineDeployment created while the manager is stopped: %v, want the webhook to fail closed", err)
	}
	startCoreManager(ctx, t, testbed.ClusterAPIOptions{Assets: assets, Config: cfg, WorkDir: workDir})
	if err := c.Create(ctx, userMachineDeployment("after-restart")); err != nil {
		t.Errorf("a MachineDeployment created once the manager is started again: %v", err)
	}
}

// startCoreManager starts the Cluster API core manager (testbed.StartClusterAPI), stopped when
// the test ends; if the test failed, its log's last lines are shown then, and whatever else
// alsoShow gives.
func startCoreManager(ctx context.Context, t *testing.T, opts testbed.ClusterAPIOptions, alsoShow ...func() string) *testbed.ClusterAPI {
	t.Helper()
	capi, err := testbed.StartClusterAPI(ctx, opts)
	t.Cleanup(func() {
		capi.Stop()
		if t.Failed() {
			t.Logf("the Cluster API manager's log (%s):\n%s", capi.LogPath, capi.LogTail())
			for _, show := range alsoShow {
				t.Log(show())
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return capi
}

// startClusterAPIServer starts an API server with Cluster API core's CRDs and the provider's
// infrastructure CRDs (Cluster API's conversion reads the CRD of each kind a reference names).
func startClusterAPIServer(t *testing.T, assets string) (*rest.Config, client.Client) {
	t.Helper()
	env := &envtest.Environment{ErrorIfCRDPathMissing: true, CRDDirectoryPaths: []string{
		testbed.ClusterAPICRDs(assets), filepath.Join(repoRoot(), "config", "crd", "infrastructure"),
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
	return cfg, c
}

// unprovisionedInfrastructure creates a HarvesterCluster that no provider runs for, and returns a
// Cluster's reference to it.
func unprovisionedInfrastructure(ctx context.Context, t *testing.T, c client.Client, namespace, name string) map[string]any {
	t.Helper()
	hc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": infrav1.GroupVersion.String(), "kind": "HarvesterCluster",
		"metadata": map[string]any{"namespace": namespace, "name": name},
		"spec":     map[string]any{"providerConfigRef": map[string]any{"name": "harvester"}},
	}}
	if err := c.Create(ctx, hc); err != nil {
		t.Fatalf("create HarvesterCluster %s/%s: %v", namespace, name, err)
	}
	return map[string]any{"apiGroup": infrav1.GroupVersion.Group, "kind": "HarvesterCluster", "name": name}
}

func TestMain(m *testing.M) {
	// The provider's controllers and the simulated Harvester's run in this process: warnings and
	// errors only, so the test output stays readable.
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}

// requireAssets returns the directory of Cluster API's assets (CAPI_ASSETS), once it has checked
// that the test control plane (KUBEBUILDER_ASSETS) is there too.
func requireAssets(t *testing.T) string {
	t.Helper()
	assets, err := testbed.ClusterAPIAssets()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with 'make test', which builds the control plane")
	}
	return assets
}

// pinnedVersion is the version of sigs.k8s.io/cluster-api that hack/tools/capi/go.mod pins.
func pinnedVersion(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "hack", "tools", "capi", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "sigs.k8s.io/cluster-api" {
			return fields[1]
		}
	}
	t.Fatal("hack/tools/capi/go.mod requires no sigs.k8s.io/cluster-api")
	return ""
}

// waitFor retries check until it returns nil; it fails the test when the context ends or the
// manager exits.
func waitFor(ctx context.Context, t *testing.T, capi *testbed.ClusterAPI, what string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		if exitErr := capi.Exited(); exitErr != nil {
			t.Fatalf("waiting for %s: %v", what, exitErr)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// prometheusOperator is the release whose ServiceMonitor CRD the chart's ServiceMonitor is checked
// against; it comes from the Go module proxy like every other dependency.
const prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// The rendered manifests, chart (default and non-default values) and kustomize, are accepted by a
// real API server: server-side apply with dry-run, so the schema, defaulting and admission all run.
func TestManifestsApplyServerSide(t *testing.T) {
	requireControlPlane(t)
	env := &envtest.Environment{CRDDirectoryPaths: []string{serviceMonitorCRD(t)}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Namespaces must exist for a dry-run of what goes into them.
	for _, ns := range []string{"butler-system", "tenant-a"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	renders := map[string][]*unstructured.Unstructured{"kustomize config/default": kustomizeBuild(t)}
	for name, values := range map[string]string{"chart, default values": "", "chart, non-default values": nonDefaultValues} {
		objs, err := helmTemplate(t, values)
		if err != nil {
			t.Fatal(err)
		}
		renders[name] = objs
	}
	for name, objs := range renders {
		t.Run(name, func(t *testing.T) {
			kinds := map[string]int{}
			for _, obj := range objs {
				if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.DryRunAll,
					client.FieldOwner("butler-provider-harvester-test"), client.ForceOwnership); err != nil {
					t.Errorf("%s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
				}
				kinds[obj.GetKind()]++
			}
			for _, kind := range []string{"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service"} {
				if kinds[kind] == 0 {
					t.Errorf("no %s was rendered (got %v)", kind, kinds)
				}
			}
		})
	}

	// The check can fail: the API server refuses a Deployment that its schema does not allow.
	bad := find(kustomizeBuild(t), "Deployment")[0] // fresh: Apply wrote the server's answer into the others
	_ = unstructured.SetNestedField(bad.Object, int64(-1), "spec", "replicas")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(bad), client.DryRunAll,
		client.FieldOwner("butler-provider-harvester-test"), client.ForceOwnership); !apierrors.IsInvalid(err) {
		t.Errorf("a Deployment with replicas -1 was not refused: %v", err)
	}
}

func requireControlPlane(t *testing.T) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run these tests with 'make test', which builds the control plane")
	}
}

// serviceMonitorCRD downloads the prometheus-operator module (cached by Go) and returns a directory
// holding only its ServiceMonitor CRD.
func serviceMonitorCRD(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", prometheusOperator).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", prometheusOperator, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s printed %s", prometheusOperator, out)
	}
	data, err := os.ReadFile(filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_servicemonitors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "kind: ServiceMonitor") {
		t.Fatal("the prometheus-operator module has no ServiceMonitor CRD")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "servicemonitors.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

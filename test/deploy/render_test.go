// Package deploy tests what a user installs: the Helm chart, the kustomize manifests and the image
// build. It renders both with the pinned tools (hack/tools), parses the manager's container args with
// the binary's own flag set, applies the manifests to a real API server, and runs a whole
// MachineRequest lifecycle with the manager acting as its ServiceAccount, bound only by the
// generated RBAC, against a Harvester user bound only by the documented Role.
package deploy

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

const chartDir = "charts/butler-provider-harvester"

// releaseFullname is the chart's full name for release "butler" (helmTemplate's): the name of the
// manager's ServiceAccount, and the prefix of its other objects.
const releaseFullname = "butler-butler-provider-harvester"

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// runTool runs a tool pinned in hack/tools/<name>/go.mod from the repository root.
func runTool(name string, args ...string) (string, error) {
	cmd := exec.Command("go", append([]string{"tool", "-modfile=hack/tools/" + name + "/go.mod", name}, args...)...)
	cmd.Dir = repoRoot()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// helmTemplate renders the chart as release "butler" in namespace butler-system (testbed.Namespace) with the given
// values (a YAML document), CRDs included.
func helmTemplate(t *testing.T, values string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runTool("helm", "template", "butler", chartDir, "--namespace", "butler-system",
		"--kube-version", "1.37.0", "--include-crds", "--values", f)
	if err != nil {
		return nil, err
	}
	return decodeAll(t, out), nil
}

func kustomizeBuild(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	out, err := runTool("kustomize", "build", "config/default")
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, out)
}

func decodeAll(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testbed.DecodeManifests([]byte(manifests))
	if err != nil {
		t.Fatalf("rendered manifests do not parse: %v", err)
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// deployment returns the manager's Deployment of the manifests (testbed.ManagerDeployment).
func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	d, err := testbed.ManagerDeployment(objs)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// managerOptions parses the manager container's args with the binary's own flag set
// (testbed.ManagerArgs).
func managerOptions(t *testing.T, d *appsv1.Deployment) (*options.Options, []string) {
	t.Helper()
	o, args, err := testbed.ManagerArgs(d)
	if err != nil {
		t.Fatal(err)
	}
	return o, args
}

func TestMain(m *testing.M) {
	// The simulated Harvester runs controllers in this process: warnings and errors only.
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}

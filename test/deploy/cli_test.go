package deploy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The provider as the Butler CLI deploys it (testdata/butler-cli.yaml): run with the CLI's args,
// as its ServiceAccount, bound only by the rules both the CLI's manifest and the published chart
// grant, so without ProviderConfig status, events.k8s.io events, TokenReviews or
// SubjectAccessReviews. A MachineRequest goes through its whole lifecycle, and the manager works
// without an error loop: its events are core/v1 Events, the ProviderConfig checks it cannot write
// still hold back a machine whose network does not exist, the secure metrics endpoint answers 500
// naming the missing permission, each missing permission is logged once, and it stays within the
// CLI's memory limit.
func TestInstalledAsTheButlerCLIDeploysIt(t *testing.T) {
	requireControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	data, err := os.ReadFile(filepath.Join(repoRoot(), "test", "deploy", "testdata", "butler-cli.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fixture := decodeAll(t, string(data))
	d := deployment(t, fixture)
	_, args := managerOptions(t, d) // the CLI's args, parsed with the manager's own flag set
	// The CLI's host ports (8082 and 8083) may be taken on a machine that runs other tests: the
	// same flags, with free loopback addresses.
	metricsAddr, probeAddr := freeAddrs(t)
	args = withFlag(t, args, "metrics-bind-address", metricsAddr)
	args = withFlag(t, args, "health-probe-bind-address", probeAddr)
	// As the CLI applies its manifest: the RBAC comes with the Deployment.
	tb, harvesterToken := startInstalled(ctx, t, d.Spec.Template.Spec.ServiceAccountName, args,
		func(ctx context.Context, tb *testbed.Testbed) error { return tb.Apply(ctx, fixture) })
	waitFor(t, 90*time.Second, "/readyz", func() bool { return testbed.Probe(probeAddr, "/readyz") == http.StatusOK })

	pc, sample := createSampleMachine(ctx, t, tb)
	mr := waitRunning(ctx, t, tb, client.ObjectKeyFromObject(sample))
	gated := requireGatedByChecks(ctx, t, tb, pc, sample)

	// The secure metrics endpoint cannot check scrapers: it says which permission it lacks.
	for range 3 {
		code, body := scrapeWithToken(t, "https://"+metricsAddr+"/metrics", "not-a-real-token")
		if code != http.StatusInternalServerError || !strings.Contains(body, "may not create tokenreviews.authentication.k8s.io") ||
			!strings.Contains(body, "--metrics-secure=false") {
			t.Errorf("scrape without TokenReview permission: %d %q; want 500 naming the permission and --metrics-secure=false", code, body)
		}
	}

	// The gated machine created nothing on Harvester: once this one is deleted, nothing is left.
	deleteMachine(ctx, t, tb, mr)

	requireCoreEvents(ctx, t, tb, map[string]string{
		"ProviderConfig/" + pc.Name:    "PreflightPassed",
		"MachineRequest/" + mr.Name:    "Running",
		"ProviderConfig/no-network":    "PreflightFailed",
		"MachineRequest/" + gated.Name: v1alpha1.ReasonProviderConfigNotReady,
	})
	leases := &coordinationv1.LeaseList{}
	if err := tb.Mgmt.List(ctx, leases, client.InNamespace(testbed.Namespace)); err != nil || len(leases.Items) != 0 {
		t.Errorf("with --leader-elect=false the manager took %d Leases (%v)", len(leases.Items), err)
	}

	log := managerLog(t, tb)
	requireLogWithoutSecrets(t, log, harvesterToken)
	requireNoErrorLoop(t, log)
	for what, line := range map[string]string{
		"events fall back to core/v1":         "Recording core/v1 Events",
		"ProviderConfig status not written":   "may not write ProviderConfig status",
		"metrics cannot review tokens":        "may not create tokenreviews.authentication.k8s.io",
		"ImageSync off without butlerconfigs": "ImageSync controller is off",
	} {
		if n := strings.Count(log, line); n != 1 {
			t.Errorf("%s: the log says %q %d times, want once", what, line, n)
		}
	}

	// The CLI's memory limit: the manager's peak resident memory stays well below it.
	limit := d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value()
	if peak := peakRSS(t, tb.ManagerPID()); peak > limit/2 {
		t.Errorf("the manager's peak RSS is %d MiB, more than half the CLI's limit of %d MiB", peak>>20, limit>>20)
	} else {
		t.Logf("peak RSS %d MiB; the CLI's limit is %d MiB", peak>>20, limit>>20)
	}
}

// requireGatedByChecks shows that the ProviderConfig checks, which the manager may not write to
// the status, still hold machines back: a copy of ProviderConfig pc whose network does not exist
// fails its checks (a core Event says so, the status stays empty), and a copy of MachineRequest
// sample using it waits with ProviderConfigNotReady naming the failed check. It returns that
// MachineRequest.
func requireGatedByChecks(ctx context.Context, t *testing.T, tb *testbed.Testbed, pc *v1alpha1.ProviderConfig, sample *v1alpha1.MachineRequest) *v1alpha1.MachineRequest {
	t.Helper()
	broken := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "no-network", Namespace: pc.Namespace}, Spec: *pc.Spec.DeepCopy()}
	broken.Spec.Harvester.NetworkName = testbed.HarvesterNamespace + "/no-such-network"
	if err := tb.Mgmt.Create(ctx, broken); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the checks of ProviderConfig no-network to fail (a core Event)", func() bool {
		return findCoreEvent(ctx, t, tb, "ProviderConfig", broken.Name, "PreflightFailed") != nil
	})
	if err := tb.Mgmt.Get(ctx, client.ObjectKeyFromObject(broken), broken); err != nil || broken.Status.Validated || len(broken.Status.Conditions) > 0 {
		t.Errorf("ProviderConfig status written without permission: %+v (%v)", broken.Status, err)
	}
	mr := &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Name: "gated-0", Namespace: sample.Namespace}, Spec: *sample.Spec.DeepCopy()}
	mr.Spec.MachineName, mr.Spec.ProviderRef = "gated-0", v1alpha1.ProviderReference{Name: broken.Name}
	if err := tb.Mgmt.Create(ctx, mr); err != nil {
		t.Fatal(err)
	}
	var degraded *metav1.Condition
	waitFor(t, time.Minute, "MachineRequest gated-0 to wait for its ProviderConfig", func() bool {
		if tb.Mgmt.Get(ctx, client.ObjectKeyFromObject(mr), mr) != nil {
			return false
		}
		degraded = meta.FindStatusCondition(mr.Status.Conditions, v1alpha1.ConditionDegraded)
		return degraded != nil && degraded.Reason == v1alpha1.ReasonProviderConfigNotReady
	})
	if !strings.Contains(degraded.Message, v1alpha1.ConditionNetworkReady+"=False") || mr.Status.ProviderID != "" || mr.Annotations[v1alpha1.AnnotationPlacement] != "" {
		t.Errorf("MachineRequest gated-0: %s %q, providerID %q, placement %q; want the failed NetworkReady check named, no VM and no place recorded",
			degraded.Reason, degraded.Message, mr.Status.ProviderID, mr.Annotations[v1alpha1.AnnotationPlacement])
	}
	return mr
}

// findCoreEvent returns the manager's core/v1 Event about kind/name with reason, if there is one.
func findCoreEvent(ctx context.Context, t *testing.T, tb *testbed.Testbed, kind, name, reason string) *corev1.Event {
	t.Helper()
	list := &corev1.EventList{}
	if err := tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
		t.Fatal(err)
	}
	for i, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason {
			return &list.Items[i]
		}
	}
	return nil
}

// requireCoreEvents checks that the manager recorded an event of each reason about each object
// ("Kind/name"), and that it recorded them through the core/v1 API: with the source component that
// API sets (events.k8s.io/v1 Events leave it empty and set an action).
func requireCoreEvents(ctx context.Context, t *testing.T, tb *testbed.Testbed, want map[string]string) {
	t.Helper()
	for object, reason := range want {
		kind, name, _ := strings.Cut(object, "/")
		e := findCoreEvent(ctx, t, tb, kind, name, reason)
		switch {
		case e == nil:
			t.Errorf("no event %s about %s", reason, object)
		case e.Source.Component != "butler-provider-harvester" || e.Action != "":
			t.Errorf("event %s about %s has source %q and action %q: not recorded through the core/v1 API", reason, object, e.Source.Component, e.Action)
		}
	}
}

// scrapeWithToken scrapes the secure metrics endpoint (self-signed) with a bearer token.
func scrapeWithToken(t *testing.T, url, token string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the manager's certificate is self-signed on purpose
	}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// withFlag sets flag to value in args, which must hold it already.
func withFlag(t *testing.T, args []string, flag, value string) []string {
	t.Helper()
	out := make([]string, len(args))
	found := false
	for i, a := range args {
		if strings.HasPrefix(a, "--"+flag+"=") {
			a, found = "--"+flag+"="+value, true
		}
		out[i] = a
	}
	if !found {
		t.Fatalf("args %q have no --%s", args, flag)
	}
	return out
}

// forbiddenRequest is what the API server says of a request RBAC refused.
var forbiddenRequest = regexp.MustCompile(`cannot (\w+) resource \\?"([^"\\]+)\\?" in API group \\?"([^"\\]*)\\?"`)

// requireNoErrorLoop checks that the manager did not log the same refusal or error again and
// again: at most one line per refused verb and resource, and no error message twice.
func requireNoErrorLoop(t *testing.T, log string) {
	t.Helper()
	forbidden, errors := map[string][]string{}, map[string][]string{}
	for _, line := range strings.Split(log, "\n") {
		if m := forbiddenRequest.FindStringSubmatch(line); m != nil {
			key := m[1] + " " + m[2] + "." + m[3]
			forbidden[key] = append(forbidden[key], line)
		}
		if strings.Contains(line, "level=ERROR") {
			msg := line
			if m := regexp.MustCompile(`msg=("(?:[^"\\]|\\.)*"|\S+)`).FindStringSubmatch(line); m != nil {
				msg = m[1]
			}
			errors[msg] = append(errors[msg], line)
		}
	}
	for key, lines := range forbidden {
		if len(lines) > 1 {
			t.Errorf("the manager logged %d refusals to %s, want one:\n%s", len(lines), key, strings.Join(lines, "\n"))
		}
	}
	for msg, lines := range errors {
		if len(lines) > 1 {
			t.Errorf("the manager logged the error %s %d times, want once:\n%s", msg, len(lines), strings.Join(lines, "\n"))
		}
	}
	t.Logf("refusals logged once each: %s", strings.Join(sortedKeys(forbidden), ", "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// peakRSS is a process's peak resident memory in bytes (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB$`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatalf("/proc/%d/status has no VmHWM", pid)
	}
	kb, _ := strconv.ParseInt(m[1], 10, 64)
	return kb << 10
}

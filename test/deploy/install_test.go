package deploy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The provider as installed: the chart, watching its own namespace only, applied to a real
// management API server, the manager run with the Deployment's own args, acting as its
// ServiceAccount (impersonated), so the chart's RBAC is all it has: controller-gen's rules, with
// Secrets readable in the watched namespace only (a Role there). config/default grants the same
// rules, Secrets cluster-wide. On Harvester it acts as a ServiceAccount bound only by
// config/harvester/rbac.yaml. A MachineRequest goes through its whole lifecycle; readyz, leader
// election, --watch-namespaces and the secure metrics endpoint are checked on the way.
func TestInstalledWithLeastPrivilege(t *testing.T) {
	requireControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rendered, err := helmTemplate(t, "watchNamespaces: ["+testbed.Namespace+"]\n")
	if err != nil {
		t.Fatal(err)
	}
	d := deployment(t, rendered)
	_, args := managerOptions(t, d)
	metricsAddr, probeAddr := freeAddrs(t)
	// Out of a cluster the manager cannot find its namespace, and ports must be free.
	args = append(args, "--metrics-bind-address="+metricsAddr, "--health-probe-bind-address="+probeAddr,
		"--leader-election-namespace="+testbed.Namespace)

	// The manager starts before its RBAC is installed, to show that it is not ready then.
	tb, harvesterToken := startInstalled(ctx, t, d.Spec.Template.Spec.ServiceAccountName, args, nil)

	// Without RBAC the caches cannot sync: alive, but not ready.
	waitFor(t, 30*time.Second, "the manager to answer /healthz", func() bool { return testbed.Probe(probeAddr, "/healthz") == http.StatusOK })
	for range 3 {
		if code := testbed.Probe(probeAddr, "/readyz"); code != http.StatusInternalServerError {
			fatalWithLog(t, tb, "/readyz answered %d before the manager could list anything, want 500", code)
		}
		time.Sleep(500 * time.Millisecond)
	}

	if err := tb.Apply(ctx, rendered); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 90*time.Second, "/readyz once the RBAC is installed", func() bool { return testbed.Probe(probeAddr, "/readyz") == http.StatusOK })
	t.Logf("ready %s after the RBAC was applied", time.Since(start).Round(time.Millisecond))
	logBeforeRBAC := len(managerLog(t, tb))

	pc, sample := createSampleMachine(ctx, t, tb)
	waitFor(t, time.Minute, "the ProviderConfig to pass its checks with the Harvester Role", func() bool {
		return tb.Mgmt.Get(ctx, client.ObjectKeyFromObject(pc), pc) == nil && pc.Status.Ready
	})
	unwatched := machineRequestElsewhere(ctx, t, tb, pc, sample)
	mr := waitRunning(ctx, t, tb, client.ObjectKeyFromObject(sample))
	if err := tb.Mgmt.Get(ctx, client.ObjectKeyFromObject(unwatched), unwatched); err != nil ||
		len(unwatched.Finalizers) > 0 || unwatched.Status.Phase != "" {
		t.Errorf("MachineRequest %s outside --watch-namespaces was touched: finalizers %v, phase %q (%v)",
			client.ObjectKeyFromObject(unwatched), unwatched.Finalizers, unwatched.Status.Phase, err)
	}

	lease := &coordinationv1.Lease{}
	if err := tb.Mgmt.Get(ctx, client.ObjectKey{Namespace: testbed.Namespace, Name: "butler-provider-harvester.butler.butlerlabs.dev"}, lease); err != nil ||
		lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		fatalWithLog(t, tb, "no leader holds the Lease: %v %+v", err, lease.Spec)
	}

	scrape := scraper(t, tb, "https://"+metricsAddr+"/metrics", releaseFullname+"-metrics-reader")
	body := scrape()
	requireSeries(t, body, metrics.MachineRequestsName+`{phase="Running"}`, 1)
	requireSeries(t, body, metrics.ProvisioningDurationName+`_count`, 1)
	requireSeries(t, body, metrics.HarvesterAPIRequestsName+`{code="201",resource="virtualmachines.kubevirt.io",verb="create"}`, 1)
	requireSeries(t, body, `controller_runtime_reconcile_total{controller="machinerequest",result="success"}`, -1)

	deleteMachine(ctx, t, tb, mr)
	body = scrape()
	requireSeries(t, body, metrics.MachineRequestsName+`{phase="Running"}`, 0)
	requireSeries(t, body, metrics.DeletionDurationName+`_count`, 1)
	requireSeries(t, body, metrics.HarvesterAPIRequestsName+`{code="200",resource="virtualmachines.kubevirt.io",verb="delete"}`, 1)

	// A ProviderConfig for a Harvester namespace the Role does not cover: it is reported not
	// ready, and Harvester's refusals are counted as API errors.
	other := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "not-permitted", Namespace: testbed.Namespace}, Spec: *pc.Spec.DeepCopy()}
	other.Spec.Harvester.Namespace = "kube-system"
	if err := tb.Mgmt.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "ProviderConfig not-permitted to report missing permissions", func() bool {
		return tb.Mgmt.Get(ctx, client.ObjectKeyFromObject(other), other) == nil &&
			meta.IsStatusConditionFalse(other.Status.Conditions, v1alpha1.ConditionPermissionsReady)
	})
	body = scrape()
	refusedLists := metrics.HarvesterAPIErrorsName + `{code="403",resource="virtualmachines.kubevirt.io",verb="list"}`
	if v, ok := seriesValue(body, refusedLists); !ok || v == 0 {
		t.Errorf("no refused list counted in %s:\n%s", metrics.HarvesterAPIErrorsName, grepLines(body, metrics.HarvesterAPIErrorsName, "\x00"))
	}
	// Informers that cannot sync are stopped once the provider falls back to live reads (after
	// 15s): the refused lists stop.
	time.Sleep(17 * time.Second)
	before, _ := seriesValue(scrape(), refusedLists)
	time.Sleep(5 * time.Second)
	body = scrape()
	if after, _ := seriesValue(body, refusedLists); after != before {
		t.Errorf("refused lists went on after the fallback to live reads: %v, 5s later %v", before, after)
	}
	t.Logf("scraped %d lines; the provider's own:\n%s", strings.Count(body, "\n"), grepLines(body, "butler_harvester_", "_bucket"))

	requireJSONLogWithoutSecrets(t, managerLog(t, tb), harvesterToken)

	// With RBAC in place, nothing the manager did on the management cluster was forbidden.
	if forbidden := grepLines(managerLog(t, tb)[logBeforeRBAC:], "forbidden", "kube-system"); forbidden != "" {
		t.Errorf("the manager was refused something with the generated RBAC:\n%s", forbidden)
	}
}

// startInstalled starts the testbed as testbed.StartInstalled does: the manager runs with args as
// ServiceAccount butler-system/<serviceAccount>, before (if set) runs before it starts. It returns
// the testbed, stopped when the test ends, and the Harvester user's token.
func startInstalled(ctx context.Context, t *testing.T, serviceAccount string, args []string, before func(context.Context, *testbed.Testbed) error) (*testbed.Testbed, string) {
	t.Helper()
	tb, harvesterToken, err := testbed.StartInstalled(ctx, testbed.Options{
		RepoRoot: repoRoot(), WorkDir: t.TempDir(), ManagerArgs: args, BeforeManager: before,
		Sim: sim.Config{BootDelay: 300 * time.Millisecond, IPDelay: 100 * time.Millisecond},
	}, serviceAccount)
	t.Cleanup(tb.Stop)
	if err != nil {
		t.Fatal(err)
	}
	return tb, harvesterToken
}

// fatalWithLog fails the test with the end of the manager's log.
func fatalWithLog(t *testing.T, tb *testbed.Testbed, format string, a ...any) {
	t.Helper()
	t.Fatalf(format+"\n%s", append(a, tb.ManagerLogTail())...)
}

// createSampleMachine creates the sample ProviderConfig (config/samples/providerconfig.yaml) and
// the sample MachineRequest machinerequest-worker-0.yaml, and returns both as created.
func createSampleMachine(ctx context.Context, t *testing.T, tb *testbed.Testbed) (*v1alpha1.ProviderConfig, *v1alpha1.MachineRequest) {
	t.Helper()
	pc, mr := &v1alpha1.ProviderConfig{}, &v1alpha1.MachineRequest{}
	for _, sample := range []struct {
		file string
		into client.Object
	}{{"providerconfig.yaml", pc}, {"machinerequest-worker-0.yaml", mr}} {
		objs, err := tb.ApplyFile(ctx, filepath.Join(repoRoot(), "config", "samples", sample.file))
		if err != nil {
			t.Fatal(err)
		}
		convert(t, objs[0], sample.into)
	}
	return pc, mr
}

// waitRunning waits for a MachineRequest to be Running with an IP address, and returns it.
func waitRunning(ctx context.Context, t *testing.T, tb *testbed.Testbed, key client.ObjectKey) *v1alpha1.MachineRequest {
	t.Helper()
	mr := &v1alpha1.MachineRequest{}
	running := func() bool {
		return tb.Mgmt.Get(ctx, key, mr) == nil && mr.Status.Phase == v1alpha1.MachinePhaseRunning && mr.Status.IPAddress != ""
	}
	for deadline := time.Now().Add(2 * time.Minute); !running(); time.Sleep(250 * time.Millisecond) {
		if time.Now().After(deadline) {
			fatalWithLog(t, tb, "timed out after 2m waiting for MachineRequest %s to be Running: phase %q, conditions %+v",
				key, mr.Status.Phase, mr.Status.Conditions)
		}
	}
	t.Logf("%s Running at %s", key, mr.Status.IPAddress)
	return mr
}

// deleteMachine deletes a MachineRequest, waits for it to be gone, and checks that nothing is
// left on Harvester.
func deleteMachine(ctx context.Context, t *testing.T, tb *testbed.Testbed, mr *v1alpha1.MachineRequest) {
	t.Helper()
	if err := tb.Mgmt.Delete(ctx, mr); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(mr)
	waitFor(t, time.Minute, "MachineRequest "+key.String()+" to be gone", func() bool { return apierrors.IsNotFound(tb.Mgmt.Get(ctx, key, mr)) })
	if vms, vmis, pvcs, secrets, err := tb.HarvesterLeft(ctx); err != nil || vms+vmis+pvcs+secrets != 0 {
		fatalWithLog(t, tb, "left on Harvester: %d VMs, %d VMIs, %d PVCs, %d Secrets (%v)", vms, vmis, pvcs, secrets, err)
	}
}

// machineRequestElsewhere creates, in a namespace the manager does not watch, a copy of the
// ProviderConfig and of the MachineRequest (with another machine name).
func machineRequestElsewhere(ctx context.Context, t *testing.T, tb *testbed.Testbed, pc *v1alpha1.ProviderConfig, sample client.Object) *v1alpha1.MachineRequest {
	t.Helper()
	const ns = "unwatched"
	mr := &v1alpha1.MachineRequest{}
	if err := tb.Mgmt.Get(ctx, client.ObjectKeyFromObject(sample), mr); err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: pc.Name, Namespace: ns}, Spec: *pc.Spec.DeepCopy()},
		&v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Name: "unwatched-0", Namespace: ns}, Spec: *mr.Spec.DeepCopy()},
	}
	objs[2].(*v1alpha1.MachineRequest).Spec.MachineName = "unwatched-0"
	for _, o := range objs {
		if err := tb.Mgmt.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return objs[2].(*v1alpha1.MachineRequest)
}

// requireJSONLogWithoutSecrets checks that every line the manager logged is a JSON object with
// time, level and msg (log/slog's JSON handler, also for controller-runtime and client-go), and
// that no secret appears in it.
func requireJSONLogWithoutSecrets(t *testing.T, log string, secrets ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for _, line := range lines {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil || entry["time"] == nil || entry["level"] == nil || entry["msg"] == nil {
			t.Errorf("log line is not a log/slog JSON record: %s", line)
		}
	}
	requireLogWithoutSecrets(t, log, secrets...)
	t.Logf("%d JSON log lines, no credentials in them", len(lines))
}

// requireLogWithoutSecrets checks that no secret appears in the manager's log.
func requireLogWithoutSecrets(t *testing.T, log string, secrets ...string) {
	t.Helper()
	for _, secret := range secrets {
		if secret == "" || strings.Contains(log, secret) {
			t.Errorf("a credential (%d bytes) appears in the manager's log, or is empty", len(secret))
		}
	}
}

// scraper returns a function that scrapes the secure metrics endpoint with the token of a
// ServiceAccount bound to ClusterRole metricsReader, after checking that no token gets 401 and the
// token of an unbound ServiceAccount gets 403. Every scrape offers HTTP/2 and checks that the
// endpoint answers with HTTP/1.1 (--enable-http2 is off).
func scraper(t *testing.T, tb *testbed.Testbed, url, metricsReader string) func() string {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(tb.MgmtConfig)
	if err != nil {
		t.Fatal(err)
	}
	token := func(name string) string {
		t.Helper()
		if err := tb.Mgmt.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testbed.Namespace}}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(testbed.Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, stranger := token("prometheus"), token("stranger")
	if err := tb.Mgmt.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reads-butler-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsReader},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: testbed.Namespace}},
	}); err != nil {
		t.Fatal(err)
	}
	// The manager's certificate is self-signed (no --metrics-cert-dir), as the ServiceMonitor expects.
	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed on purpose
		ForceAttemptHTTP2: true,                                  // would use HTTP/2 if offered
	}}
	get := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("scrape %s: %v", url, err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.ProtoMajor != 1 {
			t.Errorf("the metrics endpoint answered with %s: HTTP/2 is on without --enable-http2", resp.Proto)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("scrape without a token: %d, want 401", code)
	}
	if code, _ := get(stranger); code != http.StatusForbidden {
		t.Errorf("scrape with the token of an unbound ServiceAccount: %d, want 403", code)
	}
	return func() string {
		t.Helper()
		var code int
		var body string
		// RBAC caches in the API server may take a moment to see the new binding.
		waitFor(t, 30*time.Second, "a scrape with the metrics-reader token", func() bool {
			code, body = get(reader)
			return code == http.StatusOK
		})
		return body
	}
}

// requireSeries checks a series' value in a scrape; want < 0 only requires the series.
func requireSeries(t *testing.T, body, series string, want float64) {
	t.Helper()
	got, ok := seriesValue(body, series)
	switch {
	case !ok:
		t.Errorf("no series %s in the scrape:\n%s", series, grepLines(body, strings.SplitN(series, "{", 2)[0], "\x00"))
	case want >= 0 && got != want:
		t.Errorf("%s = %v, want %v", series, got, want)
	}
}

// seriesValue is the value of a series (name and labels exactly as exposed) in a scrape.
func seriesValue(body, series string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// grepLines returns the lines containing match and not containing exclude.
func grepLines(text, match, exclude string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, match) && !strings.Contains(line, exclude) && !strings.HasPrefix(line, "#") {
			out = append(out, "  "+line)
		}
	}
	return strings.Join(out, "\n")
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(250 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// freeAddrs returns two distinct free loopback addresses, for a manager's metrics and probes.
func freeAddrs(t *testing.T) (metrics, probe string) {
	t.Helper()
	addrs, err := testbed.FreeLocalAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0], addrs[1]
}

func managerLog(t *testing.T, tb *testbed.Testbed) string {
	t.Helper()
	log, err := tb.ManagerLog()
	if err != nil {
		t.Fatal(err)
	}
	return log
}

//go:build chaos

// Package chaos provisions and deletes many machines while the manager is killed (SIGKILL) at
// random moments and a share of the Harvester API requests fail, and checks that nothing is lost,
// duplicated, orphaned or leaked into logs. Run it with `make test-chaos` (CI does).
package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/sim"
	"github.com/butlerdotdev/butler-provider-harvester/internal/testbed"
)

const (
	machines = 200
	kills    = 10
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestCrashesAndAPIFaults(t *testing.T) {
	// The simulator logs through controller-runtime: warnings and errors only.
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with CHAOS_SEED=%d make test-chaos)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0)) //nolint:gosec // G404: seeded so a failing run can be replayed with CHAOS_SEED; nothing secret depends on it
	ctx := context.Background()

	tb, err := testbed.Start(ctx, testbed.Options{
		RepoRoot: repoRoot(), WorkDir: t.TempDir(), WithProxy: true, NetworkCIDR: "10.40.0.0/20",
		Sim:         sim.Config{BootDelay: 2 * time.Second, IPDelay: time.Second},
		ManagerArgs: []string{"--metrics-bind-address=0", "--creating-poll-interval=5s", "--log-level=debug"},
	})
	defer tb.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Seed(ctx); err != nil {
		t.Fatal(err)
	}
	// 10% of the Harvester API requests fail (500, 503, 429) and 1% hang until the client gives up,
	// from before the ProviderConfig's first checks on.
	tb.Harvester.Proxy.SetFaults(sim.ProxyFaults{ErrorRate: 0.10, TimeoutRate: 0.01, Seed: seed})
	if _, err := tb.ApplyFile(ctx, filepath.Join(repoRoot(), "config", "samples", "providerconfig.yaml")); err != nil {
		t.Fatal(err)
	}

	secretMarker := fmt.Sprintf("userdata-secret-%d", seed)
	for i := range machines {
		name := fmt.Sprintf("chaos-%03d", i)
		if err := tb.Mgmt.Create(ctx, &v1alpha1.MachineRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testbed.Namespace},
			Spec: v1alpha1.MachineRequestSpec{
				ProviderRef: v1alpha1.ProviderReference{Name: "harvester-config"},
				MachineName: name, Role: v1alpha1.MachineRoleWorker, CPU: 2, MemoryMB: 4096, DiskGB: 20,
				UserData: "#cloud-config\n# " + secretMarker + "\n",
			},
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Kill the manager at random moments while the machines are created.
	for k := range kills {
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		if err := tb.KillManager(); err != nil {
			t.Fatalf("kill %d: %v", k+1, err)
		}
	}
	t.Logf("%d SIGKILLs survived", kills)

	// Everything converges: all Running, none Failed, exactly one VM, root PVC and Secret each.
	waitFor(t, tb, 10*time.Minute, func() error {
		list := &v1alpha1.MachineRequestList{}
		if err := tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
			return err
		}
		phases := map[v1alpha1.MachinePhase]int{}
		for _, mr := range list.Items {
			phases[mr.Status.Phase]++
			if mr.Status.Phase == v1alpha1.MachinePhaseFailed {
				t.Fatalf("MachineRequest %s failed: %s: %s", mr.Name, mr.Status.FailureReason, mr.Status.FailureMessage)
			}
		}
		if phases[v1alpha1.MachinePhaseRunning] != machines {
			return fmt.Errorf("phases %v", phases)
		}
		return nil
	})
	counts := harvesterCounts(t, tb)
	for i := range machines {
		name := fmt.Sprintf("chaos-%03d", i)
		for _, obj := range []string{"vm/" + name, "pvc/" + name + "-disk-0", "secret/" + name + "-cloudinit"} {
			if counts[obj] != 1 {
				t.Errorf("%s exists %d times", obj, counts[obj])
			}
		}
	}
	if n := len(counts); n != 3*machines {
		t.Errorf("%d objects on Harvester, want %d", n, 3*machines)
	}
	t.Logf("faults injected by the proxy: %d errors, %d timeouts, of %d requests",
		tb.Harvester.Proxy.Errors.Load(), tb.Harvester.Proxy.Timeouts.Load(), tb.Harvester.Proxy.Requests.Load())

	// Delete everything, with one more kill in the middle: nothing of ours is left.
	if err := tb.Mgmt.DeleteAllOf(ctx, &v1alpha1.MachineRequest{}, client.InNamespace(testbed.Namespace)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := tb.KillManager(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tb, 10*time.Minute, func() error {
		list := &v1alpha1.MachineRequestList{}
		if err := tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d MachineRequests left", len(list.Items))
		}
		return nil
	})
	vms, vmis, pvcs, secrets, err := tb.HarvesterLeft(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("left on Harvester after deletion: %d VMs, %d VMIs, %d PVCs, %d Secrets", vms, vmis, pvcs, secrets)
	if vms+vmis+pvcs+secrets != 0 {
		t.Fatal("objects left behind")
	}

	// No secret material in any log line or event.
	logs, err := tb.ManagerLog()
	if err != nil {
		t.Fatal(err)
	}
	events := &eventsv1.EventList{}
	if err := tb.Mgmt.List(ctx, events, client.InNamespace(testbed.Namespace)); err != nil {
		t.Fatal(err)
	}
	var notes strings.Builder
	for _, e := range events.Items {
		notes.WriteString(e.Note + "\n")
	}
	// The credentials kubeconfig, raw and as the CA data it carries.
	kubeconfig := string(tb.Harvester.Kubeconfig)
	_, caData, _ := strings.Cut(kubeconfig, "certificate-authority-data: ")
	caData, _, _ = strings.Cut(caData, "\n")
	if len(caData) < 40 {
		t.Fatalf("no CA data in the credentials kubeconfig")
	}
	for what, needle := range map[string]string{
		"userData":                  secretMarker,
		"the kubeconfig":            "certificate-authority-data",
		"the kubeconfig's CA data":  caData[:40],
		"the kubeconfig's key data": "client-key-data",
	} {
		if strings.Contains(logs, needle) || strings.Contains(notes.String(), needle) {
			t.Errorf("%s found in the manager's log or events", what)
		}
	}
	t.Logf("scanned %d log bytes and %d events for secret material", len(logs), len(events.Items))
}

func waitFor(t *testing.T, tb *testbed.Testbed, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if err := tb.ManagerExited(); err != nil {
			t.Fatal(err)
		}
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v\n%s", timeout, err, tb.ManagerLogTail())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// harvesterCounts counts our objects on Harvester by kind and name.
func harvesterCounts(t *testing.T, tb *testbed.Testbed) map[string]int {
	t.Helper()
	ctx := context.Background()
	in := client.InNamespace(testbed.HarvesterNamespace)
	out := map[string]int{}
	var mu sync.Mutex
	add := func(k string) { mu.Lock(); out[k]++; mu.Unlock() }
	vms := &kubevirtv1.VirtualMachineList{}
	pvcs := &corev1.PersistentVolumeClaimList{}
	secrets := &corev1.SecretList{}
	for _, l := range []client.ObjectList{vms, pvcs, secrets} {
		if err := tb.Harvester.Client.List(ctx, l, in); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range vms.Items {
		add("vm/" + o.Name)
	}
	for _, o := range pvcs.Items {
		add("pvc/" + o.Name)
	}
	for _, o := range secrets.Items {
		add("secret/" + o.Name)
	}
	return out
}

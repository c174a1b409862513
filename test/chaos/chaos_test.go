//go:build chaos

// Package chaos provisions and deletes many machines while the manager is killed (SIGKILL) at
// random moments and a share of the Harvester API requests fail, and checks that nothing is lost,
// duplicated, recreated, orphaned or leaked into logs. Run it with `make test-chaos` (CI does).
package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

const (
	machines = 200
	kills    = 10 // while the machines are created; one more while they are deleted
	// chaosSchema is the management cluster's CRD set: Butler's published one (see
	// testbed.CRDDirectories), where the provider's guarantees rest on what every schema keeps.
	chaosSchema = "butler-api-v0.13.0"
)

// defaultFaults are the Harvester API faults: shares of all requests (errors, hangs) and of writes
// (conflicts, and writes applied whose response is lost). CHAOS_FAULTS overrides them.
var defaultFaults = sim.ProxyFaults{ErrorRate: 0.10, TimeoutRate: 0.01, ConflictRate: 0.05, DropRate: 0.05}

// parseFaults reads CHAOS_FAULTS, "error=0.1,timeout=0.01,conflict=0.05,drop=0.05" (any subset),
// into a copy of base.
func parseFaults(s string, base sim.ProxyFaults) (sim.ProxyFaults, error) {
	rates := map[string]*float64{"error": &base.ErrorRate, "timeout": &base.TimeoutRate, "conflict": &base.ConflictRate, "drop": &base.DropRate}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		name, value, _ := strings.Cut(item, "=")
		rate, ok := rates[name]
		if !ok {
			return base, fmt.Errorf("CHAOS_FAULTS: unknown fault %q (error, timeout, conflict, drop)", name)
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || v < 0 || v > 1 {
			return base, fmt.Errorf("CHAOS_FAULTS: %s=%q is not a share between 0 and 1", name, value)
		}
		*rate = v
	}
	if base.ErrorRate+base.TimeoutRate+base.ConflictRate+base.DropRate > 1 {
		return base, errors.New("CHAOS_FAULTS: the shares add up to more than 1")
	}
	return base, nil
}

// describeFaults spells faults as CHAOS_FAULTS takes them.
func describeFaults(f sim.ProxyFaults) string {
	return fmt.Sprintf("error=%g,timeout=%g,conflict=%g,drop=%g", f.ErrorRate, f.TimeoutRate, f.ConflictRate, f.DropRate)
}

// machineRequest is a worker of the sample ProviderConfig, named name, with userData.
func machineRequest(name, userData string) *v1alpha1.MachineRequest {
	return &v1alpha1.MachineRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testbed.Namespace},
		Spec: v1alpha1.MachineRequestSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "harvester-config"},
			MachineName: name, Role: v1alpha1.MachineRoleWorker, CPU: 2, MemoryMB: 4096, DiskGB: 20,
			UserData: userData,
		},
	}
}

// simulatorLogsWarningsOnly: the simulator logs through controller-runtime; its warnings and
// errors are worth seeing.
func simulatorLogsWarningsOnly() {
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestCrashesAndAPIFaults(t *testing.T) {
	simulatorLogsWarningsOnly()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	faults, err := parseFaults(os.Getenv("CHAOS_FAULTS"), defaultFaults)
	if err != nil {
		t.Fatal(err)
	}
	faults.Seed = seed
	t.Logf("seed %d, faults %s (replay with CHAOS_SEED=%d CHAOS_FAULTS=%s make test-chaos)", seed, describeFaults(faults), seed, describeFaults(faults))
	rng := rand.New(rand.NewPCG(seed, 0)) //nolint:gosec // G404: seeded so a failing run can be replayed with CHAOS_SEED; nothing secret depends on it
	ctx, cancel := context.WithCancel(context.Background())

	tb, err := testbed.Start(ctx, testbed.Options{
		RepoRoot: repoRoot(), WorkDir: t.TempDir(), WithProxy: true, NetworkCIDR: "10.40.0.0/20",
		// Butler's own MachineRequest CRD, as the Butler CLI installs it: it keeps none of the
		// project's status fields, so every crash shows what the provider recorded where it lasts.
		Schema:      chaosSchema,
		Sim:         sim.Config{BootDelay: 2 * time.Second, IPDelay: time.Second},
		ManagerArgs: []string{"--metrics-bind-address=0", "--creating-poll-interval=5s", "--log-level=debug"},
	})
	defer tb.Stop()
	defer cancel() // first: the VM watch ends before the API servers
	if err != nil {
		t.Fatal(err)
	}
	// Directly, not through the fault proxy: the test's own view must not be blinded by its faults.
	uids, err := watchVMUIDs(ctx, tb.Harvester.Config)
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	if err := tb.Seed(ctx); err != nil {
		t.Fatal(err)
	}
	// From before the ProviderConfig's first checks on.
	tb.Harvester.Proxy.SetFaults(faults)
	if _, err := tb.ApplyFile(ctx, filepath.Join(repoRoot(), "config", "samples", "providerconfig.yaml")); err != nil {
		t.Fatal(err)
	}

	secretMarker := fmt.Sprintf("userdata-secret-%d", seed)
	for i := range machines {
		if err := tb.Mgmt.Create(ctx, machineRequest(fmt.Sprintf("chaos-%03d", i), "#cloud-config\n# "+secretMarker+"\n")); err != nil {
			t.Fatal(err)
		}
	}

	// Kill the manager at random moments while the machines are created.
	for k := range kills {
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		if err := tb.KillManager(); err != nil {
			t.Fatalf("kill %d: %v", k+1, err)
		}
		killed++
	}
	t.Logf("%d SIGKILLs survived", killed)

	// Everything converges: all Running, none Failed, exactly one VM, root PVC and Secret each.
	waitFor(t, tb, uids, 10*time.Minute, func() error {
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
			return fmt.Errorf("phases %v; %s", phases, whereTheyStand(list.Items))
		}
		return nil
	})
	counts, vmList := harvesterObjects(ctx, t, tb)
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
	checkProviderIDs(ctx, t, tb, uids, vmList)
	logFaults(t, tb.Harvester.Proxy, "while creating")

	// Delete everything, with one more kill in the middle: nothing of ours is left.
	if err := tb.Mgmt.DeleteAllOf(ctx, &v1alpha1.MachineRequest{}, client.InNamespace(testbed.Namespace)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := tb.KillManager(); err != nil {
		t.Fatal(err)
	}
	killed++
	waitFor(t, tb, uids, 10*time.Minute, func() error {
		list := &v1alpha1.MachineRequestList{}
		if err := tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			vms, vmis, pvcs, secrets, err := tb.HarvesterLeft(ctx)
			if err != nil {
				return err
			}
			return fmt.Errorf("%d MachineRequests left (%s); on Harvester %d VMs, %d VMIs, %d PVCs, %d Secrets",
				len(list.Items), whereTheyStand(list.Items), vms, vmis, pvcs, secrets)
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
	// The VMs' deletion too went without a VM recreated behind the provider's back.
	if err := uids.Err(); err != nil {
		t.Fatal(err)
	}
	vmNames, vmEvents := uids.Counts()
	t.Logf("%d VM UIDs recorded from %d watch events: none changed across %d SIGKILLs", vmNames, vmEvents, killed)
	logFaults(t, tb.Harvester.Proxy, "in all")

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

// waitFor waits until check passes, failing at once if the manager exits or a VM's identity breaks.
func waitFor(t *testing.T, tb *testbed.Testbed, uids *vmUIDs, timeout time.Duration, check func() error) {
	t.Helper()
	waitUntil(t, tb, timeout, func() error {
		if err := uids.Err(); err != nil {
			t.Fatalf("%v\n%s", err, tb.ManagerLogTail())
		}
		return check()
	})
}

// waitUntil waits until check passes, failing with its last error and the manager's log after
// timeout, or at once if the manager exits.
func waitUntil(t *testing.T, tb *testbed.Testbed, timeout time.Duration, check func() error) {
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

// whereTheyStand groups machines by phase and Progressing reason, with one of each group's
// messages: what a machine that did not get there waits for.
func whereTheyStand(mrs []v1alpha1.MachineRequest) string {
	type group struct {
		n       int
		example string
	}
	groups := map[string]*group{}
	for _, mr := range mrs {
		if mr.Status.Phase == v1alpha1.MachinePhaseRunning {
			continue
		}
		reason, message := "no Progressing condition", ""
		if c := meta.FindStatusCondition(mr.Status.Conditions, v1alpha1.ConditionProgressing); c != nil {
			reason, message = c.Reason, c.Message
		}
		key := fmt.Sprintf("phase %q %s", mr.Status.Phase, reason)
		if groups[key] == nil {
			groups[key] = &group{example: mr.Name + ": " + message}
		}
		groups[key].n++
	}
	keys := slices.Sorted(maps.Keys(groups))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%d with %s (e.g. %s)", groups[k].n, k, groups[k].example))
	}
	return strings.Join(out, "; ")
}

// harvesterObjects counts our objects on Harvester by kind and name, and returns the VMs.
func harvesterObjects(ctx context.Context, t *testing.T, tb *testbed.Testbed) (map[string]int, []kubevirtv1.VirtualMachine) {
	t.Helper()
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
	return out, vms.Items
}

// checkProviderIDs checks that every Running machine's VM is the one first seen under its name,
// labelled with the machine's UID, and that the machine's providerID (and placement, once the
// provider records it) names that VM's UID.
func checkProviderIDs(ctx context.Context, t *testing.T, tb *testbed.Testbed, uids *vmUIDs, vms []kubevirtv1.VirtualMachine) {
	t.Helper()
	byName := map[string]*kubevirtv1.VirtualMachine{}
	for i := range vms {
		byName[vms[i].Name] = &vms[i]
	}
	list := &v1alpha1.MachineRequestList{}
	if err := tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, mr := range list.Items {
		if mr.Status.Phase != v1alpha1.MachinePhaseRunning {
			continue
		}
		vm := byName[mr.Spec.MachineName]
		if vm == nil {
			t.Errorf("MachineRequest %s is Running without a VM %s", mr.Name, mr.Spec.MachineName)
			continue
		}
		first, seen := uids.FirstUID(client.ObjectKeyFromObject(vm))
		want := harvester.ProviderIDPrefix + string(vm.UID)
		switch {
		case !seen:
			t.Errorf("VM %s (UID %s) was never seen by the watch", vm.Name, vm.UID)
		case vm.UID != first:
			t.Errorf("VM %s has UID %s, but was first seen with UID %s", vm.Name, vm.UID, first)
		case vm.Labels[harvester.LabelMachineRequestUID] != string(mr.UID):
			t.Errorf("VM %s is labelled for MachineRequest UID %q, not %s's %s", vm.Name, vm.Labels[harvester.LabelMachineRequestUID], mr.Name, mr.UID)
		case mr.Status.ProviderID != want:
			t.Errorf("MachineRequest %s: providerID %q, want %q", mr.Name, mr.Status.ProviderID, want)
		case !placedAt(&mr, vm.Namespace, vm.Name):
			t.Errorf("MachineRequest %s: annotation %s is %q, want VM %s/%s", mr.Name, v1alpha1.AnnotationPlacement, mr.Annotations[v1alpha1.AnnotationPlacement], vm.Namespace, vm.Name)
		default:
			checked++
		}
	}
	t.Logf("%d providerIDs checked against their VM's UID, first seen and unchanged", checked)
}

// logFaults says how many faults of each kind the proxy has injected.
func logFaults(t *testing.T, p *sim.FaultProxy, when string) {
	t.Helper()
	t.Logf("faults injected by the proxy %s, of %d requests (%d writes): %d errors (500, 503, 429), %d timeouts, %d conflicts, %d dropped responses of applied writes",
		when, p.Requests.Load(), p.Writes.Load(), p.Errors.Load(), p.Timeouts.Load(), p.Conflicts.Load(), p.Dropped.Load())
}

// placedAt reports whether the MachineRequest's recorded place is VM namespace/name.
func placedAt(mr *v1alpha1.MachineRequest, namespace, name string) bool {
	p, err := mr.RecordedPlacement()
	return err == nil && p != nil && p.Namespace == namespace && p.Name == name
}

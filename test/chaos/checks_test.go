//go:build chaos

package chaos

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// TestVMUIDsChecker: the checks the chaos test relies on fail when they should, and only then.
func TestVMUIDsChecker(t *testing.T) {
	vm := func(name, uid, mr string) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: name, UID: types.UID(uid),
			Labels: map[string]string{harvester.LabelMachineRequestUID: mr},
		}}
	}
	w := &vmUIDs{first: map[types.NamespacedName]types.UID{}, live: map[types.UID]vmOwner{}, reported: map[string]bool{}}
	w.observe(vm("a", "uid-a", "mr-a"), false)
	w.observe(vm("a", "uid-a", "mr-a"), false) // an update
	w.observe(vm("b", "uid-b", "mr-b"), false)
	w.observe(toolscache.DeletedFinalStateUnknown{Obj: vm("b", "uid-b", "mr-b")}, true)
	w.observe(vm("c", "uid-c", "mr-b"), false) // the MachineRequest's only VM now
	if err := w.Err(); err != nil {
		t.Fatalf("no invariant is broken, got %v", err)
	}
	if uid, ok := w.FirstUID(types.NamespacedName{Namespace: "default", Name: "a"}); !ok || uid != "uid-a" {
		t.Fatalf("FirstUID(a) = %q, %v", uid, ok)
	}

	w.observe(vm("b", "uid-b2", "mr-b"), false) // recreated, and a second VM of mr-b next to c
	w.observe(vm("b", "uid-b2", "mr-b"), false) // reported once
	err := w.Err()
	if err == nil {
		t.Fatal("a recreated VM and two VMs of one MachineRequest went unnoticed")
	}
	msg := err.Error()
	if !strings.Contains(msg, "VM default/b recreated: UID uid-b when first seen, now uid-b2") ||
		!strings.Contains(msg, "(UID mr-b) has two VMs") || strings.Count(msg, "\n") != 2 {
		t.Fatalf("unexpected report:\n%s", msg)
	}
	if vms, events := w.Counts(); vms != 3 || events != 7 {
		t.Fatalf("Counts() = %d VMs, %d events", vms, events)
	}
}

func TestParseFaults(t *testing.T) {
	got, err := parseFaults(" conflict=0.2, drop=0 ", defaultFaults)
	want := defaultFaults
	want.ConflictRate, want.DropRate = 0.2, 0
	if err != nil || got != want {
		t.Fatalf("parseFaults = %+v, %v; want %+v", got, err, want)
	}
	if got, err := parseFaults("", defaultFaults); err != nil || got != defaultFaults {
		t.Fatalf("empty CHAOS_FAULTS: %+v, %v", got, err)
	}
	if got, err := parseFaults(describeFaults(want), sim.ProxyFaults{}); err != nil || got != want {
		t.Fatalf("describeFaults does not round-trip: %+v, %v", got, err)
	}
	for _, bad := range []string{"errors=0.1", "drop=x", "drop=1.5", "error=0.6,drop=0.5"} {
		if _, err := parseFaults(bad, defaultFaults); err == nil {
			t.Errorf("parseFaults(%q) accepted", bad)
		}
	}
}

func TestWhereTheyStand(t *testing.T) {
	mr := func(name string, phase v1alpha1.MachinePhase, reason, message string) v1alpha1.MachineRequest {
		m := v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1alpha1.MachineRequestStatus{Phase: phase}}
		if reason != "" {
			m.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Reason: reason, Message: message}}
		}
		return m
	}
	got := whereTheyStand([]v1alpha1.MachineRequest{
		mr("a", v1alpha1.MachinePhaseRunning, "", ""),
		mr("b", v1alpha1.MachinePhaseDeleting, "Deleting", "waiting for Secret default/b-cloudinit"),
		mr("c", v1alpha1.MachinePhaseDeleting, "Deleting", "waiting for Secret default/c-cloudinit"),
		mr("d", "", "", ""),
	})
	want := `1 with phase "" no Progressing condition (e.g. d: ); 2 with phase "Deleting" Deleting (e.g. b: waiting for Secret default/b-cloudinit)`
	if got != want {
		t.Fatalf("whereTheyStand =\n%s\nwant\n%s", got, want)
	}
}

package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
)

// Each VM counts once however often it is observed; a forgotten VM is no longer held, and the
// counter never goes down.
func TestObserveVMCountsEachOnce(t *testing.T) {
	start := testutil.ToFloat64(MachinesObserved)
	for range 3 {
		ObserveVM("vm-a")
		ObserveVM("vm-b")
	}
	ObserveVM("")
	if got := testutil.ToFloat64(MachinesObserved) - start; got != 2 {
		t.Fatalf("observed %v VMs, want 2", got)
	}
	ForgetVM("vm-a")
	if _, held := observedVMs.Load(types.UID("vm-a")); held {
		t.Fatal("a forgotten VM is still held")
	}
	if got := testutil.ToFloat64(MachinesObserved) - start; got != 2 {
		t.Fatalf("after ForgetVM the counter reads %v, want 2: a counter never goes down", got)
	}
}

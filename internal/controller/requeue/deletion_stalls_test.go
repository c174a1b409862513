package requeue

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
)

// A deletion is held up only while the same thing is left of it: progress, or another object of
// the same name, starts the clock again.
func TestDeletionStalls(t *testing.T) {
	var d DeletionStalls
	obj := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hm-0", UID: "u1"}}
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		obj       *infrav1.HarvesterMachine
		remaining string
		at        time.Duration
		want      time.Duration
	}{
		{obj, "VirtualMachine vms/hm-0", 0, 0},
		{obj, "VirtualMachine vms/hm-0", 40 * time.Second, 40 * time.Second},
		{obj, "PersistentVolumeClaim vms/hm-0-disk-0", 50 * time.Second, 0}, // progress
		{obj, "PersistentVolumeClaim vms/hm-0-disk-0", 80 * time.Second, 30 * time.Second},
		{&infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hm-0", UID: types.UID("u2")}}, "PersistentVolumeClaim vms/hm-0-disk-0", 90 * time.Second, 0},
	}
	for i, s := range steps {
		if got := d.HeldFor(s.obj, s.remaining, t0.Add(s.at)); got != s.want {
			t.Fatalf("step %d: held for %s, want %s", i, got, s.want)
		}
	}
	d.Forget(types.NamespacedName{Namespace: "ns", Name: "hm-0"})
	if got := d.HeldFor(steps[4].obj, steps[4].remaining, t0.Add(100*time.Second)); got != 0 {
		t.Fatalf("after Forget: held for %s, want 0", got)
	}
}

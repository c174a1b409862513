package clusterapi

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// Normal progress waits progressReportDelay after the provider's last write of the machine's
// metadata or spec, and only for that HarvesterMachine (not a new one of the same name).
func TestRecentWritesSettling(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hm-0", UID: "a"}}
	var w recentWrites
	if _, ok := w.settling(hm, now); ok {
		t.Fatal("settling before any write; want not")
	}
	w.wrote(hm, now)
	for name, tc := range map[string]struct {
		after    time.Duration
		uid      string
		want     bool
		wantLeft time.Duration
	}{
		"just written":         {after: 0, uid: "a", want: true, wantLeft: progressReportDelay},
		"half way":             {after: progressReportDelay / 2, uid: "a", want: true, wantLeft: progressReportDelay / 2},
		"settled":              {after: progressReportDelay, uid: "a"},
		"a new one, same name": {after: 0, uid: "b"},
	} {
		t.Run(name, func(t *testing.T) {
			o := hm.DeepCopy()
			o.UID = types.UID(tc.uid)
			left, ok := w.settling(o, now.Add(tc.after))
			if ok != tc.want || left != tc.wantLeft {
				t.Fatalf("settling = %s, %v; want %s, %v", left, ok, tc.wantLeft, tc.want)
			}
		})
	}
	w.forget(client.ObjectKeyFromObject(hm))
	if _, ok := w.settling(hm, now); ok {
		t.Fatal("settling after forget; want not")
	}
}

// A machine whose finalizer the provider removed is let go: the cache's copy of it, still being
// deleted, is left alone until a reconcile finds it gone; not a live one, not a new one of the
// same name.
func TestRecentWritesLetGo(t *testing.T) {
	deleting := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hm-0", UID: "a",
		Finalizers: []string{infrav1.HarvesterMachineFinalizer}, DeletionTimestamp: ptr.To(metav1.Now())}}
	var w recentWrites
	if w.letGoOf(deleting) {
		t.Fatal("let go before its finalizer was removed; want not")
	}
	w.wrote(deleting, time.Now())
	w.releasedFinalizer(deleting)
	if !w.letGoOf(deleting) {
		t.Fatal("the cached copy of a machine let go is reconciled; want it left alone")
	}
	if _, ok := w.settling(deleting, time.Now()); ok {
		t.Fatal("a machine let go is still settling; want its writes forgotten")
	}
	newOne := deleting.DeepCopy()
	newOne.UID = "b"
	live := newOne.DeepCopy()
	live.DeletionTimestamp = nil
	if w.letGoOf(newOne) || w.letGoOf(live) {
		t.Fatal("a new machine of the same name is let go; want it reconciled")
	}
	w.forget(client.ObjectKeyFromObject(deleting))
	if w.letGoOf(deleting) {
		t.Fatal("let go after a reconcile found it gone; want forgotten")
	}
}

// A new machine's wait for its pools' addresses goes unreported for progressReportDelay from its
// creation, as other normal progress; not a wait for something else, not an older machine's, and
// not over a status that says something else.
func TestHoldAddressWait(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	pending := errkind.Waiting(infrav1.ReasonIPAddressPending, time.Minute, "claim has no address yet")
	for name, tc := range map[string]struct {
		age      time.Duration
		err      error
		stored   string // the reason of the stored Progressing condition
		want     bool
		wantWait time.Duration
	}{
		"new, pending":           {age: 2 * time.Second, err: pending, want: true, wantWait: progressReportDelay - 2*time.Second},
		"new, pending again":     {age: 2 * time.Second, err: pending, stored: infrav1.ReasonIPAddressPending, want: true, wantWait: progressReportDelay - 2*time.Second},
		"old enough":             {age: progressReportDelay, err: pending},
		"over another status":    {age: time.Second, err: pending, stored: infrav1.ReasonVMProvisioning},
		"an exhausted pool":      {age: time.Second, err: errkind.Waiting(infrav1.ReasonIPPoolExhausted, time.Minute, "no address free")},
		"no wait":                {age: time.Second},
		"a sooner retry is kept": {age: time.Second, err: errkind.Waiting(infrav1.ReasonIPAddressPending, time.Second, "x"), want: true, wantWait: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hm-0", CreationTimestamp: metav1.NewTime(now.Add(-tc.age))}}
			if tc.stored != "" {
				hm.Status.Conditions = []metav1.Condition{{Type: infrav1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: tc.stored}}
			}
			s := &harvesterMachineScope{hm: hm, Scope: objstatus.New(hm, harvesterMachineStatus, objstatus.Policy{}, nil, &objstatus.Memory[infrav1.HarvesterMachineStatus]{})}
			wait, held := holdAddressWait(s, tc.err, now)
			if held != tc.want || wait != tc.wantWait {
				t.Fatalf("holdAddressWait = %s, %v; want %s, %v", wait, held, tc.wantWait, tc.want)
			}
		})
	}
}

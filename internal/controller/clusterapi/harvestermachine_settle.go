package clusterapi

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// progressReportDelay is how long normal progress goes unreported after the provider wrote the
// HarvesterMachine's metadata or spec (its place recorded, its providerID set, both as its VM is
// created): a VM that runs within it goes from no status straight to Running, one that takes
// longer shows its progress then. A problem (harvester.Assess) is written at once, so is Running,
// and so is progress over a status that says something else (objstatus.Scope.HoldProgress); the
// Created event is recorded at once.
//
// Each write to a HarvesterMachine costs Cluster API core a Machine reconcile, and its Machine
// controller patches the Machine's status conditions with an optimistic lock: on a conflict its
// patch helper reads the Machine again from its cache, up to five times within about a second,
// then fails the reconcile, which waits out a back-off. Writes close together keep that
// reconcile running on a cache that lags its own patches once the API server is busy, so the
// provider leaves a gap after its own writes (docs/proposals/20261127-progress-report-delay.md
// measures what each choice costs Cluster API core). On real Harvester a VM takes tens of seconds
// to boot, so its progress still shows within seconds of mattering.
const progressReportDelay = 10 * time.Second

// recentWrites remembers when the provider last wrote each HarvesterMachine's metadata or spec,
// and which ones it let go (its finalizer removed). It is memory only: after a restart the first
// status is written at once, as before.
type recentWrites struct {
	m sync.Map // types.NamespacedName -> recentWrite
	// let go holds the UIDs of the HarvesterMachines whose finalizer the provider removed, until a
	// reconcile finds them gone. Events that came while it removed it (a VM's disks going on
	// Harvester, its claims released) reconcile the machine once more, often before the cache has
	// seen it go: that reconcile, on the cached copy that still has the finalizer, would patch an
	// object the API server deleted already.
	letGo sync.Map // types.NamespacedName -> types.UID
}

type recentWrite struct {
	uid types.UID
	at  time.Time
}

// wrote records a write of obj's metadata or spec at now.
func (w *recentWrites) wrote(obj client.Object, now time.Time) {
	w.m.Store(client.ObjectKeyFromObject(obj), recentWrite{uid: obj.GetUID(), at: now})
}

// settling says how long obj's normal progress should still wait (see progressReportDelay), and
// whether it should.
func (w *recentWrites) settling(obj client.Object, now time.Time) (time.Duration, bool) {
	v, ok := w.m.Load(client.ObjectKeyFromObject(obj))
	if !ok {
		return 0, false
	}
	last, _ := v.(recentWrite)
	left := progressReportDelay - now.Sub(last.at)
	if last.uid != obj.GetUID() || left <= 0 {
		return 0, false
	}
	return left, true
}

// forget drops what is remembered of the HarvesterMachine of that key: a reconcile found it gone.
func (w *recentWrites) forget(key types.NamespacedName) {
	w.m.Delete(key)
	w.letGo.Delete(key)
}

// releasedFinalizer records that the provider removed its finalizer from obj.
func (w *recentWrites) releasedFinalizer(obj client.Object) {
	key := client.ObjectKeyFromObject(obj)
	w.m.Delete(key)
	w.letGo.Store(key, obj.GetUID())
}

// letGoOf reports whether obj is a HarvesterMachine being deleted whose finalizer the provider
// removed already: a copy of it the cache still holds, with nothing left to do.
func (w *recentWrites) letGoOf(obj client.Object) bool {
	if obj.GetDeletionTimestamp() == nil {
		return false
	}
	uid, ok := w.letGo.Load(client.ObjectKeyFromObject(obj))
	return ok && uid == obj.GetUID()
}

// holdAddressWait says whether a new machine's wait for the addresses of its pools goes
// unreported, and for how long: an IPAM provider answers a claim within moments, so, like other
// normal progress, the wait is written only once the HarvesterMachine is progressReportDelay old,
// or at once over a status that says something else. A claim answered sooner costs no status
// write (its answer wakes the machine: the controller owns its claims).
func holdAddressWait(s *harvesterMachineScope, err error, now time.Time) (time.Duration, bool) {
	w, ok := errkind.AsWaiting(err)
	if !ok || w.Reason != infrav1.ReasonIPAddressPending {
		return 0, false
	}
	left := progressReportDelay - now.Sub(s.hm.CreationTimestamp.Time)
	if left <= 0 || !s.HoldProgress(w.Reason) {
		return 0, false
	}
	return min(left, w.RetryAfter), true
}

package clusterapi

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statusSettleDelay is how long a status that only reports normal progress waits after the
// provider wrote the HarvesterMachine's metadata or spec (its place recorded, its providerID set).
//
// Cluster API core's Machine controller reconciles a Machine on every write to its
// HarvesterMachine, and patches the Machine's status conditions with an optimistic lock; on a
// conflict its patch helper reads the Machine again from its cache, up to five times within about
// a second, then fails the reconcile, which waits out a back-off. Two writes to a HarvesterMachine
// a few milliseconds apart (the providerID, then "Creating VirtualMachine ...") make its second
// reconcile start from a cache that has not caught up with its own first patch, and fail that
// way. Measured at N=100 in the bench (make bench, 2026-11-27): writing the progress status at
// once cost Cluster API core 27 management writes per machine while creating, 15.6 of them
// refused (409), and 214 failed Machine reconciles ("failed to patch status conditions: timed out
// waiting for the condition"); from the HarvesterMachine provisioned to its Machine Running took
// 4.3 s (p50). With this wait Cluster API core failed none of them while creating, and that step
// took 1.3 to 2.4 s (0.5 to 0.7 s beside the bench's perfect provider; docs/benchmarks.md). The
// wait hides nothing a user would miss: the
// same news is in the Created event at once, a problem (harvester.Assess) is written at once, and
// on real Harvester a VM takes tens of seconds to boot.
const statusSettleDelay = 2 * time.Second

// recentWrites remembers when the provider last wrote each HarvesterMachine's metadata or spec.
// It is memory only: after a restart the first status is written at once, as before.
type recentWrites struct {
	m sync.Map // types.NamespacedName -> recentWrite
}

type recentWrite struct {
	uid types.UID
	at  time.Time
}

// wrote records a write of obj's metadata or spec at now.
func (w *recentWrites) wrote(obj client.Object, now time.Time) {
	w.m.Store(client.ObjectKeyFromObject(obj), recentWrite{uid: obj.GetUID(), at: now})
}

// settling says how long obj's normal progress should still wait (see statusSettleDelay), and
// whether it should.
func (w *recentWrites) settling(obj client.Object, now time.Time) (time.Duration, bool) {
	v, ok := w.m.Load(client.ObjectKeyFromObject(obj))
	if !ok {
		return 0, false
	}
	last, _ := v.(recentWrite)
	left := statusSettleDelay - now.Sub(last.at)
	if last.uid != obj.GetUID() || left <= 0 {
		return 0, false
	}
	return left, true
}

// forget drops what is remembered of the HarvesterMachine of that key.
func (w *recentWrites) forget(key types.NamespacedName) { w.m.Delete(key) }

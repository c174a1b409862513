package requeue

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// DeletionStalls remembers, for each deletion in progress, what was left of it on Harvester and
// since when this manager has seen exactly that left. The status names what a deletion waits for
// only once the same thing has held it up for a report delay (DefaultDeletionReportDelay) past the time it may take by
// itself (a VM's shutdown grace period): a deletion that makes progress (the VM, then its disks,
// then the cloud-init Secret) costs no status write per step, and one that is held up (a finalizer
// on the Secret, a VM that outlives its grace period) says by what. It is memory only: after a
// restart, a held-up deletion is reported one delay later.
type DeletionStalls struct {
	m sync.Map // types.NamespacedName -> deletionStall
}

type deletionStall struct {
	uid       types.UID
	remaining string
	since     time.Time
}

// HeldFor returns how long the deletion of obj has been waiting for remaining, as this manager has
// seen it: 0 the first time, or when what is left has changed since the last call.
func (d *DeletionStalls) HeldFor(obj client.Object, remaining string, now time.Time) time.Duration {
	key := client.ObjectKeyFromObject(obj)
	if v, ok := d.m.Load(key); ok {
		if s := v.(deletionStall); s.uid == obj.GetUID() && s.remaining == remaining {
			return now.Sub(s.since)
		}
	}
	d.m.Store(key, deletionStall{uid: obj.GetUID(), remaining: remaining, since: now})
	return 0
}

// Unreported says whether the deletion of obj, not done yet, has not been held up long enough to
// be worth a status: not by the same thing for its shutdown grace period and reportDelay. If so,
// it returns when to look again: at the next poll, or when it would be.
func (d *DeletionStalls) Unreported(obj client.Object, deletion harvester.Deletion, reportDelay, poll time.Duration, now time.Time) (time.Duration, bool) {
	patience := deletion.ShutdownGrace + reportDelay
	if held := d.HeldFor(obj, deletion.Remaining, now); held < patience {
		return min(poll, patience-held+objstatus.TimerSlack), true
	}
	return 0, false
}

// Forget drops what is remembered of an object that is gone.
func (d *DeletionStalls) Forget(key types.NamespacedName) { d.m.Delete(key) }

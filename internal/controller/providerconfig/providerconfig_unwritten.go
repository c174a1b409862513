package providerconfig

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// Deployments made for the published provider (the Butler CLI's manifest, the published chart)
// do not let the manager write ProviderConfig status. The checks must still gate MachineRequests:
// the Reconciler keeps the status it could not write with its last validation, the
// MachineRequest front door reads it from there (machinerequest.Reconciler.Preflight) in place of
// the ProviderConfig's own, and is woken when it changes, as the status's watch would wake it.

// unwrittenWakeBuffer bounds the ProviderConfigs waiting to wake their MachineRequests. A wake
// that does not fit is dropped: the MachineRequests waiting on the checks look again within
// DefaultNotReadyRetryPeriod anyway.
const unwrittenWakeBuffer = 64

// statusNotWritten keeps pc's status, which the manager was refused (err) to write, and says so
// once: the same refusal every validation would otherwise be an error loop.
func (r *Reconciler) statusNotWritten(ctx context.Context, pc *v1alpha1.ProviderConfig, err error) *v1alpha1.ProviderConfigStatus {
	if r.statusForbidden.CompareAndSwap(false, true) {
		log.FromContext(ctx).Info("The manager may not write ProviderConfig status (no patch on providerconfigs/status, as in the Butler CLI's RBAC): "+
			"the checks are kept in memory, still gate MachineRequests, and are reported by events only. Grant it to see them in the ProviderConfigs' status. Logged once",
			"error", err.Error())
	}
	return pc.Status.DeepCopy()
}

// WithUnwrittenChecks gives pc, read from the API server, the status of its last validation if
// that could not be written. A nil reconciler leaves pc as it is.
func (r *Reconciler) WithUnwrittenChecks(pc *v1alpha1.ProviderConfig) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A ProviderConfig recreated under the same name is not the one validated; one whose spec
	// changed since keeps the old checks, which preflightGate ignores as stale.
	if last, ok := r.seen[client.ObjectKeyFromObject(pc)]; ok && last.uid == pc.UID && last.unwritten != nil {
		pc.Status = *last.unwritten.DeepCopy()
	}
}

// UnwrittenChanges delivers the ProviderConfigs whose unwritten checks changed.
func (r *Reconciler) UnwrittenChanges() <-chan event.GenericEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return madeOnFirstUse(&r.unwrittenWake, unwrittenWakeBuffer)
}

// wakeMachineRequests tells the MachineRequest front door, if it listens, that pc's unwritten
// checks changed. It never blocks a ProviderConfig's reconcile.
func (r *Reconciler) wakeMachineRequests(pc *v1alpha1.ProviderConfig) {
	r.mu.Lock()
	wake := r.unwrittenWake
	r.mu.Unlock()
	if wake == nil {
		return
	}
	select {
	case wake <- event.GenericEvent{Object: pc.DeepCopy()}:
	default:
	}
}

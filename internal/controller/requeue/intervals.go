package requeue

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// Defaults of the reconcilers' intervals that no flag sets; those a flag sets are in
// internal/options, with the flag.
const (
	DefaultDeletionPollInterval = 5 * time.Second
	DefaultStartGracePeriod     = 5 * time.Minute
	DefaultDeletionReportDelay  = 30 * time.Second
)

// PollInterval is how soon to look again at a machine that waits on Harvester: every
// unwatched interval when its objects are not watched, since only polling finds their changes,
// and at most every watched interval when they are, since their events wake it and polling only
// catches one that was missed. At 1000 machines, polling every 10 s while creating and 5 s while
// deleting made about a third of the creating reconciles and half of the deleting ones.
func PollInterval(watched bool, unwatched, safetyNet time.Duration) time.Duration {
	if watched {
		return max(unwatched, safetyNet)
	}
	return unwatched
}

// ReconcileTimeout bounds a reconcile, and with it every request to Harvester it makes: the
// Harvester clients have no timeout of their own (it would cut their informers' watches).
const ReconcileTimeout = time.Minute

// WithReconcileTimeout returns a controller's options with ReconcileTimeout as its reconciliation
// timeout where they set none: the options a reconciler that reaches Harvester is built with.
func WithReconcileTimeout(options controller.Options) controller.Options {
	if options.ReconciliationTimeout == 0 {
		options.ReconciliationTimeout = ReconcileTimeout
	}
	return options
}

// ProviderConfigRetry is how soon to look again at a missing or unusable ProviderConfig (its
// watch usually wakes us earlier).
const ProviderConfigRetry = time.Minute

// BlockedDeletionRetry is how soon a blocked deletion is tried again.
const BlockedDeletionRetry = 30 * time.Second

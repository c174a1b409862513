// Package requeue is when the provider looks at an object again: the poll intervals of a machine
// that waits on Harvester (PollInterval, wider when Harvester's events are watched), the retries
// of a ProviderConfig that cannot be used and of a blocked deletion, the priority of a requeue
// that only polls (AsPoll), the timeout of one reconcile (WithReconcileTimeout), and how long a
// deletion may be held up by the same thing before its status says by what (DeletionStalls).
// The intervals a flag sets are in package options, with the flag.
package requeue

package frontdoor

import (
	"maps"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// UpdatesThatMatter passes the updates of an object that can change what the provider does with
// it: its spec (generation), its deletion, its annotations (retry, skip-cleanup), finalizers of
// other controllers, and resyncs (the same resourceVersion: --sync-period's safety net, which the
// priority queue serves after everything else). It drops the provider's own writes: its status
// patches and adding or removing its own finalizer, each of which would otherwise cost a
// reconcile that finds nothing to do.
func UpdatesThatMatter(ownFinalizer string) predicate.Predicate {
	others := func(finalizers []string) []string {
		return slices.DeleteFunc(slices.Clone(finalizers), func(f string) bool { return f == ownFinalizer })
	}
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetResourceVersion() == n.GetResourceVersion() ||
			o.GetGeneration() != n.GetGeneration() ||
			!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
			!slices.Equal(others(o.GetFinalizers()), others(n.GetFinalizers())) ||
			!maps.Equal(o.GetAnnotations(), n.GetAnnotations())
	}}
}

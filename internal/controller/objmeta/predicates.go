package objmeta

import (
	"maps"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// UpdatesThatMatter passes the updates of an object that can change what the provider does with
// it: its spec (generation), its deletion, its annotations (retry, skip-cleanup, and the recorded
// place changed or removed), finalizers of other controllers, and resyncs (the same
// resourceVersion: --sync-period's safety net, which the priority queue serves after everything
// else). It drops the provider's own writes: its status patches, adding or removing its own
// finalizer, and recording the machine's place (RecordPlace: the reconcile that records it goes
// on to create the machine), each of which would otherwise cost a reconcile that finds nothing to
// do.
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
			!maps.Equal(withPlaceRecorded(o.GetAnnotations(), n.GetAnnotations()), n.GetAnnotations())
	}}
}

// withPlaceRecorded is old with the place recorded in updated, if old had none: what old would
// be after RecordPlace.
func withPlaceRecorded(old, updated map[string]string) map[string]string {
	place, recorded := updated[v1alpha1.AnnotationPlacement]
	if _, had := old[v1alpha1.AnnotationPlacement]; had || !recorded {
		return old
	}
	old = maps.Clone(old)
	if old == nil {
		old = map[string]string{}
	}
	old[v1alpha1.AnnotationPlacement] = place
	return old
}

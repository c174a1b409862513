package controller

import (
	"maps"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ignoreStatusOnlyUpdates drops the update events our own status patches cause, keeping spec
// changes (generation), deletion, finalizer and annotation changes (the skip-cleanup escape hatch).
func ignoreStatusOnlyUpdates() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		return o.GetGeneration() != n.GetGeneration() ||
			!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
			!slices.Equal(o.GetFinalizers(), n.GetFinalizers()) ||
			!maps.Equal(o.GetAnnotations(), n.GetAnnotations())
	}}
}

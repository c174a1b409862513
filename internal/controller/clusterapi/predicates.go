package clusterapi

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/objmeta"
)

// capiChangesThatMatter passes the updates of a Cluster API Cluster that change what the front
// door reads of it (read, its own reading: readCAPIClusterFrom), whom it maps to (mapsTo, the
// watch's own mapping; nil when that depends on the name alone), or its deletion, and resyncs.
// Cluster API writes its Clusters' status many times per machine (replica counts, conditions): a
// Cluster's update wakes every HarvesterMachine of it, and passing them all cost about 21 work
// queue adds per machine in the bench.
func capiChangesThatMatter[T comparable](read func(*unstructured.Unstructured) T, mapsTo handler.MapFunc) predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, oldOK := e.ObjectOld.(*unstructured.Unstructured)
		n, newOK := e.ObjectNew.(*unstructured.Unstructured)
		if !oldOK || !newOK {
			return true
		}
		return o.GetResourceVersion() == n.GetResourceVersion() ||
			!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
			read(o) != read(n) ||
			(mapsTo != nil && !slices.Equal(mapsTo(context.Background(), o), mapsTo(context.Background(), n)))
	}}
}

// harvesterMachineUpdatesThatMatter passes the updates of a HarvesterMachine that can change what
// the provider does with it: those objmeta.UpdatesThatMatter passes, and Cluster API naming its
// Machine (owner references) and its Cluster (the cluster-name label), which it does after
// creating it. It drops the provider's own writes: status patches, finalizer changes, the place
// recorded, and spec.providerID written once the VM exists (setProviderID, in the reconcile that
// goes on with the machine).
func harvesterMachineUpdatesThatMatter(ownFinalizer string) predicate.Predicate {
	updates := objmeta.UpdatesThatMatter(ownFinalizer)
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		if old, ok := o.(*infrav1.HarvesterMachine); ok {
			if updated, ok := n.(*infrav1.HarvesterMachine); ok && providerIDWrittenAlone(old, updated) {
				// Judge the rest of the update as if old had the providerID already.
				withID := old.DeepCopy()
				withID.Spec.ProviderID, withID.Generation = updated.Spec.ProviderID, updated.Generation
				e.ObjectOld = withID
			}
		}
		return updates.Update(e) ||
			o.GetLabels()[capiClusterNameLabel] != n.GetLabels()[capiClusterNameLabel] ||
			ownerOfKind(o, capiMachineGVK) != ownerOfKind(n, capiMachineGVK)
	}}
}

// providerIDWrittenAlone reports whether updated's spec is old's with spec.providerID written
// where it was empty: the provider's own write.
func providerIDWrittenAlone(old, updated *infrav1.HarvesterMachine) bool {
	if old.Spec.ProviderID != "" || updated.Spec.ProviderID == "" {
		return false
	}
	spec := old.Spec.DeepCopy()
	spec.ProviderID = updated.Spec.ProviderID
	return equality.Semantic.DeepEqual(*spec, updated.Spec)
}

// onlyDeletions passes deletions alone: a HarvesterMachine going is all a HarvesterCluster waits
// for of its machines (reconcileDelete).
var onlyDeletions = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	UpdateFunc:  func(event.UpdateEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// capiMachineChangesThatMatter passes the updates of a Machine (watched by its metadata) that can
// change what a HarvesterMachine does: its spec (the generation: its bootstrap data Secret, its
// failure domain), its control plane label, its deletion, and resyncs. Cluster API writes a
// Machine's status many times in its life; none of it matters here.
var capiMachineChangesThatMatter = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	_, wasControlPlane := o.GetLabels()[capiControlPlaneLabel]
	_, isControlPlane := n.GetLabels()[capiControlPlaneLabel]
	return o.GetResourceVersion() == n.GetResourceVersion() || o.GetGeneration() != n.GetGeneration() ||
		!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) || wasControlPlane != isControlPlane
}}

// claimChangesThatMatter passes the updates of an IPAddressClaim that its machine reads: its spec
// (the generation), its status (the address, the IPAM provider's conditions), its deletion, its owners (a machine
// released without cleanup gives its claims up), and resyncs. It drops the IPAM provider adding
// its finalizer, which comes before every answer.
var claimChangesThatMatter = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, oldOK := e.ObjectOld.(*unstructured.Unstructured)
	n, newOK := e.ObjectNew.(*unstructured.Unstructured)
	if !oldOK || !newOK {
		return true
	}
	return o.GetResourceVersion() == n.GetResourceVersion() || o.GetGeneration() != n.GetGeneration() ||
		!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
		!equality.Semantic.DeepEqual(o.Object["status"], n.Object["status"]) ||
		!equality.Semantic.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences())
}}

package sim

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// garbageCollector plays kube-controller-manager's garbage collector for the kinds the simulator
// cares about: an object (Secret, PVC, DataVolume, VMI) all of whose owners are gone is deleted,
// in the background, GCDelay after the simulator first found them gone. It deletes as the
// garbage collector's ServiceAccount, which Harvester's webhooks let through.
type garbageCollector struct {
	sim *Simulator
	// orphaned records when each dependent (by UID) was first found without an owner.
	orphaned sync.Map
}

// collectedKinds are the dependents the garbage collector looks after.
func collectedKinds() []client.Object {
	return []client.Object{&corev1.Secret{}, &corev1.PersistentVolumeClaim{}, &cdiv1.DataVolume{}, &kubevirtv1.VirtualMachineInstance{}}
}

func (g *garbageCollector) setup(mgr ctrl.Manager) error {
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	onlyDeletions := builder.WithPredicates(predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false }, UpdateFunc: func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false }, DeleteFunc: func(event.DeleteEvent) bool { return true },
	})
	for _, kind := range collectedKinds() {
		gvk, err := g.sim.c.GroupVersionKindFor(kind)
		if err != nil {
			return err
		}
		b := ctrl.NewControllerManagedBy(mgr).Named("sim-gc-"+gvk.Kind).For(kind, builder.WithPredicates(predicate.Funcs{
			// An object without owners is never collected.
			CreateFunc: func(e event.CreateEvent) bool { return len(e.Object.GetOwnerReferences()) > 0 },
			UpdateFunc: func(e event.UpdateEvent) bool { return len(e.ObjectNew.GetOwnerReferences()) > 0 },
		}))
		// The deletion of an owner wakes its dependents.
		for _, owner := range []client.Object{&kubevirtv1.VirtualMachine{}, &corev1.PersistentVolumeClaim{}, &cdiv1.DataVolume{}, image} {
			b = b.Watches(owner, handler.EnqueueRequestsFromMapFunc(g.dependentsOf(kind)), onlyDeletions)
		}
		if err := b.Complete(&gcReconciler{gc: g, gvk: gvk}); err != nil {
			return err
		}
	}
	return nil
}

// dependentsOf maps a deleted owner to the objects of kind in its namespace that it owns.
func (g *garbageCollector) dependentsOf(kind client.Object) handler.MapFunc {
	return func(ctx context.Context, owner client.Object) []ctrl.Request {
		list := &metav1.PartialObjectMetadataList{}
		gvk, err := g.sim.c.GroupVersionKindFor(kind)
		if err != nil {
			return nil
		}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := g.sim.c.List(ctx, list, client.InNamespace(owner.GetNamespace()), client.MatchingFields{indexOwnerUID: string(owner.GetUID())}); err != nil {
			return nil
		}
		reqs := make([]ctrl.Request, 0, len(list.Items))
		for i := range list.Items {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
		return reqs
	}
}

// gcReconciler collects one kind.
type gcReconciler struct {
	gc  *garbageCollector
	gvk schema.GroupVersionKind
}

func (r *gcReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	g := r.gc
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(r.gvk)
	if err := g.sim.c.Get(ctx, req.NamespacedName, obj); err != nil || obj.DeletionTimestamp != nil || len(obj.OwnerReferences) == 0 {
		return ctrl.Result{}, ignoreMissing(err)
	}
	for _, ref := range obj.OwnerReferences {
		alive, err := g.ownerExists(ctx, obj.Namespace, ref)
		if err != nil || alive {
			g.orphaned.Delete(obj.UID)
			return ctrl.Result{}, err
		}
	}
	since, _ := g.orphaned.LoadOrStore(obj.UID, time.Now())
	if wait := time.Until(since.(time.Time).Add(g.sim.cfg.GCDelay)); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	g.orphaned.Delete(obj.UID)
	uid := obj.UID
	err := g.sim.gcClient.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return ctrl.Result{}, ignoreMissing(err)
}

// ownerExists reports whether the object an owner reference names exists with that UID.
func (g *garbageCollector) ownerExists(ctx context.Context, namespace string, ref metav1.OwnerReference) (bool, error) {
	owner := &metav1.PartialObjectMetadata{}
	owner.SetGroupVersionKind(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
	// Read live: a cache that has not seen the owner's deletion yet would keep the dependent,
	// and nothing would wake the collector again.
	err := g.sim.live.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, owner)
	switch {
	case isMissing(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return owner.UID == ref.UID, nil
}

// isMissing reports whether err says the object, or its kind, does not exist.
func isMissing(err error) bool { return apierrors.IsNotFound(err) || meta.IsNoMatchError(err) }

func ignoreMissing(err error) error {
	if isMissing(err) {
		return nil
	}
	return err
}

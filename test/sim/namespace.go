package sim

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// namespaceReconciler plays the namespace controller, which no kube-controller-manager runs here
// to do: a namespace being deleted loses its VMs (through the VM controller, so their disks and
// Secrets go as on Harvester), VMIs, PVCs and Secrets, and is then finalized.
type namespaceReconciler struct{ sim *Simulator }

func (r *namespaceReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-namespace").For(&corev1.Namespace{}).Complete(r)
}

func (r *namespaceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := r.sim.c
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, req.NamespacedName, ns); err != nil || ns.DeletionTimestamp == nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	left := 0
	for _, list := range []client.ObjectList{&kubevirtv1.VirtualMachineList{}, &kubevirtv1.VirtualMachineInstanceList{}, &corev1.PersistentVolumeClaimList{}, &corev1.SecretList{}} {
		if err := c.List(ctx, list, client.InNamespace(ns.Name)); err != nil {
			return ctrl.Result{}, err
		}
		for _, obj := range itemsOf(list) {
			left++
			if obj.GetDeletionTimestamp() == nil {
				if err := client.IgnoreNotFound(c.Delete(ctx, obj)); err != nil {
					return ctrl.Result{}, err
				}
			}
		}
	}
	if left > 0 {
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	// Empty: remove the "kubernetes" finalizer through the finalize subresource.
	ns.Spec.Finalizers = nil
	return ctrl.Result{}, client.IgnoreNotFound(c.SubResource("finalize").Update(ctx, ns))
}

// itemsOf returns the items of a list as objects.
func itemsOf(list client.ObjectList) []client.Object {
	items, _ := meta.ExtractList(list)
	out := make([]client.Object, 0, len(items))
	for _, item := range items {
		if obj, ok := item.(client.Object); ok {
			out = append(out, obj)
		}
	}
	return out
}

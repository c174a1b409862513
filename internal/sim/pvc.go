package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/record"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// VirtualMachineImageGVK is Harvester's image kind.
var VirtualMachineImageGVK = harvester.VirtualMachineImageGVK

const (
	pvcProtectionFinalizer = "kubernetes.io/pvc-protection"
	// reasonWaitingForImage is the event reason of a PVC that cannot be provisioned (yet).
	reasonWaitingForImage = "ProvisioningFailed"
)

// pvcReconciler binds PVCs the way Harvester's storage does, and releases deleted ones once no
// VMI uses them (the pvc-protection controller's part).
type pvcReconciler struct {
	sim      *Simulator
	recorder record.EventRecorder
	// reported remembers the last reason given per PVC, so each new reason is one event.
	reported sync.Map
}

func (r *pvcReconciler) setup(mgr ctrl.Manager) error {
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	return ctrl.NewControllerManagedBy(mgr).Named("sim-pvc").
		For(&corev1.PersistentVolumeClaim{}).
		// A PVC waiting for its image binds as soon as the image is imported.
		Watches(image, handler.EnqueueRequestsFromMapFunc(r.claimsOfImage)).
		// ... or its storage class appears.
		Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfStorageClass)).
		// A deleted PVC is released once the VMI that used it is gone.
		Watches(&kubevirtv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(claimsOfVMI)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		Complete(r)
}

func (r *pvcReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := r.sim.c
	pvc := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, req.NamespacedName, pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.DeletionTimestamp != nil {
		return ctrl.Result{}, r.release(ctx, pvc)
	}
	if pvc.Status.Phase == corev1.ClaimBound {
		return ctrl.Result{}, nil
	}
	if why := r.whyNotBindable(ctx, pvc); why != "" {
		if last, _ := r.reported.Swap(pvc.UID, why); last != why {
			r.recorder.Event(pvc, corev1.EventTypeWarning, reasonWaitingForImage, why)
		}
		if pvc.Status.Phase != corev1.ClaimPending {
			return ctrl.Result{}, r.setPhase(ctx, pvc, corev1.ClaimPending)
		}
		return ctrl.Result{}, nil
	}
	r.reported.Delete(pvc.UID)
	return ctrl.Result{}, r.setPhase(ctx, pvc, corev1.ClaimBound)
}

// whyNotBindable says why a PVC cannot be provisioned yet ("" if it can): its storage class is
// missing, or, for an image-backed PVC, its image is missing, not imported or of another class.
func (r *pvcReconciler) whyNotBindable(ctx context.Context, pvc *corev1.PersistentVolumeClaim) string {
	if sc := pvc.Spec.StorageClassName; sc != nil && *sc != "" {
		if err := r.sim.c.Get(ctx, client.ObjectKey{Name: *sc}, &storagev1.StorageClass{}); apierrors.IsNotFound(err) {
			return fmt.Sprintf("storageclass.storage.k8s.io %q not found", *sc)
		}
	}
	imageID := pvc.Annotations[harvester.AnnotationImageID]
	if imageID == "" {
		return ""
	}
	ns, name, _ := strings.Cut(imageID, "/")
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	if err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, image); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("virtualmachineimage %s not found", imageID)
		}
		return err.Error()
	}
	if !imageImported(image) {
		return fmt.Sprintf("virtualmachineimage %s is not imported yet", imageID)
	}
	sc, _, _ := unstructured.NestedString(image.Object, "status", "storageClassName")
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != sc {
		return fmt.Sprintf("storageclass of the volume must be %s, the storage class of virtualmachineimage %s", sc, imageID)
	}
	return ""
}

func (r *pvcReconciler) setPhase(ctx context.Context, pvc *corev1.PersistentVolumeClaim, phase corev1.PersistentVolumeClaimPhase) error {
	patch := client.MergeFrom(pvc.DeepCopy())
	pvc.Status.Phase = phase
	if phase == corev1.ClaimBound {
		pvc.Status.AccessModes = pvc.Spec.AccessModes
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]}
	}
	return client.IgnoreNotFound(r.sim.c.Status().Patch(ctx, pvc, patch))
}

// release removes the pvc-protection finalizer once no VMI mounts the PVC.
func (r *pvcReconciler) release(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if !controllerutil.ContainsFinalizer(pvc, pvcProtectionFinalizer) {
		return nil
	}
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := r.sim.c.List(ctx, vmis, client.InNamespace(pvc.Namespace)); err != nil {
		return err
	}
	for _, vmi := range vmis.Items {
		for _, v := range vmi.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name {
				return nil // still in use; the VMI's deletion wakes us
			}
		}
	}
	patch := client.MergeFrom(pvc.DeepCopy())
	controllerutil.RemoveFinalizer(pvc, pvcProtectionFinalizer)
	return client.IgnoreNotFound(r.sim.c.Patch(ctx, pvc, patch))
}

func (r *pvcReconciler) claimsOfImage(ctx context.Context, image client.Object) []ctrl.Request {
	id := image.GetNamespace() + "/" + image.GetName()
	return r.claimsWhere(ctx, func(pvc *corev1.PersistentVolumeClaim) bool {
		return pvc.Annotations[harvester.AnnotationImageID] == id
	})
}

func (r *pvcReconciler) claimsOfStorageClass(ctx context.Context, sc client.Object) []ctrl.Request {
	return r.claimsWhere(ctx, func(pvc *corev1.PersistentVolumeClaim) bool {
		return pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName == sc.GetName()
	})
}

// claimsWhere lists the PVCs that match, as reconcile requests.
func (r *pvcReconciler) claimsWhere(ctx context.Context, match func(*corev1.PersistentVolumeClaim) bool) []ctrl.Request {
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := r.sim.c.List(ctx, pvcs); err != nil {
		return nil
	}
	var reqs []ctrl.Request
	for i := range pvcs.Items {
		if match(&pvcs.Items[i]) {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&pvcs.Items[i])})
		}
	}
	return reqs
}

func claimsOfVMI(_ context.Context, o client.Object) []ctrl.Request {
	vmi := o.(*kubevirtv1.VirtualMachineInstance)
	var reqs []ctrl.Request
	for _, v := range vmi.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: vmi.Namespace, Name: v.PersistentVolumeClaim.ClaimName}})
		}
	}
	return reqs
}

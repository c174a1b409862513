package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

const (
	pvcProtectionFinalizer = "kubernetes.io/pvc-protection"
	// reasonWaitingForImage is the event reason of a PVC that cannot be provisioned (yet).
	reasonWaitingForImage = "ProvisioningFailed"
	// Annotations the PV controller sets on a claim it provisions and binds.
	annotationStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annotationBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	annotationBindCompleted          = "pv.kubernetes.io/bind-completed"
	annotationBoundByController      = "pv.kubernetes.io/bound-by-controller"
)

// pvcReconciler provisions and binds PVCs as the PV controller and Longhorn's CSI provisioner do,
// and releases deleted ones once no VMI uses them (the pvc-protection controller's part). PVCs a
// DataVolume owns are CDI's (cdi.go).
type pvcReconciler struct {
	sim *Simulator
	// reported remembers the last reason given per PVC, so each new reason is one event.
	reported sync.Map
	// provisioning records when the provisioner started on each PVC (by UID).
	provisioning sync.Map
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
		r.forget(pvc.UID)
		return ctrl.Result{}, r.release(ctx, pvc)
	}
	if owner := metav1.GetControllerOf(pvc); pvc.Status.Phase == corev1.ClaimBound || (owner != nil && owner.Kind == DataVolumeGVK.Kind) {
		return ctrl.Result{}, nil
	}
	if component, why := r.whyNotBindable(ctx, pvc); why != "" {
		if last, _ := r.reported.Swap(pvc.UID, why); last != why {
			r.sim.event(component, pvc, corev1.EventTypeWarning, reasonWaitingForImage, why)
		}
		if pvc.Status.Phase != corev1.ClaimPending {
			return ctrl.Result{}, r.setPhase(ctx, pvc, corev1.ClaimPending)
		}
		return ctrl.Result{}, nil
	}
	r.reported.Delete(pvc.UID)
	since, started := r.provisioning.LoadOrStore(pvc.UID, time.Now())
	if !started {
		return retryConflict(r.startProvisioning(ctx, pvc))
	}
	// Longhorn clones the image's backing image into the new volume: it takes a while.
	delay := time.Duration(0)
	if imageID := pvc.Annotations[annotationImageID]; imageID != "" {
		delay = r.cloneDelay(ctx, imageID)
	}
	if wait := time.Until(since.(time.Time).Add(delay)); wait > 0 {
		if pvc.Status.Phase != corev1.ClaimPending {
			return ctrl.Result{RequeueAfter: wait}, r.setPhase(ctx, pvc, corev1.ClaimPending)
		}
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	return retryConflict(r.bind(ctx, pvc))
}

// cloneDelay is how long a clone of the image takes: Config.CloneDelay, unless the image's
// AnnotationCloneDelay says otherwise.
func (r *pvcReconciler) cloneDelay(ctx context.Context, imageID string) time.Duration {
	ns, name, _ := strings.Cut(imageID, "/")
	image := &metav1.PartialObjectMetadata{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	if err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, image); err == nil {
		if d, err := time.ParseDuration(image.GetAnnotations()[AnnotationCloneDelay]); err == nil {
			return d
		}
	}
	return r.sim.cfg.CloneDelay
}

// forget drops what the reconciler remembers of a PVC.
func (r *pvcReconciler) forget(uid types.UID) {
	r.reported.Delete(uid)
	r.provisioning.Delete(uid)
}

// startProvisioning is the PV controller handing the claim to its external provisioner (the
// annotations and ExternalProvisioning event) and the provisioner starting on it.
func (r *pvcReconciler) startProvisioning(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	provisioner := r.provisionerOf(ctx, pvc)
	pvc.Annotations = mergeAnnotations(pvc.Annotations, map[string]string{annotationStorageProvisioner: provisioner, annotationBetaStorageProvisioner: provisioner})
	if err := r.sim.c.Update(ctx, pvc); err != nil {
		r.provisioning.Delete(pvc.UID)
		return err
	}
	if pvc.Status.Phase != corev1.ClaimPending {
		if err := r.setPhase(ctx, pvc, corev1.ClaimPending); err != nil {
			return err
		}
	}
	r.sim.event(componentPVC, pvc, corev1.EventTypeNormal, "ExternalProvisioning", fmt.Sprintf(
		"Waiting for a volume to be created either by the external provisioner '%s' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.", provisioner))
	r.sim.event(componentProvisioner, pvc, corev1.EventTypeNormal, "Provisioning", fmt.Sprintf("External provisioner is provisioning volume for claim %q", pvc.Namespace+"/"+pvc.Name))
	return nil
}

// bind is the provisioner's volume created and the PV controller binding the claim to it.
func (r *pvcReconciler) bind(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	volume := "pvc-" + string(pvc.UID)
	if pvc.Spec.VolumeName == "" {
		pvc.Spec.VolumeName = volume
		pvc.Annotations = mergeAnnotations(pvc.Annotations, map[string]string{annotationBindCompleted: "yes", annotationBoundByController: "yes"})
		if err := r.sim.c.Update(ctx, pvc); err != nil {
			return err
		}
	}
	if err := r.setPhase(ctx, pvc, corev1.ClaimBound); err != nil {
		return err
	}
	r.provisioning.Delete(pvc.UID)
	r.sim.event(componentProvisioner, pvc, corev1.EventTypeNormal, "ProvisioningSucceeded", "Successfully provisioned volume "+volume)
	return nil
}

// provisionerOf is the provisioner of the PVC's storage class (Longhorn's if it names none: the
// default class of Harvester is Longhorn's).
func (r *pvcReconciler) provisionerOf(ctx context.Context, pvc *corev1.PersistentVolumeClaim) string {
	sc := &storagev1.StorageClass{}
	if name := ptr.Deref(pvc.Spec.StorageClassName, ""); name != "" && r.sim.c.Get(ctx, client.ObjectKey{Name: name}, sc) == nil {
		return sc.Provisioner
	}
	return longhornProvisioner
}

// whyNotBindable says why a PVC cannot be provisioned yet, and who says so ("" if it can): its
// storage class is missing (the PV controller), or, for an image-backed PVC, its image is
// missing, not imported or of another class (the provisioner).
func (r *pvcReconciler) whyNotBindable(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (component, why string) {
	if sc := pvc.Spec.StorageClassName; sc != nil && *sc != "" {
		if err := r.sim.c.Get(ctx, client.ObjectKey{Name: *sc}, &storagev1.StorageClass{}); apierrors.IsNotFound(err) {
			return componentPVC, fmt.Sprintf("storageclass.storage.k8s.io %q not found", *sc)
		}
	}
	imageID := pvc.Annotations[annotationImageID]
	if imageID == "" {
		return "", ""
	}
	return componentProvisioner, r.whyImageNotReady(ctx, pvc, imageID)
}

// whyImageNotReady says why an image-backed PVC cannot be cloned from its image yet ("" if it can).
func (r *pvcReconciler) whyImageNotReady(ctx context.Context, pvc *corev1.PersistentVolumeClaim, imageID string) string {
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
	if err := r.sim.c.List(ctx, vmis, client.InNamespace(pvc.Namespace), client.MatchingFields{indexVMIByClaim: pvc.Name}); err != nil {
		return err
	}
	if len(vmis.Items) > 0 {
		return nil // still in use; the VMI's deletion wakes us
	}
	patch := client.MergeFrom(pvc.DeepCopy())
	controllerutil.RemoveFinalizer(pvc, pvcProtectionFinalizer)
	return client.IgnoreNotFound(r.sim.c.Patch(ctx, pvc, patch))
}

func (r *pvcReconciler) claimsOfImage(ctx context.Context, image client.Object) []ctrl.Request {
	id := image.GetNamespace() + "/" + image.GetName()
	return r.claimsWhere(ctx, func(pvc *corev1.PersistentVolumeClaim) bool {
		return pvc.Annotations[annotationImageID] == id
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

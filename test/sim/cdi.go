package sim

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

// DataVolumeGVK is CDI's DataVolume kind.
var DataVolumeGVK = cdiv1.SchemeGroupVersion.WithKind("DataVolume")

const (
	dataVolumeSucceeded = cdiv1.Succeeded
	// cdiLabel marks the PVCs CDI creates (common.CDILabelKey/Value).
	cdiLabelKey, cdiLabelValue = "app", "containerized-data-importer"
)

// dataVolumeReconciler plays CDI for DataVolumes: it creates the DataVolume's PVC (named after it,
// owned by it, with its labels and annotations, as newPersistentVolumeClaim does) and fills it,
// importing from spec.source.http (ImportScheduled, ImportInProgress) for ImportDelay, or cloning
// spec.source.pvc once that PVC is bound (CloneScheduled, CloneInProgress) for CloneDelay; then
// the PVC is Bound and the DataVolume Succeeded. Nothing is copied.
type dataVolumeReconciler struct {
	sim *Simulator
	// started records when CDI started filling each DataVolume (by UID).
	started sync.Map
}

func (r *dataVolumeReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-cdi").
		For(&cdiv1.DataVolume{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		// A clone starts as soon as its source PVC is bound.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.clonesOf)).
		Complete(r)
}

// clonesOf names the DataVolumes that clone pvc.
func (r *dataVolumeReconciler) clonesOf(ctx context.Context, pvc client.Object) []ctrl.Request {
	list := &cdiv1.DataVolumeList{}
	if err := r.sim.c.List(ctx, list, client.MatchingFields{indexDataVolumeBySource: pvc.GetNamespace() + "/" + pvc.GetName()}); err != nil {
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

func (s *Simulator) getDataVolume(ctx context.Context, namespace, name string) (*cdiv1.DataVolume, error) {
	dv := &cdiv1.DataVolume{}
	return dv, s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, dv)
}

func dataVolumePhase(dv *cdiv1.DataVolume) cdiv1.DataVolumePhase { return dv.Status.Phase }

func (r *dataVolumeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	dv := &cdiv1.DataVolume{}
	if err := r.sim.c.Get(ctx, req.NamespacedName, dv); err != nil || dv.DeletionTimestamp != nil {
		r.started.Delete(dv.UID)
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if dv.Status.Phase == cdiv1.Succeeded {
		// CDI leaves a DataVolume that succeeded alone, even once its PVC is deleted.
		r.started.Delete(dv.UID)
		return ctrl.Result{}, nil
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.sim.c.Get(ctx, req.NamespacedName, pvc); apierrors.IsNotFound(err) {
		if pvc, err = r.createPVC(ctx, dv); err != nil {
			return retryConflict(err)
		}
	} else if err != nil {
		return ctrl.Result{}, err
	}
	src := dv.Spec.Source
	if src == nil || (src.HTTP == nil && src.PVC == nil) {
		return retryConflict(r.setStatus(ctx, dv, cdiv1.Pending, "N/A"))
	}
	delay, inProgress := r.sim.cfg.ImportDelay, cdiv1.ImportInProgress
	if d, err := time.ParseDuration(dv.Annotations[AnnotationImportDelay]); err == nil {
		delay = d
	}
	if src.PVC != nil {
		delay, inProgress = r.sim.cfg.CloneDelay, cdiv1.CloneInProgress
		source := &corev1.PersistentVolumeClaim{}
		if err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: src.PVC.Namespace, Name: src.PVC.Name}, source); err != nil || source.Status.Phase != corev1.ClaimBound {
			if err := r.setStatus(ctx, dv, cdiv1.CloneScheduled, "N/A"); err != nil {
				return retryConflict(err)
			}
			return ctrl.Result{RequeueAfter: recheck}, nil
		}
	}
	since, _ := r.started.LoadOrStore(dv.UID, time.Now())
	elapsed := time.Since(since.(time.Time))
	if elapsed < delay {
		progress := fmt.Sprintf("%.2f%%", 100*elapsed.Seconds()/delay.Seconds())
		if err := r.setStatus(ctx, dv, inProgress, cdiv1.DataVolumeProgress(progress)); err != nil {
			return retryConflict(err)
		}
		return ctrl.Result{RequeueAfter: min(delay-elapsed, recheck)}, nil
	}
	if err := r.bind(ctx, pvc); err != nil {
		return retryConflict(err)
	}
	if err := r.setStatus(ctx, dv, cdiv1.Succeeded, "100.0%"); err != nil {
		return retryConflict(err)
	}
	r.started.Delete(dv.UID)
	if src.PVC != nil {
		r.sim.event(componentCDI, dv, corev1.EventTypeNormal, "CloneSucceeded", fmt.Sprintf("Successfully cloned from %s/%s into %s/%s", src.PVC.Namespace, src.PVC.Name, dv.Namespace, dv.Name))
	} else {
		r.sim.event(componentCDI, dv, corev1.EventTypeNormal, "ImportSucceeded", "Import Successful")
	}
	return ctrl.Result{}, nil
}

// createPVC creates the DataVolume's PVC as CDI's newPersistentVolumeClaim does: its name, its
// labels and annotations, CDI's own, and the DataVolume as controller. spec.storage leaves the
// access and volume modes to the storage profile; Harvester's profile for Longhorn gives
// ReadWriteMany Block.
func (r *dataVolumeReconciler) createPVC(ctx context.Context, dv *cdiv1.DataVolume) (*corev1.PersistentVolumeClaim, error) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Name: dv.Name, Namespace: dv.Namespace,
		Labels: mergeAnnotations(map[string]string{cdiLabelKey: cdiLabelValue}, dv.Labels),
		Annotations: mergeAnnotations(maps.Clone(dv.Annotations), map[string]string{
			"cdi.kubevirt.io/storage.contentType":             "kubevirt",
			"cdi.kubevirt.io/storage.pod.restarts":            "0",
			"cdi.kubevirt.io/storage.preallocation.requested": "false",
		}),
	}}
	switch {
	case dv.Spec.PVC != nil:
		pvc.Spec = *dv.Spec.PVC.DeepCopy()
	case dv.Spec.Storage != nil:
		s := dv.Spec.Storage
		pvc.Spec = corev1.PersistentVolumeClaimSpec{
			StorageClassName: s.StorageClassName, Resources: s.Resources, AccessModes: s.AccessModes, VolumeMode: s.VolumeMode,
			DataSource: s.DataSource, DataSourceRef: s.DataSourceRef, Selector: s.Selector, VolumeName: s.VolumeName,
		}
	}
	if len(pvc.Spec.AccessModes) == 0 {
		pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	}
	if pvc.Spec.VolumeMode == nil {
		pvc.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
	}
	if err := controllerutil.SetControllerReference(dv, pvc, r.sim.c.Scheme()); err != nil {
		return nil, err
	}
	if err := r.sim.c.Create(ctx, pvc); err != nil {
		return nil, err
	}
	return pvc, r.setPVCPhase(ctx, pvc, corev1.ClaimPending)
}

// bind binds the filled PVC to its volume.
func (r *dataVolumeReconciler) bind(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.VolumeName == "" {
		pvc.Spec.VolumeName = "pvc-" + string(pvc.UID)
		pvc.Annotations = mergeAnnotations(pvc.Annotations, map[string]string{annotationBindCompleted: "yes", annotationBoundByController: "yes"})
		if err := r.sim.c.Update(ctx, pvc); err != nil {
			return err
		}
	}
	return r.setPVCPhase(ctx, pvc, corev1.ClaimBound)
}

func (r *dataVolumeReconciler) setPVCPhase(ctx context.Context, pvc *corev1.PersistentVolumeClaim, phase corev1.PersistentVolumeClaimPhase) error {
	if pvc.Status.Phase == phase {
		return nil
	}
	pvc.Status.Phase = phase
	if phase == corev1.ClaimBound {
		pvc.Status.AccessModes = pvc.Spec.AccessModes
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]}
	}
	return r.sim.c.Status().Update(ctx, pvc)
}

// setStatus sets the DataVolume's phase, progress and conditions (Bound, Ready, Running) as CDI
// reports them.
func (r *dataVolumeReconciler) setStatus(ctx context.Context, dv *cdiv1.DataVolume, phase cdiv1.DataVolumePhase, progress cdiv1.DataVolumeProgress) error {
	if dv.Status.Phase == phase && dv.Status.Progress == progress {
		return nil
	}
	done := phase == cdiv1.Succeeded
	running := phase == cdiv1.ImportInProgress || phase == cdiv1.CloneInProgress
	cond := func(t cdiv1.DataVolumeConditionType, ok bool, reason string) cdiv1.DataVolumeCondition {
		status := corev1.ConditionFalse
		if ok {
			status = corev1.ConditionTrue
		}
		now := metav1.Now()
		return cdiv1.DataVolumeCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now, LastHeartbeatTime: now}
	}
	bound := "Pending"
	if done {
		bound = "Bound"
	}
	runningReason := "Pending"
	switch {
	case done:
		runningReason = "Completed"
	case running:
		runningReason = ""
	}
	dv.Status.Phase, dv.Status.Progress = phase, progress
	dv.Status.Conditions = []cdiv1.DataVolumeCondition{cond(cdiv1.DataVolumeBound, done, bound), cond(cdiv1.DataVolumeReady, done, ""), cond(cdiv1.DataVolumeRunning, running, runningReason)}
	return r.sim.c.Status().Update(ctx, dv)
}

// ensureImportDataVolume creates the DataVolume a CDI image is imported into, as Harvester's CDI
// backend does (pkg/image/cdi initializeDownload): named after the image, owned by it, importing
// spec.url into spec.targetStorageClassName at the image's virtual size.
func (r *imageReconciler) ensureImportDataVolume(ctx context.Context, image *unstructured.Unstructured) error {
	sc, _, _ := unstructured.NestedString(image.Object, "spec", "targetStorageClassName")
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name: image.GetName(), Namespace: image.GetNamespace(),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: VirtualMachineImageGVK.GroupVersion().String(), Kind: VirtualMachineImageGVK.Kind,
				Name: image.GetName(), UID: image.GetUID(), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: displayURL(image)}},
			Storage: &cdiv1.StorageSpec{StorageClassName: ptr.To(sc), Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(r.virtualSize(image), resource.BinarySI)},
			}},
		},
	}
	if d, ok := image.GetAnnotations()[AnnotationImportDelay]; ok {
		dv.Annotations = map[string]string{AnnotationImportDelay: d}
	}
	if err := r.sim.c.Create(ctx, dv); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

package sim

import (
	"context"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationImportDelay overrides Config.ImportDelay for the VirtualMachineImage it is set on (a
// Go duration, such as "1h"), so one test can hold a single image back while others import.
const AnnotationImportDelay = "sim.butler.butlerlabs.dev/import-delay"

// AnnotationVirtualSize sets the virtual size the VirtualMachineImage it is set on reports once
// imported (a quantity, such as "30Gi"), overriding Config.ImageVirtualSize.
const AnnotationVirtualSize = "sim.butler.butlerlabs.dev/virtual-size"

// imageReconciler imports VirtualMachineImages: after ImportDelay an image reports Imported=True,
// its storage class (longhorn-<name>, as Harvester names it) and its virtual size; with the
// import-failed fault it reports Imported=False with Harvester's reason instead.
type imageReconciler struct{ sim *Simulator }

func (r *imageReconciler) setup(mgr ctrl.Manager) error {
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	return ctrl.NewControllerManagedBy(mgr).Named("sim-image").For(image).Complete(r)
}

func (r *imageReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	if err := r.sim.c.Get(ctx, req.NamespacedName, image); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if _, decided, _ := unstructured.NestedSlice(image.Object, "status", "conditions"); decided {
		return ctrl.Result{}, nil // imported or failed: final, as for a real import
	}
	delay := r.sim.cfg.ImportDelay
	if d, err := time.ParseDuration(image.GetAnnotations()[AnnotationImportDelay]); err == nil {
		delay = d
	}
	if wait := delay - time.Since(image.GetCreationTimestamp().Time); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	patch := client.MergeFrom(image.DeepCopy())
	status := map[string]any{"storageClassName": "longhorn-" + image.GetName()}
	if r.sim.hasFault(image, FaultImportFailed) {
		status["progress"] = int64(42)
		status["conditions"] = []any{map[string]any{
			"type": "Imported", "status": "False", "reason": "ImportFailed",
			"message": "failed to download image: unexpected EOF after 42% of " + displayURL(image),
		}}
	} else {
		status["progress"] = int64(100)
		size := r.sim.cfg.ImageVirtualSize
		if q, err := resource.ParseQuantity(image.GetAnnotations()[AnnotationVirtualSize]); err == nil {
			size = q.Value()
		}
		status["size"] = size / 3
		status["virtualSize"] = size
		status["conditions"] = []any{
			map[string]any{"type": "Initialized", "status": "True"},
			map[string]any{"type": "Imported", "status": "True"},
		}
	}
	if !r.sim.hasFault(image, FaultImportFailed) {
		// Harvester creates one storage class per image; volumes cloned from the image use it.
		if err := r.ensureStorageClass(ctx, image); err != nil {
			return ctrl.Result{}, err
		}
	}
	image.Object["status"] = status
	return ctrl.Result{}, r.sim.c.Status().Patch(ctx, image, patch)
}

func (r *imageReconciler) ensureStorageClass(ctx context.Context, image *unstructured.Unstructured) error {
	sc := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "longhorn-" + image.GetName()},
		Provisioner: "driver.longhorn.io",
		Parameters: map[string]string{
			"backingImage":               image.GetNamespace() + "-" + image.GetName(),
			"backingImageDataSourceType": "download",
			"migratable":                 "true",
			"numberOfReplicas":           "3",
		},
		AllowVolumeExpansion: ptr.To(true),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
	}
	if err := r.sim.c.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func imageImported(image *unstructured.Unstructured) bool {
	conditions, _, _ := unstructured.NestedSlice(image.Object, "status", "conditions")
	for _, c := range conditions {
		if m, ok := c.(map[string]any); ok && m["type"] == "Imported" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func displayURL(image *unstructured.Unstructured) string {
	if url, _, _ := unstructured.NestedString(image.Object, "spec", "url"); url != "" {
		return url
	}
	return image.GetNamespace() + "/" + image.GetName()
}

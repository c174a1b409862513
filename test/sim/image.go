package sim

import (
	"context"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// AnnotationCloneDelay on a VirtualMachineImage overrides Config.CloneDelay for the disks cloned
// from it (a duration such as "3s"): a test that must see a disk still cloning when its VM
// starts gets a clone that outlasts a slow machine.
const AnnotationCloneDelay = "sim.butler.butlerlabs.dev/clone-delay"

// AnnotationVirtualSize sets the virtual size the VirtualMachineImage it is set on reports once
// imported (a quantity, such as "30Gi"), overriding Config.ImageVirtualSize.
const AnnotationVirtualSize = "sim.butler.butlerlabs.dev/virtual-size"

// imageReconciler imports VirtualMachineImages the way Harvester's image controller moves them
// through its states (pkg/image/common/operator.go): a new image is Initialized and Importing at
// once, with its storage class in status; it is Imported after the import delay. A download that
// fails is retried: each failure counts in status.failed and shows in RetryLimitExceeded=False's
// message ("retry attempted n/3 failed due to error: ..."); once status.failed exceeds spec.retry,
// RetryLimitExceeded=True and Imported=False. Nothing is fetched.
//
// The storage class depends on the image's backend (spec.backend): Longhorn backing images
// (backingimage, the default) get a class of their own, lh-<image uid> (GetStorageClassName;
// older Harvester versions named it longhorn-<image name>); CDI images (cdi, Harvester 1.5+)
// import into a DataVolume named after the image, of spec.targetStorageClassName, which is
// also their status.storageClassName, and are Imported once that DataVolume has succeeded
// (pkg/image/cdi).
type imageReconciler struct{ sim *Simulator }

// Image backends (spec.backend).
const (
	backendBackingImage = "backingimage"
	backendCDI          = "cdi"
)

func (r *imageReconciler) setup(mgr ctrl.Manager) error {
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	return ctrl.NewControllerManagedBy(mgr).Named("sim-image").For(image).Complete(r)
}

func (r *imageReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	if err := r.sim.c.Get(ctx, req.NamespacedName, image); err != nil || image.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	conds := conditionsOf(image)
	if conds["Imported"] == "True" || conds["RetryLimitExceeded"] == "True" {
		return ctrl.Result{}, nil // final, as for a real import
	}
	delay := r.sim.cfg.ImportDelay
	if d, err := time.ParseDuration(image.GetAnnotations()[AnnotationImportDelay]); err == nil {
		delay = d
	}
	patch := client.MergeFrom(image.DeepCopy())
	status, _, _ := unstructured.NestedMap(image.Object, "status")
	if status == nil {
		status = map[string]any{}
	}
	now := time.Now()
	failing := r.sim.unreachable(displayURL(image))
	backend := imageBackend(image)
	var next time.Duration
	switch {
	case backend != backendBackingImage && backend != backendCDI:
		// Harvester's image webhook refuses other backends; an image that has one anyway is never
		// initialized.
		setImageConditions(status, cond("Initialized", "False", "", fmt.Sprintf("unsupported backend %q", backend)))
	case r.sim.hasFault(image, FaultImportFailed):
		// The backing image failed for good at once (for example a corrupt file).
		status["storageClassName"] = r.storageClassOf(image)
		status["progress"] = int64(42)
		status["failed"] = int64(imageRetries + 1)
		setImageConditions(status, cond("Initialized", "True", "Initialized", ""),
			cond("Imported", "False", "ImportFailed", "failed to download image: unexpected EOF after 42% of "+displayURL(image)),
			cond("RetryLimitExceeded", "True", "", "failed to download image: unexpected EOF after 42% of "+displayURL(image)))
	case conds["Initialized"] != "True":
		status["storageClassName"] = r.storageClassOf(image)
		status["progress"] = int64(0)
		setImageConditions(status, cond("Initialized", "True", "Initialized", ""), cond("Imported", "Unknown", "Importing", ""))
		// A backing image gets a storage class of its own, which volumes cloned from it use; a
		// CDI image gets a DataVolume the image is imported into.
		ensure := r.ensureStorageClass
		if backend == backendCDI {
			ensure = r.ensureImportDataVolume
		}
		if err := ensure(ctx, image); err != nil {
			return ctrl.Result{}, err
		}
		next = delay
	case failing:
		failed, _, _ := unstructured.NestedInt64(image.Object, "status", "failed")
		attempt := image.GetCreationTimestamp().Add(time.Duration(failed+1) * delay)
		if wait := attempt.Sub(now); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		failed++
		msg := fmt.Sprintf("failed due to error: failed to download %s: dial tcp: connect: no route to host", displayURL(image))
		if failed > 1 {
			msg = fmt.Sprintf("retry attempted %d/%d %s", failed-1, imageRetries, msg)
		}
		status["failed"] = failed
		status["lastFailedTime"] = now.Format(time.RFC3339)
		if failed > imageRetries {
			setImageConditions(status, cond("Imported", "False", "Importing", msg), cond("RetryLimitExceeded", "True", "", msg))
		} else {
			setImageConditions(status, cond("RetryLimitExceeded", "False", "", msg))
			next = delay
		}
	case backend == backendCDI:
		// Imported once CDI's import into the image's DataVolume has succeeded (cdi.go Check).
		dv, err := r.sim.getDataVolume(ctx, image.GetNamespace(), image.GetName())
		if err != nil || dataVolumePhase(dv) != dataVolumeSucceeded {
			return ctrl.Result{RequeueAfter: recheck}, client.IgnoreNotFound(err)
		}
		status["progress"] = int64(100)
		status["size"] = r.virtualSize(image) / 3
		status["virtualSize"] = r.virtualSize(image)
		setImageConditions(status, cond("Imported", "True", "Imported", ""))
	default:
		if wait := image.GetCreationTimestamp().Add(delay).Sub(now); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		size := r.virtualSize(image)
		status["progress"] = int64(100)
		status["size"] = size / 3
		status["virtualSize"] = size
		setImageConditions(status, cond("Imported", "True", "Imported", ""))
	}
	image.Object["status"] = status
	if err := r.sim.c.Status().Patch(ctx, image, patch); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

func cond(condType, status, reason, message string) map[string]any {
	return map[string]any{"type": condType, "status": status, "reason": reason, "message": message,
		"lastUpdateTime": time.Now().UTC().Format(time.RFC3339)}
}

// setImageConditions sets conditions in status, keeping those of other types.
func setImageConditions(status map[string]any, conds ...map[string]any) {
	list, _ := status["conditions"].([]any)
	for _, c := range conds {
		replaced := false
		for i, old := range list {
			if m, ok := old.(map[string]any); ok && m["type"] == c["type"] {
				list[i], replaced = c, true
			}
		}
		if !replaced {
			list = append(list, c)
		}
	}
	status["conditions"] = list
}

// conditionsOf maps an image's condition types to their status.
func conditionsOf(image *unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	list, _, _ := unstructured.NestedSlice(image.Object, "status", "conditions")
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			t, _ := m["type"].(string)
			st, _ := m["status"].(string)
			out[t] = st
		}
	}
	return out
}

// virtualSize is what the image reports as its virtual size once imported.
func (r *imageReconciler) virtualSize(image *unstructured.Unstructured) int64 {
	if q, err := resource.ParseQuantity(image.GetAnnotations()[AnnotationVirtualSize]); err == nil {
		return q.Value()
	}
	return r.sim.cfg.ImageVirtualSize
}

func imageBackend(image *unstructured.Unstructured) string {
	if b, _, _ := unstructured.NestedString(image.Object, "spec", "backend"); b != "" {
		return b
	}
	return backendBackingImage
}

// storageClassOf is Harvester's GetStorageClassName for a new image: spec.targetStorageClassName
// for CDI images, lh-<image uid> (shortened as Longhorn shortens names) for backing images, or
// longhorn-<image name> (unshortened, without the namespace) on a Harvester up to v1.7.x (see
// Config.LegacyImageStorageClassNames).
func (r *imageReconciler) storageClassOf(image *unstructured.Unstructured) string {
	switch {
	case imageBackend(image) == backendCDI:
		sc, _, _ := unstructured.NestedString(image.Object, "spec", "targetStorageClassName")
		return sc
	case r.sim.cfg.LegacyImageStorageClassNames:
		return "longhorn-" + image.GetName()
	}
	return longhornName("lh-" + string(image.GetUID()))
}

// longhornNameMaxLength is the longest name Longhorn gives its objects (datastore.NameMaximumLength).
const longhornNameMaxLength = 40

// longhornName is Longhorn's AutoCorrectName: lower case, and a name too long cut to the maximum
// length with the first 8 hex digits of its SHA-512 checksum as a suffix.
func longhornName(name string) string {
	out := strings.ToLower(name)
	if len(name) > longhornNameMaxLength {
		sum := sha512.Sum512([]byte(name))
		suffix := "-" + hex.EncodeToString(sum[:])[:8]
		out = strings.TrimRight(out[:longhornNameMaxLength-len(suffix)], "-") + suffix
	}
	return out
}

// ensureStorageClass creates the image's storage class as Harvester's backing image backend does:
// Longhorn volumes of the image's backing image vmi-<image uid>.
func (r *imageReconciler) ensureStorageClass(ctx context.Context, image *unstructured.Unstructured) error {
	sc := &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: r.storageClassOf(image)},
		Provisioner: longhornProvisioner,
		Parameters: map[string]string{
			"backingImage":        longhornName("vmi-" + string(image.GetUID())),
			"migratable":          "true",
			"numberOfReplicas":    "3",
			"staleReplicaTimeout": "30",
		},
		ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		AllowVolumeExpansion: ptr.To(true),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
	}
	if err := r.sim.c.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func imageImported(image *unstructured.Unstructured) bool {
	return conditionsOf(image)["Imported"] == "True"
}

func displayURL(image *unstructured.Unstructured) string {
	if url, _, _ := unstructured.NestedString(image.Object, "spec", "url"); url != "" {
		return url
	}
	return image.GetNamespace() + "/" + image.GetName()
}

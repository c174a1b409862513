package harvester

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
)

// VirtualMachineImageGVK is Harvester's image kind. It is read as unstructured: the provider needs
// three status fields, not Harvester's Go module and its dependency tree.
var VirtualMachineImageGVK = schema.GroupVersionKind{Group: "harvesterhci.io", Version: "v1beta1", Kind: "VirtualMachineImage"}

// imageNotReadyRetry is how often to look again at an image that is still importing.
const imageNotReadyRetry = 5 * time.Second

// getFunc reads one object: client.Client.Get, or remoteMachines.read for one the cache may hold.
type getFunc func(ctx context.Context, key client.ObjectKey, obj client.Object) error

// ReadImage reads what the machine builders need to know of an image (its backend, storage class,
// size and readiness), as the provider reads it before it creates a root disk.
func ReadImage(ctx context.Context, c client.Reader, ref ObjectRef) (ImageInfo, error) {
	return getImage(ctx, func(ctx context.Context, key client.ObjectKey, obj client.Object) error { return c.Get(ctx, key, obj) }, ref)
}

// getImage reads the image's readiness, storage class and size.
func getImage(ctx context.Context, get getFunc, ref ObjectRef) (ImageInfo, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(VirtualMachineImageGVK)
	if err := get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return ImageInfo{}, Permanent(reasons.ImageNotFound,
				"VirtualMachineImage %s does not exist on Harvester: upload it, or name an existing image", ref)
		}
		return ImageInfo{}, classify(err, "get VirtualMachineImage "+ref.String())
	}
	info := ImageInfo{Ref: ref, Backend: BackendBackingImage}
	if backend, _, _ := unstructured.NestedString(u.Object, "spec", "backend"); backend != "" {
		info.Backend = backend
	}
	info.StorageClassName, _, _ = unstructured.NestedString(u.Object, "status", "storageClassName")
	info.VirtualSizeBytes, _, _ = unstructured.NestedInt64(u.Object, "status", "virtualSize")
	conditions, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Imported" {
			continue
		}
		switch m["status"] {
		case "True":
			info.Imported = true
		case "False":
			if msg, _ := m["message"].(string); msg != "" || m["reason"] != nil {
				info.ImportFailure = fmt.Sprintf("%v: %v", m["reason"], msg)
			}
		}
	}
	return info, nil
}

// Image backends (the image's spec.backend): how Harvester stores an image and clones disks
// from it.
const (
	// BackendBackingImage is a Longhorn backing image: a disk is a PVC annotated with the image,
	// of the image's own storage class (the default backend).
	BackendBackingImage = "backingimage"
	// BackendCDI (Harvester 1.5+) is a PVC filled by CDI: a disk is a DataVolume cloned from it.
	BackendCDI = "cdi"
)

// checkImageBackend refuses an image whose disks the provider cannot clone, before anything is
// created: retrying would not help.
func checkImageBackend(info ImageInfo) error {
	if info.Backend != BackendBackingImage && info.Backend != BackendCDI {
		return Permanent(reasons.ImageBackendUnsupported,
			"VirtualMachineImage %s has spec.backend %q: the provider clones root disks from images of backend %s or %s only; use such an image", info.Ref, info.Backend, BackendBackingImage, BackendCDI)
	}
	return nil
}

// checkImageUsable turns an image that cannot back a root disk of diskGB into the right error.
func checkImageUsable(info ImageInfo, diskGB int64) error {
	if err := checkImageBackend(info); err != nil {
		return err
	}
	if err := checkImageImported(info); err != nil {
		return err
	}
	if info.VirtualSizeBytes > diskGB<<30 {
		return Permanent(reasons.DiskTooSmall,
			"spec.diskGB is %d but VirtualMachineImage %s needs %d GiB: raise spec.diskGB", diskGB, info.Ref, (info.VirtualSizeBytes+(1<<30)-1)>>30)
	}
	return nil
}

// checkImageImported says whether Harvester has finished importing the image.
func checkImageImported(info ImageInfo) error {
	switch {
	case info.ImportFailure != "" && !info.Imported:
		return Permanent(reasons.ImageImportFailed,
			"Harvester failed to import VirtualMachineImage %s (%s): fix or re-upload the image", info.Ref, info.ImportFailure)
	case !info.Imported:
		return Waiting(reasons.ImageNotReady, imageNotReadyRetry,
			"VirtualMachineImage %s is not imported yet; waiting for Harvester to finish the import", info.Ref)
	}
	return nil
}

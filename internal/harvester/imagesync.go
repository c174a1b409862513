package harvester

import (
	"cmp"
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// Images puts images of the Butler Image Factory on one Harvester cluster.
type Images interface {
	// EnsureImage creates the VirtualMachineImage if it does not exist, reuses one of the same name
	// and URL (images are shared: VM disks are cloned from them), and reports its import. An image
	// of that name with another URL is never reused (a PermanentError with
	// reasons.CreateImageFailed). It never deletes an image.
	EnsureImage(ctx context.Context, spec ImageSpec) (ImageImport, error)
	// ImageExists reports whether the image is there (live when the cache does not have it).
	ImageExists(ctx context.Context, ref ObjectRef) (bool, error)
}

// ImageSpec is a factory image to put on Harvester.
type ImageSpec struct {
	Ref         ObjectRef
	DisplayName string
	URL         string
	// Requester is "<namespace>/<name>" of the ImageSync that asked first, for people and events.
	Requester string
}

// ImageImport is how far Harvester has got with an image.
type ImageImport struct {
	// Created is true when this call created the image.
	Created  bool
	Imported bool
	// Failure is set when Harvester gave up: a permanent failure whose reason is one of the
	// ImageSync failure reasons.
	Failure error
	// Message says what Harvester reports while importing (failed attempts it retries included).
	Message string
}

// Labels and annotations of the images the provider creates.
const (
	// LabelAppManagedBy is the label the rest of Butler puts on the images it creates.
	LabelAppManagedBy = "app.kubernetes.io/managed-by"
	// AnnotationImageDownloadURL records where an image was downloaded from, as the published
	// provider records it.
	AnnotationImageDownloadURL = "harvesterhci.io/image-download-url"
	// AnnotationImageSync names the ImageSync that created an image.
	AnnotationImageSync = "butler.butlerlabs.dev/imagesync"
)

// BuildVirtualMachineImage returns the image Harvester downloads from the factory.
func BuildVirtualMachineImage(s ImageSpec) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(VirtualMachineImageGVK)
	u.SetNamespace(s.Ref.Namespace)
	u.SetName(s.Ref.Name)
	u.SetLabels(map[string]string{LabelAppManagedBy: "butler", LabelManagedBy: ManagedByValue})
	u.SetAnnotations(map[string]string{AnnotationImageDownloadURL: s.URL, AnnotationImageSync: s.Requester})
	u.Object["spec"] = map[string]any{
		"displayName": cmp.Or(s.DisplayName, s.Ref.Name),
		"sourceType":  "download",
		"url":         s.URL,
	}
	return u
}

func (m *images) EnsureImage(ctx context.Context, spec ImageSpec) (ImageImport, error) {
	what := describe("VirtualMachineImage", spec.Ref.Namespace, spec.Ref.Name)
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	created := false
	err := m.read(ctx, client.ObjectKey{Namespace: spec.Ref.Namespace, Name: spec.Ref.Name}, image)
	if apierrors.IsNotFound(err) {
		image = BuildVirtualMachineImage(spec)
		err = m.c.Create(ctx, image)
		created = err == nil
		if apierrors.IsAlreadyExists(err) {
			// Another ImageSync (or Butler) created it since we looked: read it live.
			err = m.c.Get(ctx, client.ObjectKey{Namespace: spec.Ref.Namespace, Name: spec.Ref.Name}, image)
		} else if err != nil {
			if p, ok := errkind.AsPermanent(createError(err, what)); ok {
				return ImageImport{}, Permanent(reasons.CreateImageFailed, "%s", p.Message)
			}
			return ImageImport{}, createError(err, what)
		}
	}
	if err != nil {
		return ImageImport{}, classify(err, "get "+what)
	}
	if url, _, _ := unstructured.NestedString(image.Object, "spec", "url"); url != spec.URL {
		return ImageImport{}, Permanent(reasons.CreateImageFailed,
			"%s exists with URL %q, not %q: it is another image and is left alone; set spec.displayName to give this one another name, or delete that image", what, url, spec.URL)
	}
	state := importStateOf(image)
	state.Created = created
	return state, nil
}

// importStateOf reads Harvester's import conditions. Harvester retries a failed download
// spec.retry times (status.failed counts them, RetryLimitExceeded=False carries the last error)
// and only then gives up: RetryLimitExceeded=True, and Imported (or Initialized, if the image
// never got that far) False.
func importStateOf(image *unstructured.Unstructured) ImageImport {
	conds := imageConditions(image)
	what := describe("VirtualMachineImage", image.GetNamespace(), image.GetName())
	state := ImageImport{Message: "Harvester is downloading " + what}
	retry := conds["RetryLimitExceeded"]
	switch {
	case conds["Imported"].status == "True":
		state.Imported = true
		state.Message = what + " is imported"
	case retry.status == "True" && conds["Initialized"].status == "False":
		state.Failure = Permanent(reasons.HarvesterInitFailed, "Harvester could not initialize %s: %s; fix the cause and delete that image so it is created again", what, cmp.Or(retry.message, conds["Initialized"].message))
	case retry.status == "True":
		state.Failure = Permanent(reasons.HarvesterRetryLimitExceeded, "Harvester gave up downloading %s: %s; check that Harvester can reach the image factory, then delete that image so it is downloaded again", what, retry.message)
	case conds["Imported"].status == "False":
		state.Failure = Permanent(reasons.HarvesterImportFailed, "Harvester failed to import %s (%s): %s; delete that image so it is imported again", what, conds["Imported"].reason, conds["Imported"].message)
	case retry.message != "":
		state.Message = fmt.Sprintf("Harvester is downloading %s and retries after a failure: %s", what, retry.message)
	}
	return state
}

type imageCondition struct{ status, reason, message string }

func imageConditions(image *unstructured.Unstructured) map[string]imageCondition {
	out := map[string]imageCondition{}
	list, _, _ := unstructured.NestedSlice(image.Object, "status", "conditions")
	for _, c := range list {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		out[str("type")] = imageCondition{status: str("status"), reason: str("reason"), message: str("message")}
	}
	return out
}

func (m *images) ImageExists(ctx context.Context, ref ObjectRef) (bool, error) {
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	err := m.read(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, image)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, classify(err, "get VirtualMachineImage "+ref.String())
	}
	return image.GetDeletionTimestamp() == nil, nil
}

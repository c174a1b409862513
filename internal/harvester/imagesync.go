package harvester

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// Images puts images of the Butler Image Factory on one Harvester cluster.
type Images interface {
	// EnsureImage creates the VirtualMachineImage if it does not exist, reuses one of the same name
	// and URL (images are shared: VM disks are cloned from them), and reports its import. An image
	// of that name with another URL is never reused (a PermanentError with
	// ReasonCreateImageFailed). It never deletes an image.
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
	// Failure is set when Harvester gave up: Reason is one of the ImageSync failure reasons.
	Failure *PermanentError
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

// Factory defaults of an ImageSync (as butler-api defaults them).
const (
	defaultImagePlatform = "nocloud"
	defaultImageArch     = "amd64"
	defaultImageFormat   = "qcow2"
)

// FactoryImageURL is where Harvester downloads an ImageSync's image from:
// <factory>/image/<schematic>/<version>/<platform>-<arch>.<format>.
func FactoryImageURL(factoryURL string, s v1alpha1.ImageSyncSpec) string {
	ref := s.FactoryRef
	return fmt.Sprintf("%s/image/%s/%s/%s-%s.%s", strings.TrimSuffix(factoryURL, "/"), ref.SchematicID, ref.Version,
		orDefault(ref.Platform, defaultImagePlatform), orDefault(ref.Arch, defaultImageArch), orDefault(s.Format, defaultImageFormat))
}

// FactoryImageName is the name of an ImageSync's VirtualMachineImage. It is the name the rest of
// Butler computes (the published provider and the CLI), so that every ImageSync for the same image
// finds the same VirtualMachineImage: spec.displayName sanitised if set, else the sanitised
// "<platform>-<version with dots as dashes>-<arch>-<first 8 of the schematic>-butler".
func FactoryImageName(s v1alpha1.ImageSyncSpec) string {
	if s.DisplayName != "" {
		return sanitizeImageName(s.DisplayName)
	}
	ref := s.FactoryRef
	schematic := ref.SchematicID
	if len(schematic) > 8 {
		schematic = schematic[:8]
	}
	return sanitizeImageName(fmt.Sprintf("%s-%s-%s-%s-butler", orDefault(ref.Platform, defaultImagePlatform),
		strings.ReplaceAll(ref.Version, ".", "-"), orDefault(ref.Arch, defaultImageArch), schematic))
}

var notInImageName = regexp.MustCompile(`[^a-z0-9.-]`)

// sanitizeImageName makes a DNS-subdomain-like name of s as Butler does: lower case, spaces and
// underscores as dashes, nothing but [a-z0-9.-], no double dashes, at most 63 characters, no
// dash or dot at either end.
func sanitizeImageName(s string) string {
	s = strings.ToLower(s)
	s = strings.NewReplacer(" ", "-", "_", "-").Replace(s)
	s = notInImageName.ReplaceAllString(s, "")
	for strings.Contains(s, "--") {
		s = strings.ReplaceAll(s, "--", "-")
	}
	if len(s) > validation.DNS1123LabelMaxLength {
		s = s[:validation.DNS1123LabelMaxLength]
	}
	return strings.Trim(s, "-.")
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// BuildVirtualMachineImage returns the image Harvester downloads from the factory.
func BuildVirtualMachineImage(s ImageSpec) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(VirtualMachineImageGVK)
	u.SetNamespace(s.Ref.Namespace)
	u.SetName(s.Ref.Name)
	u.SetLabels(map[string]string{LabelAppManagedBy: "butler", LabelManagedBy: ManagedByValue})
	u.SetAnnotations(map[string]string{AnnotationImageDownloadURL: s.URL, AnnotationImageSync: s.Requester})
	u.Object["spec"] = map[string]any{
		"displayName": orDefault(s.DisplayName, s.Ref.Name),
		"sourceType":  "download",
		"url":         s.URL,
	}
	return u
}

func (m *remoteMachines) EnsureImage(ctx context.Context, spec ImageSpec) (ImageImport, error) {
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
			if p, ok := AsPermanent(createError(err, what)); ok {
				return ImageImport{}, &PermanentError{Reason: v1alpha1.ReasonCreateImageFailed, Message: p.Message}
			}
			return ImageImport{}, createError(err, what)
		}
	}
	if err != nil {
		return ImageImport{}, classify(err, "get "+what)
	}
	if url, _, _ := unstructured.NestedString(image.Object, "spec", "url"); url != spec.URL {
		return ImageImport{}, Permanent(v1alpha1.ReasonCreateImageFailed,
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
		state.Failure = &PermanentError{Reason: v1alpha1.ReasonHarvesterInitFailed,
			Message: fmt.Sprintf("Harvester could not initialize %s: %s; fix the cause and delete that image so it is created again", what, orDefault(retry.message, conds["Initialized"].message))}
	case retry.status == "True":
		state.Failure = &PermanentError{Reason: v1alpha1.ReasonHarvesterRetryLimitExceeded,
			Message: fmt.Sprintf("Harvester gave up downloading %s: %s; check that Harvester can reach the image factory, then delete that image so it is downloaded again", what, retry.message)}
	case conds["Imported"].status == "False":
		state.Failure = &PermanentError{Reason: v1alpha1.ReasonHarvesterImportFailed,
			Message: fmt.Sprintf("Harvester failed to import %s (%s): %s; delete that image so it is imported again", what, conds["Imported"].reason, conds["Imported"].message)}
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

func (m *remoteMachines) ImageExists(ctx context.Context, ref ObjectRef) (bool, error) {
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

var (
	schematicPattern = regexp.MustCompile(`^[0-9a-f]{8,64}$`)
	versionPattern   = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	platformPattern  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// imageArchs and imageFormats are what the Butler Image Factory serves.
var (
	imageArchs   = []string{"amd64", "arm64"}
	imageFormats = []string{"qcow2", "raw", "raw.xz", "raw.zst", "iso", "vmdk", "ova"}
)

// ValidateFactoryRef checks the parts of an ImageSync that go into the factory URL, so that none
// can add a path ("../"), a query ("?") or a fragment ("#") to it: the schematic ID is hex, the
// version semver, the platform a name, the architecture and format ones the factory serves. The
// error names the field and what it may be.
func ValidateFactoryRef(s v1alpha1.ImageSyncSpec) error {
	ref := s.FactoryRef
	switch {
	case !schematicPattern.MatchString(ref.SchematicID):
		return Permanent(v1alpha1.ReasonInvalidSpec, "spec.factoryRef.schematicID %q is not a schematic ID: it is the schematic's SHA-256, 8 to 64 lower-case hex digits", ref.SchematicID)
	case !versionPattern.MatchString(ref.Version):
		return Permanent(v1alpha1.ReasonInvalidSpec, "spec.factoryRef.version %q is not a version such as v1.9.5 (semver, with or without the v)", ref.Version)
	case ref.Platform != "" && !platformPattern.MatchString(ref.Platform):
		return Permanent(v1alpha1.ReasonInvalidSpec, "spec.factoryRef.platform %q is not a platform name such as nocloud or metal (lower-case letters, digits and dashes)", ref.Platform)
	case ref.Arch != "" && !slices.Contains(imageArchs, ref.Arch):
		return Permanent(v1alpha1.ReasonInvalidSpec, "spec.factoryRef.arch %q is not one of %s", ref.Arch, strings.Join(imageArchs, ", "))
	case s.Format != "" && !slices.Contains(imageFormats, s.Format):
		return Permanent(v1alpha1.ReasonInvalidSpec, "spec.format %q is not one of %s", s.Format, strings.Join(imageFormats, ", "))
	}
	return nil
}

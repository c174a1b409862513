package harvester

import (
	"context"
	"fmt"
	"strings"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// NetworkAttachmentDefinitionGVK is the multus network kind VMs attach to.
var NetworkAttachmentDefinitionGVK = schema.GroupVersionKind{Group: "k8s.cni.cncf.io", Version: "v1", Kind: "NetworkAttachmentDefinition"}

// Permission is one verb on one kind of object that the provider needs on Harvester.
type Permission struct {
	Verb, Group, Resource string
	// Namespace is empty for cluster-scoped resources.
	Namespace string
	// Name, if set, limits the permission to the object of that name.
	Name string
}

func (p Permission) String() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	if p.Name != "" {
		r += " " + p.Name
	}
	if p.Namespace == "" {
		return p.Verb + " " + r
	}
	return fmt.Sprintf("%s %s in namespace %s", p.Verb, r, p.Namespace)
}

// RequiredPermissions is everything the provider does on Harvester, for machines in namespace,
// images in imageNamespace and the network in networkNamespace. The documented Harvester Role is
// this list.
func RequiredPermissions(namespace, imageNamespace, networkNamespace string) []Permission {
	var out []Permission
	add := func(ns, group, resource string, verbs ...string) {
		for _, v := range verbs {
			out = append(out, Permission{Verb: v, Group: group, Resource: resource, Namespace: ns})
		}
	}
	// list and watch feed the provider's label-selected informers in this namespace.
	add(namespace, "kubevirt.io", "virtualmachines", "get", "list", "watch", "create", "patch", "delete")
	add(namespace, "kubevirt.io", "virtualmachineinstances", "get", "list", "watch")
	// patch: a VM taken over from an earlier MachineRequest of the same name has its disks
	// relabelled.
	add(namespace, "", "persistentvolumeclaims", "get", "list", "watch", "create", "patch", "delete")
	add(namespace, "", "secrets", "get", "list", "watch", "create", "patch", "delete")
	add(namespace, "", "events", "list")
	// Images in the machines' namespace: ImageSyncs create them there, and the informers watch
	// them (for ImageSyncs, and for the machines whose disks are cloned from them).
	add(namespace, "harvesterhci.io", "virtualmachineimages", "get", "list", "watch", "create")
	if imageNamespace != "" && imageNamespace != namespace {
		add(imageNamespace, "harvesterhci.io", "virtualmachineimages", "get")
	}
	add(networkNamespace, "k8s.cni.cncf.io", "network-attachment-definitions", "get")
	add("", "storage.k8s.io", "storageclasses", "get")
	// The cluster's identity, recorded with every machine (see ClusterIdentity).
	out = append(out, Permission{Verb: "get", Resource: "namespaces", Name: clustercache.IdentityNamespace})
	return out
}

// CDIPermissions is what the provider also needs in namespace for machines whose image is of the
// CDI backend: their root disks are DataVolumes (read live, never watched).
func CDIPermissions(namespace string) []Permission {
	var out []Permission
	for _, v := range []string{"get", "create", "delete"} {
		out = append(out, Permission{Verb: v, Group: cdiv1.SchemeGroupVersion.Group, Resource: "datavolumes", Namespace: namespace})
	}
	return out
}

// OptionalPermissions are what the provider uses when granted and does without otherwise, so the
// preflight does not require them: watch on events in namespace feeds one field-selected cache of
// Warning events per cluster (see NewWatches); without it the diagnosis lists a disk's or a pod's
// events when it needs them.
func OptionalPermissions(namespace string) []Permission {
	return []Permission{{Verb: "watch", Resource: "events", Namespace: namespace}}
}

// PreflightSpec is what a ProviderConfig asks of Harvester.
type PreflightSpec struct {
	Namespace string
	// Image is the default image; nil when the ProviderConfig has none.
	Image   *ObjectRef
	Network ObjectRef
	// StorageClass is the default storage class of extra disks ("" for none).
	StorageClass string
}

// Check is the outcome of one preflight check, in the shape of a condition.
type Check struct {
	Type    string
	OK      bool
	Reason  string
	Message string
	// Unknown means the check could not run.
	Unknown bool
}

// ServerVersion is the Harvester API server's version, e.g. "v1.30.4+rke2r1".
func (m *preflight) ServerVersion() (string, error) { return m.cluster.ServerVersion() }

// Preflight runs every check against Harvester. CredentialsValid comes first: when the API does not
// answer, the other checks are reported as not run.
func (m *preflight) Preflight(ctx context.Context, spec PreflightSpec) (version string, checks []Check) {
	version, err := m.ServerVersion()
	if err != nil {
		checks = append(checks, Check{Type: CheckCredentials, Reason: reasons.HarvesterUnreachable,
			Message: fmt.Sprintf("the Harvester API did not answer with these credentials: %v", err)})
		for _, t := range []string{CheckImage, CheckNetwork, CheckStorage, CheckPermissions} {
			checks = append(checks, Check{Type: t, Unknown: true, Reason: reasons.NotChecked, Message: "not checked: the credentials do not work"})
		}
		return "", checks
	}
	checks = append(checks, Check{Type: CheckCredentials, OK: true, Reason: reasons.CheckPassed,
		Message: "the Harvester API answers (Kubernetes " + version + ")"})
	image, imageCheck := m.checkImage(ctx, spec.Image)
	checks = append(checks, imageCheck, m.checkNetwork(ctx, spec.Network), m.checkStorage(ctx, image, spec.StorageClass), m.checkPermissions(ctx, spec, image))
	return version, checks
}

func (m *preflight) checkImage(ctx context.Context, ref *ObjectRef) (*ImageInfo, Check) {
	c := Check{Type: CheckImage}
	if ref == nil {
		c.OK, c.Reason, c.Message = true, reasons.NoDefaultImage, "no default image (harvester.imageName): every machine must name its own image"
		return nil, c
	}
	info, err := getImage(ctx, m.live, *ref)
	if err == nil {
		err = checkImageBackend(info)
	}
	if err == nil && info.Backend == BackendCDI {
		err = m.checkDataVolumesServed(info)
	}
	if err == nil {
		err = checkImageImported(info)
	}
	if err != nil {
		c.Reason, c.Message = reasonOf(err), err.Error()
		return nil, c
	}
	c.OK, c.Reason = true, reasons.CheckPassed
	switch info.Backend {
	case BackendCDI:
		c.Message = fmt.Sprintf("VirtualMachineImage %s is imported; backend cdi: root disks are DataVolumes cloned from its PVC, of storage class %s", ref, info.StorageClass())
	default:
		c.Message = fmt.Sprintf("VirtualMachineImage %s is imported; backend %s: root disks are PVCs cloned from it, of storage class %s", ref, info.Backend, info.StorageClass())
	}
	return &info, c
}

// checkDataVolumesServed refuses an image of the CDI backend on a Harvester that serves no
// DataVolumes (no CDI): its root disks could not be created.
func (m *remote) checkDataVolumesServed(info ImageInfo) error {
	gvk := cdiv1.SchemeGroupVersion.WithKind(dataVolumeKind)
	if _, err := m.c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
		if meta.IsNoMatchError(err) {
			return Permanent(reasons.ImageBackendUnsupported,
				"VirtualMachineImage %s is of backend %s, but Harvester serves no DataVolume API (%s): its root disks cannot be cloned; use an image of backend %s",
				info.Ref, BackendCDI, gvk.GroupVersion(), BackendBackingImage)
		}
		return classify(err, "look up the DataVolume API")
	}
	return nil
}

func (m *preflight) checkNetwork(ctx context.Context, ref ObjectRef) Check {
	c := Check{Type: CheckNetwork}
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(NetworkAttachmentDefinitionGVK)
	err := m.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, nad)
	switch {
	case apierrors.IsNotFound(err):
		c.Reason, c.Message = reasons.NetworkNotFound, fmt.Sprintf(
			"VM network %s (NetworkAttachmentDefinition) does not exist on Harvester: create it (Networks > VM Networks) or correct harvester.networkName", ref)
	case err != nil:
		c.Reason, c.Message = reasonOf(classify(err, "get NetworkAttachmentDefinition "+ref.String())), err.Error()
	default:
		c.OK, c.Reason, c.Message = true, reasons.CheckPassed, fmt.Sprintf("VM network %s exists", ref)
	}
	return c
}

func (m *preflight) checkStorage(ctx context.Context, image *ImageInfo, extra string) Check {
	c := Check{Type: CheckStorage}
	var needed []string
	if image != nil {
		needed = append(needed, image.StorageClass())
	}
	if extra != "" {
		needed = append(needed, extra)
	}
	var missing []string
	for _, name := range needed {
		err := m.c.Get(ctx, client.ObjectKey{Name: name}, &storagev1.StorageClass{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, name)
		case err != nil:
			c.Reason, c.Message = reasonOf(classify(err, "get StorageClass "+name)), err.Error()
			return c
		}
	}
	if len(missing) > 0 {
		c.Reason, c.Message = reasons.StorageClassNotFound, fmt.Sprintf(
			"StorageClass %s does not exist on Harvester: Harvester creates an image's storage class when the image is imported; re-import the image or correct harvester.storageClassName", strings.Join(missing, ", "))
		return c
	}
	c.OK, c.Reason = true, reasons.CheckPassed
	c.Message = "storage classes exist: " + strings.Join(needed, ", ")
	if len(needed) == 0 {
		c.Message = "no storage class to check"
	}
	return c
}

func (m *preflight) checkPermissions(ctx context.Context, spec PreflightSpec, image *ImageInfo) Check {
	c := Check{Type: CheckPermissions}
	imageNs := ""
	if spec.Image != nil {
		imageNs = spec.Image.Namespace
	}
	// One review per permission, asked concurrently: a review is cheap, a slow round trip is not.
	perms := RequiredPermissions(spec.Namespace, imageNs, spec.Network.Namespace)
	if image != nil && image.Backend == BackendCDI {
		perms = append(perms, CDIPermissions(spec.Namespace)...)
	}
	allowed := make([]bool, len(perms))
	errs := make([]error, len(perms))
	var wg sync.WaitGroup
	for i, p := range perms {
		wg.Go(func() {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: p.Verb, Group: p.Group, Resource: p.Resource, Namespace: p.Namespace, Name: p.Name},
			}}
			errs[i] = m.c.Create(ctx, review)
			allowed[i] = review.Status.Allowed
		})
	}
	wg.Wait()
	var missing []string
	for i, p := range perms {
		if errs[i] != nil {
			c.Reason, c.Message = reasonOf(classify(errs[i], "create a SelfSubjectAccessReview")), errs[i].Error()
			return c
		}
		if !allowed[i] {
			missing = append(missing, p.String())
		}
	}
	if len(missing) > 0 {
		c.Reason, c.Message = reasons.PermissionsMissing,
			"the credentials may not: "+strings.Join(missing, "; ")+". Grant them in the Role bound to these credentials on Harvester"
		return c
	}
	c.OK, c.Reason, c.Message = true, reasons.CheckPassed, "the credentials may do everything the provider does on Harvester"
	return c
}

// reasonOf returns the reason of a classified error, or HarvesterUnreachable.
func reasonOf(err error) string {
	if reason := errkind.ReasonOf(err); reason != "" {
		return reason
	}
	return reasons.HarvesterUnreachable
}

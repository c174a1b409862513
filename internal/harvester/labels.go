package harvester

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and annotations this provider sets on the objects it creates on Harvester. The owner's
// keys say "machinerequest" because the first owners were MachineRequests, and objects on Harvester
// carry them since: they name the owner of any kind (LabelOwnerKind says which).
const (
	// LabelMachineRequestUID is the ownership label: an object is ours only if it carries the
	// UID of the owner it was created for.
	LabelMachineRequestUID = "butler.butlerlabs.dev/machinerequest-uid"
	// LabelMachineRequestNamespace names the owner's namespace.
	LabelMachineRequestNamespace = "butler.butlerlabs.dev/machinerequest-namespace"
	// LabelMachineRequestName names the owner (hashed when longer than a label value may be).
	LabelMachineRequestName = "butler.butlerlabs.dev/machinerequest-name"
	// LabelOwnerKind is the owner's kind; objects made before it existed have none and belong to
	// a MachineRequest.
	LabelOwnerKind = "butler.butlerlabs.dev/owner-kind"
	// LabelRole is the machine's role, used by the anti-affinity between machines of one role.
	LabelRole = "butler.butlerlabs.dev/role"
	// LabelManagedBy is the label the published provider set; kept for compatibility and
	// used (together with status.providerID) to recognise VMs created by it.
	LabelManagedBy = "butler.butlerlabs.dev/managed-by"
	// ManagedByValue is the value of LabelManagedBy and of LabelHarvesterCreator.
	ManagedByValue = "butler-provider-harvester"
	// AnnotationMachineRequest holds "<namespace>/<name>" of the owner, unabridged.
	AnnotationMachineRequest = "butler.butlerlabs.dev/machinerequest"
	// LabelManagementCluster identifies the management cluster whose MachineRequest the object
	// is for (the UID of its kube-system namespace): a left-over VM is taken over automatically
	// only by the management cluster that made it.
	LabelManagementCluster = "butler.butlerlabs.dev/management-cluster"

	// LabelHarvesterCreator is how Harvester's UI tells which tool created a VM.
	LabelHarvesterCreator = "harvesterhci.io/creator"
	// LabelHarvesterVMName is set on the VMI template, as Harvester's own VMs have it.
	LabelHarvesterVMName = "harvesterhci.io/vmName"
	// AnnotationImageID binds a PVC to a VirtualMachineImage ("<namespace>/<name>").
	AnnotationImageID = "harvesterhci.io/imageId"
	// AnnotationRemovedPVCs lists the PVCs Harvester removes together with a VM.
	AnnotationRemovedPVCs = "harvesterhci.io/removedPersistentVolumeClaims"
)

// OwnerKindMachineRequest is the kind of an owner that names none (objects made before owners had
// kinds are a MachineRequest's).
const OwnerKindMachineRequest = "MachineRequest"

// Owner identifies the object of a front door (a MachineRequest, a HarvesterMachine) that objects
// on Harvester belong to.
type Owner struct {
	// Kind is the owner's kind (empty: OwnerKindMachineRequest).
	Kind      string
	Namespace string
	Name      string
	UID       types.UID
	// LegacyProviderID is the MachineRequest's status.providerID when it was written by the published
	// provider (the VM's bare UID); a VM with that UID and LabelManagedBy is adopted.
	LegacyProviderID string
	// AdoptByName, set when the MachineRequest was served by the published provider but has no
	// providerID (it can reach Running without one), adopts the VM of the machine's name that
	// carries only the published provider's LabelManagedBy.
	AdoptByName bool
	// Cluster identifies the management cluster (LabelManagementCluster); "" when it could not be
	// read, and then nothing is labelled with it.
	Cluster string
	// HandOver, set when the user said so on the MachineRequest, lets it take over the objects of
	// a MachineRequest of the same namespace and name made by another management cluster.
	HandOver bool
	// HandOverFrom, if set, limits HandOver to objects made by these management clusters (the
	// platform operator's list; see the HarvesterMachine front door).
	HandOverFrom []string
	// Succession, if set, says the owner object may be a re-creation of an earlier one (clusterctl
	// move, a restore): see succession.go.
	Succession *Succession
}

// kind is the owner's kind, OwnerKindMachineRequest if it names none.
func (o Owner) kind() string {
	if o.Kind == "" {
		return OwnerKindMachineRequest
	}
	return o.Kind
}

// Key names the owner in notifications.
func (o Owner) Key() OwnerKey {
	return OwnerKey{Kind: o.kind(), NamespacedName: types.NamespacedName{Namespace: o.Namespace, Name: o.Name}}
}

// String names the owner in messages: "MachineRequest ns/name".
func (o Owner) String() string { return o.kind() + " " + o.Namespace + "/" + o.Name }

// OwnerKey names an owner of any kind.
type OwnerKey struct {
	Kind string
	types.NamespacedName
}

// ownerKeyOf names the owner an object on Harvester was created for; ok is false for an object
// that names none.
func ownerKeyOf(obj metav1.Object) (OwnerKey, bool) {
	ns, name, ok := strings.Cut(obj.GetAnnotations()[AnnotationMachineRequest], "/")
	if !ok {
		return OwnerKey{}, false
	}
	kind := obj.GetLabels()[LabelOwnerKind]
	if kind == "" {
		kind = OwnerKindMachineRequest
	}
	return OwnerKey{Kind: kind, NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}, true
}

// ownerLabels are the labels every object we create carries.
func ownerLabels(o Owner, role string) map[string]string {
	l := map[string]string{
		LabelMachineRequestUID:       string(o.UID),
		LabelMachineRequestNamespace: o.Namespace,
		LabelMachineRequestName:      labelSafe(o.Name),
		LabelManagedBy:               ManagedByValue,
		LabelOwnerKind:               o.kind(),
	}
	if role != "" {
		l[LabelRole] = role
	}
	if o.Cluster != "" {
		l[LabelManagementCluster] = o.Cluster
	}
	return l
}

func ownerAnnotations(o Owner) map[string]string {
	a := map[string]string{AnnotationMachineRequest: o.Namespace + "/" + o.Name}
	if o.Succession != nil && !o.Succession.Created.IsZero() {
		a[AnnotationOwnerCreated] = o.Succession.Created.UTC().Format(time.RFC3339)
	}
	return a
}

// isOwnedBy reports whether an object's labels name this MachineRequest.
func isOwnedBy(labels map[string]string, o Owner) bool {
	return o.UID != "" && labels[LabelMachineRequestUID] == string(o.UID)
}

// labelSafe returns s if it is a valid label value, otherwise a stable shortened form of it.
func labelSafe(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	h := hex.EncodeToString(sum[:])[:10]
	prefix := s
	if len(prefix) > validation.LabelValueMaxLength-len(h)-1 {
		prefix = prefix[:validation.LabelValueMaxLength-len(h)-1]
	}
	return prefix + "-" + h
}

func mergeMaps(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// AnnotationOwnerCreated is the creation time (RFC 3339) of the owner object the machine's
// objects on Harvester are labelled for, when its front door records one (Succession).
const AnnotationOwnerCreated = "butler.butlerlabs.dev/owner-created"

// AnnotationFailureDomain on a VM names the failure domain it was placed in when created
// (MachineSpec.FailureDomain).
const AnnotationFailureDomain = "butler.butlerlabs.dev/failure-domain"

// Succession is what a front door whose objects may be re-created (the HarvesterMachine) tells
// the engine about the owner.
type Succession struct {
	// Created is the owner object's creationTimestamp.
	Created time.Time
	// Tenant is the tenant cluster the owner is a machine of (its Cluster's namespace and
	// name): objects of another owner are taken only while this management cluster holds its
	// ownership Lease (ownership.go).
	Tenant types.NamespacedName
}

// handsOverFrom says whether the owner may take objects that management cluster maker made for an
// owner of the same kind, namespace and name (the hand-over).
func (o Owner) handsOverFrom(maker string) bool {
	return o.HandOver && (len(o.HandOverFrom) == 0 || slices.Contains(o.HandOverFrom, maker))
}

package harvester

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Ownership: which management cluster runs a tenant cluster's machines.
//
// A tenant cluster's objects may exist on two management clusters at once: a backup restored
// (`clusterctl move --from-directory`) while the cluster it was taken from still runs, or both
// halves of an interrupted move. The objects themselves cannot say which copy is the live one:
// the restored ones are newer, and carry the same bootstrap data. So the owner says it, on
// Harvester, where no tenant can write: a Lease per tenant cluster in its Harvester namespace,
// held by the management cluster that runs it (its identity, LabelManagementCluster's value) and
// renewed while its Cluster is there and not paused.
//
//   - Nothing made for another owner is taken over (succession), no guest identity is issued,
//     re-issued, retired or deleted, unless this management cluster holds the lease.
//   - A paused owner releases it (`clusterctl move` pauses the Cluster before it copies it): the
//     target of a move takes it when its copy is resumed, and carries the machines on.
//   - A lease held by another management cluster is never taken because it looks old: clocks
//     differ between management clusters, and an owner cut off from Harvester for a while is not
//     gone. Only a hand-over by the platform operator (OwnershipClaim.HandOverFrom) takes it, and
//     only once this management cluster has seen it unrenewed for a whole lease duration on its
//     own clock (LeaseSightings), as client-go's leader election judges a leader gone: the
//     holder's renewTime, written on another clock, is never compared with this one.

// ownershipRetry is how soon a claim that could not be made is looked at again.
const ownershipRetry = 10 * time.Second

// OwnershipLeasePrefix starts the name of every ownership Lease.
const OwnershipLeasePrefix = "butler-owner-"

// annotationReleasedBy names the management cluster that released a Lease (its holder is then
// empty, as client-go's leader election releases one).
const annotationReleasedBy = "butler.butlerlabs.dev/released-by"

// annotationTenantCluster names the tenant cluster of an ownership Lease, "<namespace>/<name>"
// of its Cluster on the management cluster.
const annotationTenantCluster = "butler.butlerlabs.dev/tenant-cluster"

// OwnershipLeaseName names the ownership Lease of the tenant Cluster tenant:
// butler-owner-<namespace>-<name>-<hash of both>, shortened to fit 63 characters.
func OwnershipLeaseName(tenant types.NamespacedName) string {
	sum := sha256.Sum256([]byte(tenant.Namespace + "/" + tenant.Name))
	hash := hex.EncodeToString(sum[:])[:8]
	base := strings.ToLower(tenant.Namespace + "-" + tenant.Name)
	if room := validation.DNS1123LabelMaxLength - len(OwnershipLeasePrefix) - len(hash) - 1; len(base) > room {
		base = strings.TrimRight(base[:room], "-.")
	}
	return OwnershipLeasePrefix + strings.ReplaceAll(base, ".", "-") + "-" + hash
}

// OwnershipClaim is what a management cluster asks of a tenant cluster's ownership Lease.
type OwnershipClaim struct {
	// Namespace is the tenant cluster's Harvester namespace, where the Lease is.
	Namespace string
	// Tenant is the tenant Cluster, on the management cluster.
	Tenant types.NamespacedName
	// Holder is this management cluster's identity.
	Holder string
	// Duration is how long a holder's renewal counts (leaseDurationSeconds); it renews every
	// third of it.
	Duration time.Duration
	// Release, set while the tenant Cluster is paused, releases the Lease if this management
	// cluster holds it, and takes nothing.
	Release bool
	// HandOverFrom are the management clusters the platform operator hands their tenant
	// clusters over from (they are gone for good): a Lease one of them holds is taken once it
	// has been seen unrenewed for Duration.
	HandOverFrom []string
	// Sightings is where this management cluster remembers when it first saw each Lease as it is.
	Sightings *LeaseSightings
}

// seconds is the claim's duration as a Lease's leaseDurationSeconds (a day at most).
func (c OwnershipClaim) seconds() int32 {
	return int32(min(c.Duration, 24*time.Hour) / time.Second) //nolint:gosec // G115: bounded to a day just above
}

// Ownership is what ClaimOwnership found, or did.
type Ownership struct {
	// Held: this management cluster holds the Lease now.
	Held bool
	// Holder is the management cluster holding it when that is another ("" released or none).
	Holder string
	// Silent is how long this management cluster has seen another's Lease unrenewed.
	Silent time.Duration
	// TakenFrom names the management cluster it was just taken from (released by, or handed
	// over from), when that is another.
	TakenFrom string
	// HandedOver: it was just taken by the platform operator's hand-over.
	HandedOver bool
}

// OwnershipLeases keeps the ownership Leases of tenant clusters on one Harvester cluster.
type OwnershipLeases interface {
	// ClaimOwnership creates, renews, releases or takes the Lease as claim says, and reports
	// where it stands.
	ClaimOwnership(ctx context.Context, claim OwnershipClaim) (Ownership, error)
	// OwnershipHolder reads who holds the Lease: the holder, or the management cluster that
	// released it last, and found false when there is none.
	OwnershipHolder(ctx context.Context, namespace string, tenant types.NamespacedName) (holder string, found bool, err error)
	// DropOwnership deletes the Lease if holder holds it or released it last; it reports the
	// other management cluster that does, if any.
	DropOwnership(ctx context.Context, namespace string, tenant types.NamespacedName, holder string) (other string, err error)
	// ForeignMachines names the VMs in namespace that management cluster maker made for owners
	// of kind ownerKind in ownerNamespace and known does not name (by the owner's name).
	ForeignMachines(ctx context.Context, namespace, ownerKind, ownerNamespace, maker string, known func(name string) bool) ([]string, error)
}

// OwnershipPermissions is what the provider needs on Harvester for the ownership Leases of the
// tenant clusters whose machines are in namespace.
func OwnershipPermissions(namespace string) []Permission {
	var out []Permission
	for _, v := range []string{"get", "create", "update", "delete"} {
		out = append(out, Permission{Verb: v, Group: coordinationv1.GroupName, Resource: "leases", Namespace: namespace})
	}
	return out
}

// LeaseSightings remembers, per Lease, the version last seen and when (on Clock) it was first
// seen: how long a Lease has gone unrenewed is judged on this management cluster's clock alone.
// Safe for concurrent use.
type LeaseSightings struct {
	Clock clock.PassiveClock
	mu    sync.Mutex
	seen  map[types.NamespacedName]sighting
}

type sighting struct {
	version string
	at      time.Time
}

// unchangedFor records that the Lease at key is at version now, and returns for how long it has
// been seen at that version.
func (s *LeaseSightings) unchangedFor(key types.NamespacedName, version string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.seen == nil {
		s.seen = map[types.NamespacedName]sighting{}
	}
	last, ok := s.seen[key]
	if !ok || last.version != version {
		s.seen[key] = sighting{version: version, at: now}
		return 0
	}
	return now.Sub(last.at)
}

// forget drops what was seen of the Lease at key.
func (s *LeaseSightings) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, key)
}

func (s *LeaseSightings) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}

// ClaimOwnership implements OwnershipLeases.
func (c *engine) ClaimOwnership(ctx context.Context, claim OwnershipClaim) (Ownership, error) {
	if claim.Holder == "" {
		return Ownership{}, Waiting(ReasonOwnerUnknown, ownershipRetry,
			"this management cluster's identity (the UID of its kube-system namespace) could not be read, so it cannot hold the tenant cluster's ownership on Harvester: grant the manager get on namespaces, then restart it")
	}
	key := types.NamespacedName{Namespace: claim.Namespace, Name: OwnershipLeaseName(claim.Tenant)}
	what := describe("Lease", key.Namespace, key.Name)
	now := metav1.NewMicroTime(claim.Sightings.now())
	lease := &coordinationv1.Lease{}
	err := c.remote.c.Get(ctx, key, lease)
	switch {
	case apierrors.IsNotFound(err):
		if claim.Release {
			return Ownership{}, nil
		}
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
				Labels:      map[string]string{LabelManagedBy: ManagedByValue},
				Annotations: map[string]string{annotationTenantCluster: claim.Tenant.String()}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(claim.Holder), LeaseDurationSeconds: ptr.To(claim.seconds()),
				AcquireTime: &now, RenewTime: &now},
		}
		if err := c.remote.c.Create(ctx, lease); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return Ownership{}, fmt.Errorf("%s was created meanwhile, will look again", what)
			}
			return Ownership{}, createError(err, what)
		}
		return Ownership{Held: true}, nil
	case err != nil:
		return Ownership{}, classify(err, "get "+what)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	switch {
	case holder == claim.Holder && claim.Release:
		lease.Spec.HolderIdentity = nil
		setAnnotation(lease, annotationReleasedBy, claim.Holder)
		return Ownership{}, c.writeLease(ctx, lease, what)
	case holder == claim.Holder:
		if renewed := lease.Spec.RenewTime; renewed != nil && now.Sub(renewed.Time) >= 0 && now.Sub(renewed.Time) < claim.Duration/3 &&
			ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) == claim.seconds() {
			return Ownership{Held: true}, nil
		}
		lease.Spec.RenewTime, lease.Spec.LeaseDurationSeconds = &now, ptr.To(claim.seconds())
		return Ownership{Held: true}, c.writeLease(ctx, lease, what)
	case claim.Release:
		return Ownership{Holder: holder}, nil
	case holder == "":
		// Released (a move paused its owner): taken at once.
		from := lease.Annotations[annotationReleasedBy]
		if err := c.takeLease(ctx, lease, claim, now, what); err != nil {
			return Ownership{}, err
		}
		if from == claim.Holder {
			from = ""
		}
		return Ownership{Held: true, TakenFrom: from}, nil
	}
	silent := claim.Sightings.unchangedFor(key, lease.ResourceVersion)
	if !slices.Contains(claim.HandOverFrom, holder) || silent < claim.Duration {
		return Ownership{Holder: holder, Silent: silent}, nil
	}
	if err := c.takeLease(ctx, lease, claim, now, what); err != nil {
		return Ownership{}, err
	}
	return Ownership{Held: true, TakenFrom: holder, HandedOver: true}, nil
}

// takeLease makes claim's holder the Lease's, if it is still as it was read.
func (c *engine) takeLease(ctx context.Context, lease *coordinationv1.Lease, claim OwnershipClaim, now metav1.MicroTime, what string) error {
	lease.Spec.HolderIdentity = ptr.To(claim.Holder)
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
	lease.Spec.LeaseDurationSeconds = ptr.To(claim.seconds())
	lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	delete(lease.Annotations, annotationReleasedBy)
	if err := c.writeLease(ctx, lease, what); err != nil {
		return err
	}
	claim.Sightings.forget(client.ObjectKeyFromObject(lease))
	return nil
}

// writeLease updates the Lease as read (its resourceVersion: of two writers, one fails).
func (c *engine) writeLease(ctx context.Context, lease *coordinationv1.Lease, what string) error {
	if err := c.remote.c.Update(ctx, lease); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("%s changed meanwhile, will look again", what)
		}
		return classify(err, "update "+what)
	}
	return nil
}

// OwnershipHolder implements OwnershipLeases.
func (c *engine) OwnershipHolder(ctx context.Context, namespace string, tenant types.NamespacedName) (string, bool, error) {
	return c.remote.ownershipHolder(ctx, namespace, tenant)
}

func (m *remote) ownershipHolder(ctx context.Context, namespace string, tenant types.NamespacedName) (string, bool, error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: namespace, Name: OwnershipLeaseName(tenant)}
	if err := m.c.Get(ctx, key, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return "", false, nil
		}
		return "", false, classify(err, "get "+describe("Lease", key.Namespace, key.Name))
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "" {
		return holder, true, nil
	}
	return lease.Annotations[annotationReleasedBy], true, nil
}

// DropOwnership implements OwnershipLeases.
func (c *engine) DropOwnership(ctx context.Context, namespace string, tenant types.NamespacedName, holder string) (string, error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: namespace, Name: OwnershipLeaseName(tenant)}
	what := describe("Lease", key.Namespace, key.Name)
	if err := c.remote.c.Get(ctx, key, lease); err != nil {
		return "", client.IgnoreNotFound(classify(err, "get "+what))
	}
	owner := ptr.Deref(lease.Spec.HolderIdentity, "")
	if owner == "" {
		owner = lease.Annotations[annotationReleasedBy]
	}
	if owner != holder {
		return owner, nil
	}
	uid, version := lease.UID, lease.ResourceVersion
	if err := c.remote.c.Delete(ctx, lease, client.Preconditions{UID: &uid, ResourceVersion: &version}); client.IgnoreNotFound(err) != nil {
		if apierrors.IsConflict(err) {
			return "", fmt.Errorf("%s changed meanwhile, will look again", what)
		}
		return "", classify(err, "delete "+what)
	}
	return "", nil
}

// ForeignMachines implements OwnershipLeases.
func (c *engine) ForeignMachines(ctx context.Context, namespace, ownerKind, ownerNamespace, maker string, known func(string) bool) ([]string, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(kubevirtv1.SchemeGroupVersion.WithKind("VirtualMachineList"))
	if err := c.remote.c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{
		LabelManagedBy: ManagedByValue, LabelOwnerKind: ownerKind, LabelMachineRequestNamespace: ownerNamespace, LabelManagementCluster: maker,
	}); err != nil {
		return nil, classify(err, "list VirtualMachines in namespace "+namespace)
	}
	var out []string
	for i := range list.Items {
		vm := &list.Items[i]
		key, ok := ownerKeyOf(vm)
		if vm.DeletionTimestamp != nil || ok && known(key.Name) {
			continue
		}
		out = append(out, vm.Name)
	}
	slices.Sort(out)
	return out, nil
}

func setAnnotation(obj metav1.Object, key, value string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	obj.SetAnnotations(a)
}

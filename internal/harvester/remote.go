package harvester

import (
	"context"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
)

// remote is what every part of the engine reaches one Harvester cluster through: its client, the
// cache of the objects the provider owns in its namespace, and its identity.
type remote struct {
	cluster *clustercache.Cluster
	// c writes, and reads what is not cached.
	c client.Client
}

// Identity names the cluster (read once per client).
func (m *remote) Identity(ctx context.Context) (ClusterIdentity, error) {
	id, err := m.cluster.Identity(ctx)
	return id, classify(err, clustercache.IdentityAction)
}

// cacheFor returns the cache of owned objects that serves the namespace, nil if none does.
func (m *remote) cacheFor(namespace string) client.Reader {
	return m.cluster.CacheFor(ownedCache, namespace)
}

// warnings reads the Warning events of namespace: from their cache once it has synced, else live.
func (m *remote) warnings(ctx context.Context, namespace string, about types.UID) ([]corev1.Event, error) {
	var reader client.Reader = m.c
	if cached := m.cluster.CacheFor(warningsCache, namespace); cached != nil {
		reader = cached
	}
	list := &corev1.EventList{}
	if err := reader.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{eventsByObjectUID: string(about)}); err != nil {
		return nil, err
	}
	warnings := list.Items[:0]
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning {
			warnings = append(warnings, e)
		}
	}
	return warnings, nil
}

// read gets an object the provider may own from the cache, and confirms with a live read that
// an object the cache does not have really is absent: a cache that has not yet seen a creation
// must never make us report a VM deleted, or declare a deletion complete.
func (m *remote) read(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	cached := m.cacheFor(key.Namespace)
	if cached == nil {
		return m.c.Get(ctx, key, obj)
	}
	err := cached.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = m.c.Get(ctx, key, obj)
	}
	return err
}

// live reads from the API.
func (m *remote) live(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	return m.c.Get(ctx, key, obj)
}

// peek reads from the cache alone, where a cache that lags costs nothing: an object about to be
// created (if it exists after all, the create says so), a VMI not seen yet (the machine is not
// Running yet), a deletion looked at again later.
func (m *remote) peek(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	if cached := m.cacheFor(key.Namespace); cached != nil {
		return cached.Get(ctx, key, obj)
	}
	return m.c.Get(ctx, key, obj)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ownedClaims lists the PVCs labelled for this machine, from the cache or live (deletion is
// complete only when none is left live).
func (m *machines) ownedClaims(ctx context.Context, ref MachineRef, live bool) ([]corev1.PersistentVolumeClaim, error) {
	list := &corev1.PersistentVolumeClaimList{}
	var reader client.Reader = m.c
	if cached := m.cacheFor(ref.Namespace); cached != nil && !live {
		reader = cached
	}
	if err := reader.List(ctx, list, client.InNamespace(ref.Namespace),
		client.MatchingLabels{LabelMachineRequestUID: string(ref.Owner.UID)}); err != nil {
		return nil, classify(err, "list PersistentVolumeClaims in namespace "+ref.Namespace)
	}
	return list.Items, nil
}

// machines implements Machines: the VMs, disks and cloud-init Secrets of one cluster.
type machines struct {
	*remote
	// staleUnschedulable records when each VMI was first seen still showing the scheduler's
	// "unbound PVCs" reason with all its disks bound (see schedulingGrace).
	staleUnschedulable objectMemory
	// claimEventsRead records when the events of each Pending disk were last read (see
	// claimEventsWorthReading).
	claimEventsRead objectMemory
	// volumeUsersCalls shares one live list of a namespace's VMs among the deletions that need
	// it at the same time (see volumeUsers).
	volumeUsersCalls singleflight.Group
	// devices is what the cluster offers of passthrough devices, read for the machines that ask
	// for some (see checkDevices).
	devices deviceInventories
}

// images implements Images: the VirtualMachineImages of one cluster.
type images struct{ *remote }

// preflight runs the ProviderConfig's checks on one cluster.
type preflight struct{ *remote }

// ownedRootDataVolume returns the machine's root disk DataVolume if it has one of ours (a machine
// of an image of the CDI backend), read live. A Harvester without DataVolumes, or credentials that
// may not read them, cannot have given the machine one.
func (m *machines) ownedRootDataVolume(ctx context.Context, ref MachineRef) (*cdiv1.DataVolume, error) {
	dv := &cdiv1.DataVolume{}
	err := m.c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: diskClaimName(ref.Name, 0)}, dv)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || apierrors.IsForbidden(err):
		return nil, nil
	case err != nil:
		return nil, classify(err, "get "+describe("DataVolume", ref.Namespace, diskClaimName(ref.Name, 0)))
	case !isOwnedBy(dv.Labels, ref.Owner):
		return nil, nil
	}
	return dv, nil
}

// The caches of each Harvester cluster, in the machines' namespace (see NewWatches).
const (
	// ownedCache holds the objects the provider owns and every image.
	ownedCache = "owned"
	// warningsCache holds the Warning events, which the diagnosis quotes. It is a cache of its
	// own: credentials without watch on events (which earlier versions did not need) leave the
	// owned objects cached, and the diagnosis lists events live instead.
	warningsCache = "warnings"
	// volumesCache holds the namespace's VMs that are not ours (someone else's, or a person's),
	// trimmed to what says which disks they mount: deleting or replacing a disk first asks which
	// VMs use it, and ours answer from the owned cache (see claimUsers).
	volumesCache = "volumes"
)

// eventsByObjectUID indexes events by the UID of the object they are about, under the name of
// the field selector the API server knows, so that a read matches the same way cached or live.
const eventsByObjectUID = "involvedObject.uid"

// vmsByClaim indexes the VMs of the owned and volumes caches by the PVCs they mount (no API server
// field selector has this name: without the caches, the VMs are listed live, see claimUsers).
const vmsByClaim = "spec.template.spec.volumes.persistentVolumeClaim.claimName"

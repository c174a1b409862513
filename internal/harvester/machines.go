package harvester

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
)

// Machines creates, observes and deletes machines on one Harvester cluster.
type Machines interface {
	// Identity names the cluster; machines record it where they are created.
	Identity(ctx context.Context) (ClusterIdentity, error)
	// Ensure creates whatever of the machine does not exist yet (cloud-init Secret, disks, VM) and
	// returns what it observes. It is idempotent and resumes an interrupted create. It never
	// changes an object that is not ours. When spec.VMUID is set, that VM must still exist: it is
	// never replaced by a new one (a PermanentError with ReasonVMDeleted says so).
	Ensure(ctx context.Context, spec *MachineSpec) (Observation, error)
	// Observe reads the machine's VM and VMI without changing anything.
	Observe(ctx context.Context, ref MachineRef) (Observation, error)
	// Delete removes our VM, disks and cloud-init Secret, and says where that stands: done once
	// all are gone (deleting what is gone is success).
	Delete(ctx context.Context, ref MachineRef) (Deletion, error)
}

// Deletion is where the deletion of a machine stands.
type Deletion struct {
	// Done is true once nothing of ours is left.
	Done bool
	// Remaining names what is left: the VM, or once it is gone its disks and cloud-init Secret.
	Remaining string
	// ShutdownGrace is how long what is left may take to go by itself: while the VM is left, its
	// terminationGracePeriodSeconds as the API server answered (Harvester defaults it to 120 s,
	// KubeVirt to 30 s), the time KubeVirt gives its guest to shut down before it stops it. A
	// deletion waiting that long is not held up. 0 once the VM is gone.
	ShutdownGrace time.Duration
	// Watched is true when the machine's objects are watched (see Observation.Watched).
	Watched bool
}

// Observation is the state of a machine on Harvester.
type Observation struct {
	// Namespace and Name are the VM's (empty when there is no VM).
	Namespace, Name string
	// VMExists is true when a VM of ours with the machine's name exists.
	VMExists bool
	// VMCreated is true when this call created the VM.
	VMCreated bool
	// VMUID is the VM's UID (empty when there is no VM).
	VMUID types.UID
	// TookOverFrom is set when this call took the VM over from an earlier MachineRequest of the
	// same namespace and name: that MachineRequest's UID.
	TookOverFrom types.UID
	// ProviderID is "harvester://<VM uid>".
	ProviderID string
	// PrintableStatus is KubeVirt's one-word VM status (Starting, Running, Stopped, ...).
	PrintableStatus string
	// VMIPhase is the VirtualMachineInstance's phase; empty when there is no VMI.
	VMIPhase string
	// Running is true when the VMI is in phase Running.
	Running bool
	// RunningSince is when the VMI entered phase Running, if KubeVirt reported it.
	RunningSince time.Time
	Addresses    Addresses
	// VMCreatedAt is when the VM was created: how long its start has taken.
	VMCreatedAt time.Time
	// Diagnosis explains, when the VM is not running, what Harvester reports is wrong; nil while
	// it is simply starting (see diagnose).
	Diagnosis *Diagnosis
	// Starting describes, when the VM is not running, where its start stands (KubeVirt's status,
	// the VMI's phase and the condition holding it up, disks not bound yet), for a caller to
	// report once the start takes longer than it should.
	Starting string
	// DiagnoseAgainAt, if set, is when a diagnosis may have appeared with no change on Harvester
	// to announce it (see schedulingGrace): the caller looks again then.
	DiagnoseAgainAt time.Time
	// Watched is true when the machine's objects are watched: every change of its VM, VMI,
	// disks and cloud-init Secret that matters reaches the Notifier, so a caller waiting on them
	// need only poll in case an event was missed. False when the cluster's credentials do not
	// allow watching them (they are read live, and only polling finds a change).
	Watched bool
}

// deletionRetry is how soon to look again at objects that are being deleted.
const deletionRetry = 5 * time.Second

// ProviderIDPrefix starts every providerID this provider writes.
const ProviderIDPrefix = "harvester://"

// Cluster is one Harvester cluster: its machines, its images, and the preflight checks of a
// ProviderConfig.
type Cluster interface {
	Machines
	Images
	// Preflight checks what a ProviderConfig needs on Harvester and returns the API server's
	// version ("" if it did not answer) and one Check per ProviderConfig condition.
	Preflight(ctx context.Context, spec PreflightSpec) (version string, checks []Check)
}

// remote is what every part of the engine reaches one Harvester cluster through: its client, the
// cache of the objects the provider owns in its namespace, and its identity.
type remote struct {
	cluster *clustercache.Cluster
	// c writes, and reads what is not cached.
	c client.Client
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
}

// images implements Images: the VirtualMachineImages of one cluster.
type images struct{ *remote }

// preflight runs the ProviderConfig's checks on one cluster.
type preflight struct{ *remote }

// cluster implements Cluster by its three parts.
type cluster struct {
	*machines
	*images
	*preflight
	remote *remote
}

// NewCluster returns the engine of one Harvester cluster, working through the client (and cache)
// of rc, whose scheme must know the kinds of RemoteScheme.
func NewCluster(rc *clustercache.Cluster) Cluster {
	r := &remote{cluster: rc, c: rc.Client()}
	return &cluster{machines: &machines{remote: r}, images: &images{r}, preflight: &preflight{r}, remote: r}
}

// Identity names the cluster; machines record it where they are created.
func (c *cluster) Identity(ctx context.Context) (ClusterIdentity, error) {
	return c.remote.Identity(ctx)
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

func (m *machines) Ensure(ctx context.Context, spec *MachineSpec) (Observation, error) {
	// The absence of a recorded VM is confirmed: it means the VM was deleted. A VM not created
	// yet is looked for in the cache alone: if it exists after all, creating it says so.
	vm, takenOver, err := m.findVM(ctx, spec, spec.VMUID != "")
	if err != nil {
		return Observation{}, err
	}
	if !isRecordedVM(vm, spec.Ref()) {
		// The VM this machine was created with is gone: creating another would give the caller
		// a new machine (a new disk, a new node) without telling it.
		return Observation{}, vmGone(spec.Ref())
	}
	created := false
	if vm == nil {
		// The front door's gate and the image decide whether the machine can be created at
		// all: both are read-only, and checked before the place is recorded and anything is
		// created, so a request that cannot work leaves nothing behind. Then the disks, the
		// cloud-init Secret owned by the root disk (so that it goes with the disk, without a
		// second write to name an owner), and the VM last: it starts only once everything it
		// mounts is there.
		if spec.Gate != nil {
			if err := spec.Gate(); err != nil {
				return Observation{}, err
			}
		}
		image, err := m.usableImage(ctx, spec)
		if err != nil {
			return Observation{}, err
		}
		if err := m.record(ctx, spec); err != nil {
			return Observation{}, err
		}
		root, err := m.ensureDisks(ctx, spec, image)
		if err != nil {
			return Observation{}, err
		}
		if err := m.ensureCloudInitSecret(ctx, spec, root); err != nil {
			return Observation{}, err
		}
		if vm, takenOver, created, err = m.createVM(ctx, spec); err != nil {
			return Observation{}, err
		}
	} else {
		if err := m.record(ctx, spec); err != nil {
			return Observation{}, err
		}
		if err := m.ensureCloudInitSecret(ctx, spec, nil); err != nil {
			return Observation{}, err
		}
	}
	obs, err := m.observeVM(ctx, vm)
	obs.VMCreated, obs.TookOverFrom = created, takenOver
	return obs, err
}

// record has the front door store where the machine lives, if it asked to (see MachineSpec.Record).
func (m *machines) record(ctx context.Context, spec *MachineSpec) error {
	if spec.Record == nil {
		return nil
	}
	id, err := m.Identity(ctx)
	if err != nil {
		return err
	}
	return spec.Record(ctx, id)
}

// findVM returns the machine's VM (nil if there is none), taking over a VM of an earlier
// MachineRequest of the same name when no VM is recorded (see takeOverSuperseded).
func (m *machines) findVM(ctx context.Context, spec *MachineSpec, confirmAbsence bool) (*kubevirtv1.VirtualMachine, types.UID, error) {
	vm, err := m.getOwnedVM(ctx, spec.Ref(), confirmAbsence)
	if p, ok := AsPermanent(err); ok && p.Reason == ReasonNameTaken && spec.VMUID == "" {
		return m.takeOverSuperseded(ctx, spec)
	}
	return vm, "", err
}

func (m *machines) Observe(ctx context.Context, ref MachineRef) (Observation, error) {
	vm, err := m.getOwnedVM(ctx, ref, true)
	if _, conflict := AsPermanent(err); conflict {
		return Observation{}, nil // a foreign VM took the name: ours is gone
	}
	if err != nil || vm == nil || !isRecordedVM(vm, ref) {
		return Observation{}, err
	}
	return m.observeVM(ctx, vm)
}

// isRecordedVM reports whether vm (ours, or nil) is the VM the machine was created with: any VM
// of ours while none is recorded yet, else only the recorded UID.
func isRecordedVM(vm *kubevirtv1.VirtualMachine, ref MachineRef) bool {
	if ref.VMUID == "" {
		return true
	}
	return vm != nil && vm.UID == ref.VMUID
}

func vmGone(ref MachineRef) error {
	return Permanent(ReasonVMDeleted, "%s (UID %s) was deleted outside the provider", describe("VirtualMachine", ref.Namespace, ref.Name), ref.VMUID)
}

// getOwnedVM returns our VM, nil if none exists (confirmed live if confirmAbsence), or a
// NameConflict error if a VM that is not ours has the name. A VM of the published provider is
// adopted (see adoptable).
func (m *machines) getOwnedVM(ctx context.Context, ref MachineRef, confirmAbsence bool) (*kubevirtv1.VirtualMachine, error) {
	vm := &kubevirtv1.VirtualMachine{}
	key := client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}
	get := m.peek
	if confirmAbsence {
		get = m.read
	}
	if err := get(ctx, key, vm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, classify(err, "get "+describe("VirtualMachine", ref.Namespace, ref.Name))
	}
	switch {
	case isOwnedBy(vm.Labels, ref.Owner):
		return vm, nil
	case adoptable(vm, ref.Owner):
		return m.adopt(ctx, vm, ref.Owner)
	default:
		return nil, nameConflict("VirtualMachine", vm, ref.Owner)
	}
}

// adoptable recognises a VM created by the published provider for this MachineRequest: it carries
// the published managed-by label and none of ours, and its UID is the MachineRequest's bare
// providerID, or (without a providerID) the front door asked to adopt by name.
func adoptable(vm *kubevirtv1.VirtualMachine, o Owner) bool {
	if vm.Labels[LabelMachineRequestUID] != "" || vm.Labels[LabelManagedBy] != ManagedByValue {
		return false
	}
	if o.LegacyProviderID != "" {
		return strings.TrimPrefix(o.LegacyProviderID, ProviderIDPrefix) == string(vm.UID)
	}
	return o.AdoptByName
}

func (m *machines) adopt(ctx context.Context, vm *kubevirtv1.VirtualMachine, o Owner) (*kubevirtv1.VirtualMachine, error) {
	// Labels and annotations merge key by key: no resourceVersion, so that KubeVirt's and
	// Harvester's constant writes to the VM cannot make this patch fail.
	patch := client.MergeFrom(vm.DeepCopy())
	vm.Labels = mergeMaps(vm.Labels, ownerLabels(o, vm.Labels[LabelRole]))
	vm.Annotations = mergeMaps(vm.Annotations, ownerAnnotations(o))
	if err := m.c.Patch(ctx, vm, patch); err != nil {
		return nil, classify(err, "label "+describe("VirtualMachine", vm.Namespace, vm.Name)+" as ours")
	}
	return vm, nil
}

// takeOverSuperseded takes over the VM under the machine's name if this provider created it for an
// earlier MachineRequest of the same namespace and name, with its disks and cloud-init Secret.
// That MachineRequest no longer exists: a namespace holds one object of a name, and this one has
// another UID. This is how a Butler bootstrap run again after a failed one (its management cluster
// deleted, the MachineRequests with it) finds the VMs of the first run, as the published provider
// did. A VM of anyone else stays a NameConflict.
func (m *machines) takeOverSuperseded(ctx context.Context, spec *MachineSpec) (*kubevirtv1.VirtualMachine, types.UID, error) {
	vm := &kubevirtv1.VirtualMachine{}
	if err := m.read(ctx, client.ObjectKey{Namespace: spec.Namespace, Name: spec.Name}, vm); err != nil {
		return nil, "", classify(err, "get "+describe("VirtualMachine", spec.Namespace, spec.Name))
	}
	old := types.UID(vm.Labels[LabelMachineRequestUID])
	if err := supersedable("VirtualMachine", vm, spec.Owner); err != nil {
		return nil, "", err
	}
	// Disks and Secret first, the VM last: ownership is read from the VM, so an interrupted
	// takeover is done again, and never leaves disks labelled for the earlier MachineRequest
	// behind a VM that is already ours (they would not be removed with it).
	claims, err := m.ownedClaims(ctx, MachineRef{Owner: Owner{UID: old}, Namespace: spec.Namespace}, true)
	if err != nil {
		return nil, "", err
	}
	for i := range claims {
		if err := m.relabel(ctx, "PersistentVolumeClaim", &claims[i], spec.Owner); err != nil {
			return nil, "", err
		}
	}
	// The root disk of a CDI image is a DataVolume (its PVC, CDI's, is relabelled above).
	dv := &cdiv1.DataVolume{}
	err = m.read(ctx, client.ObjectKey{Namespace: spec.Namespace, Name: diskClaimName(spec.Name, 0)}, dv)
	switch {
	case err == nil && isOwnedBy(dv.Labels, Owner{UID: old}):
		if err := m.relabel(ctx, "DataVolume", dv, spec.Owner); err != nil {
			return nil, "", err
		}
	case err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
		return nil, "", classify(err, "get "+describe("DataVolume", spec.Namespace, diskClaimName(spec.Name, 0)))
	}
	secret := secretMeta(spec.Namespace, cloudInitSecretName(spec.Name))
	err = m.read(ctx, client.ObjectKeyFromObject(secret), secret)
	switch {
	case err == nil && isOwnedBy(secret.Labels, Owner{UID: old}):
		if err := m.relabel(ctx, "Secret", secret, spec.Owner); err != nil {
			return nil, "", err
		}
	case err != nil && !apierrors.IsNotFound(err):
		return nil, "", classify(err, "get "+describe("Secret", spec.Namespace, cloudInitSecretName(spec.Name)))
	}
	if err := m.relabel(ctx, "VirtualMachine", vm, spec.Owner); err != nil {
		return nil, "", err
	}
	return vm, old, nil
}

// relabel gives an object of ours the ownership labels of another MachineRequest. Labels merge
// key by key: no resourceVersion, so that KubeVirt's and Harvester's own writes cannot fail it.
func (m *machines) relabel(ctx context.Context, kind string, obj client.Object, o Owner) error {
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	obj.SetLabels(mergeMaps(obj.GetLabels(), ownerLabels(o, obj.GetLabels()[LabelRole])))
	obj.SetAnnotations(mergeMaps(obj.GetAnnotations(), ownerAnnotations(o)))
	if err := m.c.Patch(ctx, obj, patch); err != nil {
		return classify(err, "label "+describe(kind, obj.GetNamespace(), obj.GetName())+" as ours")
	}
	return nil
}

// supersedable says whether obj, which carries another MachineRequest's UID, may be taken over by
// o: it was made by this provider for an earlier MachineRequest of the same namespace and name
// (which no longer exists: a namespace holds one object of a name), by the same management cluster
// (or one that recorded none), or the user handed it over. Otherwise it is a NameConflict that
// says how to hand it over where that applies: two management clusters (two bootstrap runs)
// against one Harvester namespace must never take objects from each other back and forth.
func supersedable(kind string, obj client.Object, o Owner) error {
	old := obj.GetLabels()[LabelMachineRequestUID]
	if key, ok := ownerKeyOf(obj); old == "" || types.UID(old) == o.UID || !ok || key != o.Key() {
		return nameConflict(kind, obj, o)
	}
	if maker := obj.GetLabels()[LabelManagementCluster]; maker != "" && maker != o.Cluster && !o.HandOver {
		return Permanent(ReasonNameTakenByAnotherManagementCluster,
			"%s was created for %s of another management cluster (kube-system UID %s; this one is %q): it is left untouched",
			describe(kind, obj.GetNamespace(), obj.GetName()), o, maker, o.Cluster)
	}
	return nil
}

// takeOverLeftover takes over a disk or Secret an earlier MachineRequest of the same namespace and
// name left without a VM (its run died before creating the VM), where supersedable allows it.
func (m *machines) takeOverLeftover(ctx context.Context, kind string, obj client.Object, o Owner) error {
	if err := supersedable(kind, obj, o); err != nil {
		return err
	}
	return m.relabel(ctx, kind, obj, o)
}

func nameConflict(kind string, obj client.Object, o Owner) error {
	return Permanent(ReasonNameTaken,
		"%s exists on Harvester but was not created for %s: it is left untouched",
		describe(kind, obj.GetNamespace(), obj.GetName()), o)
}

// usableImage returns the image the root disk is cloned from, if it can be.
func (m *machines) usableImage(ctx context.Context, spec *MachineSpec) (ImageInfo, error) {
	image, err := getImage(ctx, m.read, spec.Image)
	if err != nil {
		return image, err
	}
	if err := checkImageUsable(image, spec.DiskGB); err != nil {
		return image, err
	}
	if image.Backend == BackendCDI {
		return image, m.checkDataVolumesServed(image)
	}
	return image, nil
}

// createVM creates the machine's VM. If a VM of that name appeared since the cache was looked
// at, it is looked for again live (ours, an adopted or superseded one, or a NameConflict).
func (m *machines) createVM(ctx context.Context, spec *MachineSpec) (vm *kubevirtv1.VirtualMachine, takenOver types.UID, created bool, err error) {
	vm = BuildVirtualMachine(spec)
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	err = m.c.Create(ctx, vm)
	switch {
	case err == nil:
		return vm, "", true, nil
	case apierrors.IsAlreadyExists(err):
		vm, takenOver, err = m.findVM(ctx, spec, true)
		if err == nil && vm == nil {
			err = fmt.Errorf("create %s: it exists and is gone again, will look again", what)
		}
		return vm, takenOver, false, err
	}
	return nil, "", false, createError(err, what)
}

func (m *machines) observeVM(ctx context.Context, vm *kubevirtv1.VirtualMachine) (Observation, error) {
	obs := Observation{
		Namespace:       vm.Namespace,
		Name:            vm.Name,
		VMExists:        true,
		VMUID:           vm.UID,
		ProviderID:      ProviderIDPrefix + string(vm.UID),
		PrintableStatus: string(vm.Status.PrintableStatus),
		VMCreatedAt:     vm.CreationTimestamp.Time,
		Watched:         m.cacheFor(vm.Namespace) != nil,
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := m.peek(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		if !apierrors.IsNotFound(err) {
			return obs, classify(err, "get "+describe("VirtualMachineInstance", vm.Namespace, vm.Name))
		}
		vmi = nil
	} else if !metav1.IsControlledBy(vmi, vm) {
		// A VMI of the name that this VM does not control: one of a deleted VM that KubeVirt
		// has not removed yet. Its phase and addresses are not this machine's.
		vmi = nil
	}
	if vmi != nil {
		obs.VMIPhase = string(vmi.Status.Phase)
		obs.Running = vmi.Status.Phase == kubevirtv1.Running
		if obs.Running {
			m.staleUnschedulable.forget(client.ObjectKeyFromObject(vmi))
		}
		obs.RunningSince = runningSince(vmi)
		obs.Addresses = SelectAddresses(vmi.Status.Interfaces, NICOf(vm))
	}
	if !obs.Running {
		pending := m.pendingDisks(ctx, vm)
		obs.Diagnosis = m.diagnose(ctx, vm, vmi, pending)
		obs.Starting = starting(vm, vmi, diskNames(pending))
		if obs.Diagnosis != nil {
			return obs, nil
		}
		obs.DiagnoseAgainAt = claimsWorthDiagnosingAt(pending)
		if vmi == nil {
			return obs, nil
		}
		if first, waiting := m.staleUnschedulable.load(vmi); waiting {
			obs.DiagnoseAgainAt = earliest(obs.DiagnoseAgainAt, first.Add(schedulingGrace))
		}
	}
	return obs, nil
}

// Delete removes the machine in Harvester's own way: the VM's annotation names the disks Harvester
// removes with it (only ours), the VM is deleted, Harvester removes those disks, and the garbage
// collector the cloud-init Secret the root disk owns. Only once the VM is gone does it delete what
// is left of ours itself. Any VM of ours under the machine's name is deleted, whatever its UID.
//
// What is left is looked for in the cache until nothing is, and only then confirmed live: a
// lagging cache never releases the finalizer early, and a deletion costs a handful of reads
// however many events it sees. done is true when nothing of ours is left.
func (m *machines) Delete(ctx context.Context, ref MachineRef) (Deletion, error) {
	ref.VMUID = ""
	watched := m.cacheFor(ref.Namespace) != nil
	if watched {
		d, err := m.deleteStep(ctx, ref, false)
		if err != nil || !d.Done {
			d.Watched = true
			return d, err
		}
	}
	d, err := m.deleteStep(ctx, ref, true)
	d.Watched = watched
	return d, err
}

// deleteStep deletes the VM, or once it is gone what is left of ours, looking through the cache
// or, if live, at the API.
func (m *machines) deleteStep(ctx context.Context, ref MachineRef, live bool) (Deletion, error) {
	vm, err := m.getOwnedVM(ctx, ref, live)
	if _, conflict := AsPermanent(err); conflict {
		vm, err = nil, nil // not ours: never touched
	}
	if err != nil {
		return Deletion{}, err
	}
	if vm != nil {
		if err := m.deleteVM(ctx, vm, ref.Owner); err != nil {
			return Deletion{}, err
		}
		return Deletion{Remaining: describe("VirtualMachine", vm.Namespace, vm.Name), ShutdownGrace: shutdownGrace(vm)}, nil
	}
	secret, secretOwner, err := m.deleteCloudInitSecret(ctx, ref, live)
	if err != nil {
		return Deletion{}, err
	}
	// No informer watches DataVolumes: a CDI root disk is looked for live, in the live step,
	// or when the Secret waits for it.
	withDataVolume := live || secretOwner == "DataVolume"
	remaining, inUse, err := m.deleteDisks(ctx, ref, live, withDataVolume)
	if err != nil {
		return Deletion{}, err
	}
	remaining = append(remaining, secret...)
	if len(inUse) > 0 {
		return Deletion{}, Waiting(ReasonDiskInUse, deletionRetry,
			"the VM is deleted, but %s: Harvester does not delete a volume a VM uses, and neither does the provider. Detach it there (or delete that VM); deletion then completes by itself",
			strings.Join(inUse, "; "))
	}
	return Deletion{Done: len(remaining) == 0, Remaining: strings.Join(remaining, ", ")}, nil
}

// shutdownGrace is how long KubeVirt lets the guest of vm take to shut down: the grace period of
// its template, or KubeVirt's default when the API server left it unset.
func shutdownGrace(vm *kubevirtv1.VirtualMachine) time.Duration {
	seconds := kubevirtv1.DefaultGracePeriodSeconds
	if t := vm.Spec.Template; t != nil && t.Spec.TerminationGracePeriodSeconds != nil {
		seconds = *t.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(seconds) * time.Second
}

// deleteCloudInitSecret waits for the garbage collector to delete the machine's cloud-init Secret,
// which its root disk owns (Harvester removes the disk with the VM), and deletes a Secret of ours
// that has no owner (one made by an earlier version, or when the root disk was missing). It names
// the Secret while it exists, and the kind of its owner.
func (m *machines) deleteCloudInitSecret(ctx context.Context, ref MachineRef, live bool) (remaining []string, ownerKind string, err error) {
	secret := secretMeta(ref.Namespace, cloudInitSecretName(ref.Name))
	what := describe("Secret", secret.Namespace, secret.Name)
	get := m.peek
	if live {
		get = m.live
	}
	err = get(ctx, client.ObjectKeyFromObject(secret), secret)
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", nil
	case err != nil:
		return nil, "", classify(err, "get "+what)
	case !isOwnedBy(secret.Labels, ref.Owner):
		return nil, "", nil
	case secret.DeletionTimestamp == nil && len(secret.OwnerReferences) == 0:
		uid := secret.UID
		if err := m.c.Delete(ctx, secret, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return nil, "", classify(err, "delete "+what)
		}
	}
	for _, o := range secret.OwnerReferences {
		ownerKind = o.Kind
	}
	return []string{what}, ownerKind, nil
}

// deleteDisks deletes what is left of the machine's disks once its VM is gone: the PVCs labelled
// for it and (withDataVolume, read live) the DataVolume of a CDI root disk. A disk another VM uses is left alone (Harvester
// would refuse, and it is that VM's now): inUse says which and where.
func (m *machines) deleteDisks(ctx context.Context, ref MachineRef, live, withDataVolume bool) (remaining, inUse []string, err error) {
	claims, err := m.ownedClaims(ctx, ref, live)
	if err != nil {
		return nil, nil, err
	}
	var dv *cdiv1.DataVolume
	if withDataVolume {
		if dv, err = m.ownedRootDataVolume(ctx, ref); err != nil {
			return nil, nil, err
		}
	}
	// The DataVolume before its PVC, so that CDI does not fill the PVC again.
	var disks []client.Object
	if dv != nil {
		disks = append(disks, dv)
	}
	for i := range claims {
		disks = append(disks, &claims[i])
	}
	var users map[string][]string
	for _, disk := range disks {
		what := describe(kindOf(disk), disk.GetNamespace(), disk.GetName())
		remaining = append(remaining, what)
		if disk.GetDeletionTimestamp() != nil {
			continue
		}
		if !live {
			// Harvester deletes the disks named in the VM's removed-claims annotation with the
			// VM, and the cache may not have seen that yet: a read is cheaper than a delete
			// that finds the disk already going.
			fresh := disk.DeepCopyObject().(client.Object)
			if err := m.live(ctx, client.ObjectKeyFromObject(disk), fresh); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				return nil, nil, classify(err, "get "+what)
			}
			if fresh.GetDeletionTimestamp() != nil {
				continue
			}
		}
		if users == nil { // read once, and only when a disk is to be deleted
			if users, err = m.claimUsers(ctx, ref.Namespace, namesOf(disks)); err != nil {
				return nil, nil, err
			}
		}
		if u := users[disk.GetName()]; len(u) > 0 {
			inUse = append(inUse, fmt.Sprintf("%s is used by %s", what, strings.Join(u, ", ")))
			continue
		}
		uid := disk.GetUID()
		if err := m.c.Delete(ctx, disk, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			if refused := inUseRefusal(err); refused != "" {
				inUse = append(inUse, fmt.Sprintf("%s: %s", what, refused))
				continue
			}
			return nil, nil, classify(err, "delete "+what)
		}
	}
	return remaining, inUse, nil
}

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

// deleteVM makes sure the VM's removed-claims annotation names exactly its disks that are ours
// (set at creation, so usually nothing to do; a disk someone hot-plugged is never named), then
// deletes the VM (only this UID).
func (m *machines) deleteVM(ctx context.Context, vm *kubevirtv1.VirtualMachine, o Owner) error {
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	m.forgetDiagnosis(vm)
	if vm.DeletionTimestamp != nil {
		return nil
	}
	ours, err := m.claimsRemovedWith(ctx, vm, o)
	if err != nil {
		return err
	}
	if !sameNames(vm.Annotations[AnnotationRemovedPVCs], ours) {
		// An annotation patch merges key by key: no resourceVersion, so that KubeVirt's and
		// Harvester's own writes to the VM cannot make it fail.
		patch := client.MergeFrom(vm.DeepCopy())
		vm.Annotations = mergeMaps(vm.Annotations, map[string]string{AnnotationRemovedPVCs: strings.Join(ours, ",")})
		if err := m.c.Patch(ctx, vm, patch); err != nil {
			return ignoreNotFound(classify(err, "annotate "+what))
		}
	}
	// Only the VM as read: the copy may come from a cache that has not seen a disk hot-plugged
	// and named in the annotation since, which Harvester would then delete with the VM. A VM
	// changed since is a conflict, and looked at again.
	err = m.c.Delete(ctx, vm, client.Preconditions{UID: ptr.To(vm.UID), ResourceVersion: ptr.To(vm.ResourceVersion)},
		client.PropagationPolicy(metav1.DeletePropagationBackground))
	return ignoreNotFound(classify(err, "delete "+what))
}

func sameNames(annotation string, names []string) bool {
	have := strings.Split(annotation, ",")
	if annotation == "" {
		have = nil
	}
	slices.Sort(have)
	want := slices.Clone(names)
	slices.Sort(want)
	return slices.Equal(have, want)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

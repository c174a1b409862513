package harvester

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// Machines creates, observes and deletes machines on one Harvester cluster.
type Machines interface {
	// Ensure creates whatever of the machine does not exist yet (cloud-init Secret, disks, VM) and
	// returns what it observes. It is idempotent and resumes an interrupted create. It never
	// changes an object that is not ours.
	Ensure(ctx context.Context, spec *MachineSpec) (Observation, error)
	// Observe reads the machine's VM and VMI without changing anything.
	Observe(ctx context.Context, ref MachineRef) (Observation, error)
	// Delete removes our VM, disks and cloud-init Secret. It returns done=true once all are gone
	// (deleting what is gone is success); otherwise remaining describes what is left.
	Delete(ctx context.Context, ref MachineRef) (done bool, remaining string, err error)
}

// Observation is the state of a machine on Harvester.
type Observation struct {
	// VMExists is true when a VM of ours with the machine's name exists.
	VMExists bool
	// VMCreated is true when this call created the VM.
	VMCreated bool
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
	// Diagnosis explains, when the machine is not up, what Harvester reports as the cause.
	Diagnosis *Diagnosis
}

// deletionRetry is how soon to look again at objects that are being deleted.
const deletionRetry = 5 * time.Second

// ProviderIDPrefix starts every providerID this provider writes.
const ProviderIDPrefix = "harvester://"

// Cluster is one Harvester cluster: its machines, and the preflight checks of a ProviderConfig.
type Cluster interface {
	Machines
	// Preflight checks what a ProviderConfig needs on Harvester and returns the API server's
	// version ("" if it did not answer) and one Check per ProviderConfig condition.
	Preflight(ctx context.Context, spec PreflightSpec) (version string, checks []Check)
}

// remoteMachines implements Cluster on a controller-runtime client for the Harvester cluster.
type remoteMachines struct {
	// c writes, and reads what is not cached.
	c client.Client
	// cached reads the objects we own from the informers of the Harvester cluster (c if there are
	// none). A cache can lag behind: absence is always confirmed with c (see read).
	cached    client.Reader
	discovery discovery.ServerVersionInterface
}

// NewCluster returns a Cluster working through c, a client for the Harvester cluster whose scheme
// knows core/v1 and kubevirt.io/v1, and dc, which asks for the server's version. cached, if not
// nil, serves reads of the objects the provider owns.
func NewCluster(c client.Client, cached client.Reader, dc discovery.ServerVersionInterface) Cluster {
	if cached == nil {
		cached = c
	}
	return &remoteMachines{c: c, cached: cached, discovery: dc}
}

// read gets an object the provider may own from the cache, and confirms with a live read that
// an object the cache does not have really is absent: a cache that has not yet seen a creation
// must never make us create twice, report a VM deleted, or declare a deletion complete.
func (m *remoteMachines) read(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	err := m.cached.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) && m.cached != client.Reader(m.c) {
		err = m.c.Get(ctx, key, obj)
	}
	return err
}

func (m *remoteMachines) Ensure(ctx context.Context, spec *MachineSpec) (Observation, error) {
	vm, err := m.getOwnedVM(ctx, spec.Ref())
	if err != nil {
		return Observation{}, err
	}
	created := false
	var secret *corev1.Secret
	if vm == nil {
		// The image decides whether the machine can be created at all: check it before
		// creating anything, so a request that cannot work leaves nothing on Harvester.
		image, err := m.usableImage(ctx, spec)
		if err != nil {
			return Observation{}, err
		}
		if secret, err = m.ensureCloudInitSecret(ctx, spec); err != nil {
			return Observation{}, err
		}
		if err := m.ensureDisks(ctx, spec, image); err != nil {
			return Observation{}, err
		}
		if vm, err = m.createVM(ctx, spec); err != nil {
			return Observation{}, err
		}
		created = true
	} else if secret, err = m.ensureCloudInitSecret(ctx, spec); err != nil {
		return Observation{}, err
	}
	// The Secret's owner is the VM, so that Harvester collects it with the VM; the VM's UID
	// exists only now, which is why this comes last and is repeated until it has happened.
	if err := m.ensureSecretOwnedByVM(ctx, secret, vm); err != nil {
		return Observation{}, err
	}
	obs, err := m.observeVM(ctx, vm)
	obs.VMCreated = created
	return obs, err
}

func (m *remoteMachines) Observe(ctx context.Context, ref MachineRef) (Observation, error) {
	vm, err := m.getOwnedVM(ctx, ref)
	if err != nil || vm == nil {
		if _, conflict := AsPermanent(err); conflict {
			// A foreign VM took the name: ours is gone.
			return Observation{}, nil
		}
		return Observation{}, err
	}
	return m.observeVM(ctx, vm)
}

// getOwnedVM returns our VM, nil if none exists, or a NameConflict error if a VM that is not
// ours has the name. A VM of the published provider is adopted (see adoptable).
func (m *remoteMachines) getOwnedVM(ctx context.Context, ref MachineRef) (*kubevirtv1.VirtualMachine, error) {
	vm := &kubevirtv1.VirtualMachine{}
	key := client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}
	if err := m.read(ctx, key, vm); err != nil {
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
// the published managed-by label and its UID is the MachineRequest's bare providerID.
func adoptable(vm *kubevirtv1.VirtualMachine, o Owner) bool {
	return vm.Labels[LabelMachineRequestUID] == "" && vm.Labels[LabelManagedBy] == ManagedByValue &&
		o.LegacyProviderID != "" && strings.TrimPrefix(o.LegacyProviderID, ProviderIDPrefix) == string(vm.UID)
}

func (m *remoteMachines) adopt(ctx context.Context, vm *kubevirtv1.VirtualMachine, o Owner) (*kubevirtv1.VirtualMachine, error) {
	patch := client.MergeFromWithOptions(vm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	vm.Labels = mergeMaps(vm.Labels, ownerLabels(o, vm.Labels[LabelRole]))
	vm.Annotations = mergeMaps(vm.Annotations, ownerAnnotations(o))
	if err := m.c.Patch(ctx, vm, patch); err != nil {
		return nil, classify(err, "label "+describe("VirtualMachine", vm.Namespace, vm.Name)+" as ours")
	}
	return vm, nil
}

func nameConflict(kind string, obj client.Object, o Owner) error {
	return Permanent(v1alpha1.ReasonNameConflict,
		"%s exists on Harvester but was not created for MachineRequest %s/%s: it is left untouched; choose another spec.machineName or delete that %s",
		describe(kind, obj.GetNamespace(), obj.GetName()), o.Namespace, o.Name, kind)
}

// ensureCloudInitSecret creates the Secret, or brings our existing one up to date.
func (m *remoteMachines) ensureCloudInitSecret(ctx context.Context, spec *MachineSpec) (*corev1.Secret, error) {
	want := BuildCloudInitSecret(spec)
	what := describe("Secret", want.Namespace, want.Name)
	have := &corev1.Secret{}
	err := m.read(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := m.c.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("create %s: created concurrently, will look again", what)
			}
			return nil, classify(err, "create "+what)
		}
		return want, nil
	case err != nil:
		return nil, classify(err, "get "+what)
	case !isOwnedBy(have.Labels, spec.Owner):
		return nil, nameConflict("Secret", have, spec.Owner)
	case maps.EqualFunc(have.Data, want.Data, bytes.Equal):
		return have, nil
	}
	patch := client.MergeFromWithOptions(have.DeepCopy(), client.MergeFromWithOptimisticLock{})
	have.Data = want.Data
	if err := m.c.Patch(ctx, have, patch); err != nil {
		return nil, classify(err, "update "+what)
	}
	return have, nil
}

func (m *remoteMachines) ensureSecretOwnedByVM(ctx context.Context, secret *corev1.Secret, vm *kubevirtv1.VirtualMachine) error {
	for _, ref := range secret.OwnerReferences {
		if ref.UID == vm.UID {
			return nil
		}
	}
	patch := client.MergeFromWithOptions(secret.DeepCopy(), client.MergeFromWithOptimisticLock{})
	secret.OwnerReferences = append(secret.OwnerReferences, metav1.OwnerReference{
		APIVersion: kubevirtv1.SchemeGroupVersion.String(),
		Kind:       "VirtualMachine",
		Name:       vm.Name,
		UID:        vm.UID,
	})
	if err := m.c.Patch(ctx, secret, patch); err != nil {
		return classify(err, "set the owner of "+describe("Secret", secret.Namespace, secret.Name))
	}
	return nil
}

// usableImage returns the image the root disk is cloned from, if it can be.
func (m *remoteMachines) usableImage(ctx context.Context, spec *MachineSpec) (ImageInfo, error) {
	image, err := getImage(ctx, m.c, spec.Image)
	if err != nil {
		return image, err
	}
	return image, checkImageUsable(image, spec.DiskGB)
}

// ensureDisks creates the PVCs that do not exist yet. An existing PVC of ours (from an interrupted
// earlier attempt) is reused as it is.
func (m *remoteMachines) ensureDisks(ctx context.Context, spec *MachineSpec, image ImageInfo) error {
	claims := []*corev1.PersistentVolumeClaim{BuildRootDiskClaim(spec, image)}
	for i := range spec.ExtraDisks {
		claims = append(claims, BuildExtraDiskClaim(spec, i))
	}
	for _, want := range claims {
		if err := m.ensureClaim(ctx, want, spec.Owner); err != nil {
			return err
		}
	}
	return nil
}

func (m *remoteMachines) ensureClaim(ctx context.Context, want *corev1.PersistentVolumeClaim, o Owner) error {
	what := describe("PersistentVolumeClaim", want.Namespace, want.Name)
	have := &corev1.PersistentVolumeClaim{}
	err := m.read(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := m.c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return classify(err, "create "+what)
		}
		return nil
	case err != nil:
		return classify(err, "get "+what)
	case !isOwnedBy(have.Labels, o):
		return nameConflict("PersistentVolumeClaim", have, o)
	case have.DeletionTimestamp != nil:
		return Waiting(v1alpha1.ReasonVMCreating, deletionRetry,
			"%s from an earlier attempt is still being deleted; waiting until it is gone", what)
	}
	return nil
}

func (m *remoteMachines) createVM(ctx context.Context, spec *MachineSpec) (*kubevirtv1.VirtualMachine, error) {
	vm := BuildVirtualMachine(spec)
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	if err := m.c.Create(ctx, vm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Created since we looked: decide ownership on the next pass.
			return nil, fmt.Errorf("create %s: it appeared concurrently, will look again", what)
		}
		if apierrors.IsInvalid(err) {
			return nil, Permanent(v1alpha1.ReasonInvalidSpec, "Harvester rejected %s: %s", what, apierrors.ReasonForError(err))
		}
		return nil, classify(err, "create "+what)
	}
	return vm, nil
}

func (m *remoteMachines) observeVM(ctx context.Context, vm *kubevirtv1.VirtualMachine) (Observation, error) {
	obs := Observation{
		VMExists:        true,
		ProviderID:      ProviderIDPrefix + string(vm.UID),
		PrintableStatus: string(vm.Status.PrintableStatus),
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := m.read(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		if !apierrors.IsNotFound(err) {
			return obs, classify(err, "get "+describe("VirtualMachineInstance", vm.Namespace, vm.Name))
		}
		vmi = nil
	}
	if vmi != nil {
		obs.VMIPhase = string(vmi.Status.Phase)
		obs.Running = vmi.Status.Phase == kubevirtv1.Running
		obs.RunningSince = runningSince(vmi)
		obs.Addresses = SelectAddresses(vmi.Status.Interfaces)
	}
	if !obs.Running {
		obs.Diagnosis = m.diagnose(ctx, vm, vmi)
	}
	return obs, nil
}

// Delete removes the machine in Harvester's own way: it annotates the VM with the PVCs to remove
// and deletes it, and Harvester removes those PVCs and collects the Secret the VM owns. Only once
// the VM is gone does it delete what is left of ours itself. done is true when nothing of ours is
// left (checked live).
func (m *remoteMachines) Delete(ctx context.Context, ref MachineRef) (bool, string, error) {
	vm, err := m.getOwnedVM(ctx, ref)
	if _, conflict := AsPermanent(err); conflict {
		vm, err = nil, nil // not ours: never touched
	}
	if err != nil {
		return false, "", err
	}
	if vm != nil {
		claimNames, err := m.ownedClaimNames(ctx, ref, vm)
		if err != nil {
			return false, "", err
		}
		if err := m.deleteVM(ctx, vm, claimNames); err != nil {
			return false, "", err
		}
		return false, describe("VirtualMachine", vm.Namespace, vm.Name), nil
	}
	var remaining []string
	claimNames, err := m.ownedClaimNames(ctx, ref, nil)
	if err != nil {
		return false, "", err
	}
	for _, name := range claimNames {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: name}}
		gone, err := m.deleteIfOurs(ctx, "PersistentVolumeClaim", pvc, ref.Owner)
		if err != nil {
			return false, "", err
		}
		if !gone {
			remaining = append(remaining, describe("PersistentVolumeClaim", ref.Namespace, name))
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: cloudInitSecretName(ref.Name)}}
	gone, err := m.deleteIfOurs(ctx, "Secret", secret, ref.Owner)
	if err != nil {
		return false, "", err
	}
	if !gone {
		remaining = append(remaining, describe("Secret", ref.Namespace, secret.Name))
	}
	return len(remaining) == 0, strings.Join(remaining, ", "), nil
}

// ownedClaimNames lists our PVCs: those labelled for this MachineRequest, plus, given a VM, those
// it mounts (an adopted VM of the published provider has disks without our labels; Harvester
// removes them with the VM when they are listed in the annotation).
func (m *remoteMachines) ownedClaimNames(ctx context.Context, ref MachineRef, vm *kubevirtv1.VirtualMachine) ([]string, error) {
	list := &corev1.PersistentVolumeClaimList{}
	if err := m.c.List(ctx, list, client.InNamespace(ref.Namespace),
		client.MatchingLabels{LabelMachineRequestUID: string(ref.Owner.UID)}); err != nil {
		return nil, classify(err, "list PersistentVolumeClaims in namespace "+ref.Namespace)
	}
	names := map[string]bool{}
	for _, pvc := range list.Items {
		names[pvc.Name] = true
	}
	if vm != nil && vm.Spec.Template != nil {
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				names[v.PersistentVolumeClaim.ClaimName] = true
			}
		}
	}
	out := slices.Collect(maps.Keys(names))
	sort.Strings(out)
	return out, nil
}

// deleteVM asks Harvester to remove the VM's disks with it, then deletes the VM (only this UID).
func (m *remoteMachines) deleteVM(ctx context.Context, vm *kubevirtv1.VirtualMachine, claimNames []string) error {
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	if vm.DeletionTimestamp != nil {
		return nil
	}
	if want := strings.Join(claimNames, ","); vm.Annotations[AnnotationRemovedPVCs] != want {
		patch := client.MergeFromWithOptions(vm.DeepCopy(), client.MergeFromWithOptimisticLock{})
		vm.Annotations = mergeMaps(vm.Annotations, map[string]string{AnnotationRemovedPVCs: want})
		if err := m.c.Patch(ctx, vm, patch); err != nil {
			return ignoreNotFound(classify(err, "annotate "+what))
		}
	}
	err := m.c.Delete(ctx, vm, client.Preconditions{UID: ptr.To(vm.UID)}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return ignoreNotFound(classify(err, "delete "+what))
}

// deleteIfOurs deletes obj if it exists and is ours; it reports gone=true when nothing of ours
// is left under that name.
func (m *remoteMachines) deleteIfOurs(ctx context.Context, kind string, obj client.Object, o Owner) (bool, error) {
	what := describe(kind, obj.GetNamespace(), obj.GetName())
	if err := m.read(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, classify(err, "get "+what)
	}
	if !isOwnedBy(obj.GetLabels(), o) {
		return true, nil
	}
	if obj.GetDeletionTimestamp() != nil {
		return false, nil
	}
	uid := obj.GetUID()
	if err := m.c.Delete(ctx, obj, client.Preconditions{UID: &uid}); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, classify(err, "delete "+what)
	}
	return false, nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

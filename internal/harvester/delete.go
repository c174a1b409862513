package harvester

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
)

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
	d.Watched = watched && !d.unwatched
	return d, err
}

// deleteStep deletes the VM, or once it is gone what is left of ours, looking through the cache
// or, if live, at the API.
func (m *machines) deleteStep(ctx context.Context, ref MachineRef, live bool) (Deletion, error) {
	vm, err := m.getOwnedVM(ctx, ref, live)
	if _, conflict := errkind.AsPermanent(err); conflict {
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
	unwatched := false
	if live {
		// Not in any cache (KubeVirt's, unlabelled by the provider): looked for live, once.
		state, err := m.stateClaimsOf(ctx, ref)
		if err != nil {
			return Deletion{}, err
		}
		remaining = append(remaining, state...)
		unwatched = len(state) > 0
	}
	if len(inUse) > 0 {
		return Deletion{}, Waiting(reasons.DiskInUse, deletionRetry,
			"the VM is deleted, but %s: Harvester does not delete a volume a VM uses, and neither does the provider. Detach it there (or delete that VM); deletion then completes by itself",
			strings.Join(inUse, "; "))
	}
	return Deletion{Done: len(remaining) == 0, Remaining: strings.Join(remaining, ", "), unwatched: unwatched}, nil
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

// deleteVM deletes the VM as read (deleteVMAsRead). KubeVirt and Harvester write a running VM
// often, so a copy from the cache is easily a version behind: on that conflict the VM is read
// live and deleted as it is now, once, so that a deletion like any other costs no retry (and no
// status write saying it was held up).
func (m *machines) deleteVM(ctx context.Context, vm *kubevirtv1.VirtualMachine, o Owner) error {
	err := m.deleteVMAsRead(ctx, vm, o)
	if !apierrors.IsConflict(err) {
		return err
	}
	fresh := &kubevirtv1.VirtualMachine{}
	if rerr := m.live(ctx, client.ObjectKeyFromObject(vm), fresh); rerr != nil {
		if apierrors.IsNotFound(rerr) {
			return nil
		}
		return err
	}
	if fresh.UID != vm.UID || !isOwnedBy(fresh.Labels, o) {
		return err // another VM under the name now: looked at again from the start
	}
	return m.deleteVMAsRead(ctx, fresh, o)
}

// deleteVMAsRead makes sure the VM's removed-claims annotation names exactly its disks that are
// ours (set at creation, so usually nothing to do; a disk someone hot-plugged is never named),
// then deletes the VM (only this UID, only this version).
func (m *machines) deleteVMAsRead(ctx context.Context, vm *kubevirtv1.VirtualMachine, o Owner) error {
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	m.forgetDiagnosis(vm)
	metrics.ForgetVM(vm.UID)
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

package harvester

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
)

// Succession: an owner object re-created elsewhere carries on with its machine.
//
// `clusterctl move` and a backup restored with `clusterctl move --from-directory` re-create a
// HarvesterMachine under the same kind, namespace and name, with a new UID and, on another
// management cluster, another management-cluster identity: the ownership labels of its objects on
// Harvester (the owner's UID) no longer name it. It carries on with them, without creating or
// deleting anything, when it proves it is the same machine, and never otherwise:
//
//   - same kind, namespace and name as the owner the objects were made for (their labels and
//     annotations), and, when its VM's UID is recorded (spec.providerID), that VM;
//   - the proof: the machine's cloud-init data as the owner has it now (its Machine's bootstrap
//     data Secret, which clusterctl moves unchanged and which holds the cluster's join
//     credentials) hashes to AnnotationCloudInitHash of the cloud-init Secret made for the
//     machine on Harvester. The hash is on Harvester; the data is not anywhere a tenant of
//     another namespace or management cluster can read, and a tenant who can read it holds the
//     cluster's join credentials already. Names, spec.providerID and annotations, which anyone
//     may copy, prove nothing on their own;
//   - it is younger than the owner recorded on the objects (AnnotationOwnerCreated): a move
//     creates the new object after the old one, so when both halves of an interrupted move run,
//     the VM stays with the newer one, and the older one never takes it back.
//   - its management cluster runs the tenant cluster: it holds the cluster's ownership Lease on
//     Harvester (ownership.go). A backup restored while the cluster it was taken from still runs
//     passes every test above (the same bootstrap data, newer objects); this one it fails, and it
//     takes nothing until that management cluster releases the cluster (a move) or the platform
//     operator hands it over.
//
// The objects are relabelled disks and Secret first, the VM last (ownership is read from the VM,
// so an interrupted succession is done again), each with a JSON patch that tests the ownership
// label it was read with (relabel): of two reconciles that decided at once, one fails and looks
// again.

// succeed carries the machine of spec on with the objects made for an earlier object of the same
// owner (see Succession above): the VM vm, read live, which carries another owner's UID. It
// returns the earlier owner, or the error that says why the VM is not this machine's.
func (m *machines) succeed(ctx context.Context, spec *MachineSpec, vm *kubevirtv1.VirtualMachine) (Predecessor, error) {
	o := spec.Owner
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	old := types.UID(vm.Labels[LabelMachineRequestUID])
	key, named := ownerKeyOf(vm)
	if o.Succession == nil || old == "" || old == o.UID || !named || key != o.Key() {
		return Predecessor{}, nameConflict("VirtualMachine", vm, o)
	}
	if spec.VMUID != "" && vm.UID != spec.VMUID {
		return Predecessor{}, Permanent(ReasonNameTaken,
			"%s (UID %s) is not the VM this %s records (its providerID names UID %s): it is left untouched%s",
			what, vm.UID, o.kind(), spec.VMUID, whoseObject("VirtualMachine", vm))
	}
	if recorded, err := time.Parse(time.RFC3339, vm.Annotations[AnnotationOwnerCreated]); err == nil && !o.Succession.Created.After(recorded) {
		return Predecessor{}, Permanent(ReasonNameTaken,
			"%s carries on with %s of the same name created %s, later than this one (%s): when a clusterctl move is interrupted and both copies run, the VM stays with the newer; it is left untouched%s",
			what, o.kind(), recorded.Format(time.RFC3339), o.Succession.Created.UTC().Format(time.RFC3339), whoseObject("VirtualMachine", vm))
	}
	if err := spec.loadUserData(ctx); err != nil {
		return Predecessor{}, err
	}
	if !spec.HasCloudInit() {
		return Predecessor{}, Permanent(ReasonNameTaken,
			"%s was made for another %s of this namespace and name, and this one has no bootstrap data to prove it is the same machine: it is left untouched%s",
			what, o.kind(), whoseObject("VirtualMachine", vm))
	}
	secret := secretMeta(spec.Namespace, cloudInitSecretName(spec.Name))
	err := m.read(ctx, client.ObjectKeyFromObject(secret), secret)
	if err != nil && !apierrors.IsNotFound(err) {
		return Predecessor{}, classify(err, "get "+describe("Secret", secret.Namespace, secret.Name))
	}
	mine := BuildCloudInitSecret(spec, nil).Annotations[AnnotationCloudInitHash]
	if uid := types.UID(secret.Labels[LabelMachineRequestUID]); err != nil || (uid != old && uid != o.UID) || secret.Annotations[AnnotationCloudInitHash] != mine {
		return Predecessor{}, Permanent(ReasonNameTaken,
			"%s was made for another %s of this namespace and name, and this one's bootstrap data is not the data that machine was made with (cloud-init Secret %s): only the same machine, moved or restored together with its bootstrap data Secret, carries on with it; it is left untouched%s",
			what, o.kind(), secret.Name, whoseObject("VirtualMachine", vm))
	}
	if err := m.ownsTenant(ctx, spec, vm); err != nil {
		return Predecessor{}, err
	}
	earlier := Predecessor{UID: old, Cluster: vm.Labels[LabelManagementCluster], Succession: true} // vm becomes the server's answer
	if err := m.relabelMachine(ctx, spec, vm, old); err != nil {
		return Predecessor{}, err
	}
	return earlier, nil
}

// ownsTenant says, unless this management cluster holds the ownership Lease of the machine's
// tenant cluster (ownership.go), why it takes nothing: a copy restored while the cluster it was
// taken from still runs proves the same bootstrap data, and is newer.
func (m *machines) ownsTenant(ctx context.Context, spec *MachineSpec, vm *kubevirtv1.VirtualMachine) error {
	o := spec.Owner
	tenant := o.Succession.Tenant
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	if tenant.Name == "" {
		return Permanent(ReasonNameTaken, "%s was made for another %s of this namespace and name, and this one names no tenant cluster whose ownership would let it carry on with it: it is left untouched%s",
			what, o.kind(), whoseObject("VirtualMachine", vm))
	}
	holder, found, err := m.ownershipHolder(ctx, spec.Namespace, tenant)
	switch {
	case err != nil:
		return err
	case o.Cluster == "" || !found:
		return Waiting(reasons.OwnedElsewhere, ownershipRetry,
			"%s was made for another %s of this namespace and name; it is carried on with only while this management cluster holds Cluster %s's ownership on Harvester (%s), which it does not yet: it is left untouched",
			what, o.kind(), tenant, describe("Lease", spec.Namespace, OwnershipLeaseName(tenant)))
	case holder != o.Cluster:
		return Waiting(reasons.OwnedElsewhere, ownershipRetry,
			"%s was made for another %s of this namespace and name, and Cluster %s is run by management cluster %s (it holds %s on Harvester): it is left untouched while that one runs it",
			what, o.kind(), tenant, holder, describe("Lease", spec.Namespace, OwnershipLeaseName(tenant)))
	}
	return nil
}

// findSucceededVM is findVM for an owner that may be a re-creation (Succession), once the VM of
// the machine's name was found labelled for another owner (conflict): the same machine carries on
// with it; an earlier owner of the same name without a recorded VM is taken over as
// takeOverSuperseded says; anything else stays a conflict, with the reason succession gave.
func (m *machines) findSucceededVM(ctx context.Context, spec *MachineSpec) (*kubevirtv1.VirtualMachine, Predecessor, error) {
	vm := &kubevirtv1.VirtualMachine{}
	if err := m.read(ctx, client.ObjectKey{Namespace: spec.Namespace, Name: spec.Name}, vm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, Predecessor{}, fmt.Errorf("%s is gone since it was seen, will look again", describe("VirtualMachine", spec.Namespace, spec.Name))
		}
		return nil, Predecessor{}, classify(err, "get "+describe("VirtualMachine", spec.Namespace, spec.Name))
	}
	if isOwnedBy(vm.Labels, spec.Owner) {
		return vm, Predecessor{}, nil // the cache lagged
	}
	p, err := m.succeed(ctx, spec, vm)
	if err == nil {
		return vm, p, nil
	}
	if spec.VMUID == "" {
		// Not this machine re-created: an earlier owner of the same name may still be taken over
		// (takeOverSuperseded), and if not, that rule says why.
		if err := supersedable("VirtualMachine", vm, spec.Owner); err != nil {
			return nil, Predecessor{}, err
		}
		vm, old, err := m.takeOverSuperseded(ctx, spec)
		return vm, Predecessor{UID: old}, err
	}
	return nil, Predecessor{}, err
}

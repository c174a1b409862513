package harvester

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
)

// A VM with persistent firmware state (a persistent TPM or EFI variables) keeps it in a claim
// KubeVirt makes when the VM first starts (its backend storage): named
// persistent-state-for-<VM>-<random>, labelled StateClaimLabel=<VM>, owned by the VM. The
// provider does not make it and its labels do not name the machine, but it is the machine's:
//
//   - KubeVirt gives a starting VM the claim labelled with its name that is not being deleted,
//     whoever's VM made it. A claim an earlier VM of the name left (its garbage collection not
//     done yet) would hand the new machine the old one's TPM: its keys and sealed secrets. So a
//     machine with persistent state is not created while such a claim is left: it is deleted
//     first, and the VM waits for it to be gone.
//   - deleting the machine waits for the claim too, and deletes it once its VM is gone rather
//     than leave it to the garbage collector: nothing of the machine is left when the deletion
//     is done.
//
// A claim whose owner is a VM that exists is that VM's: never touched.

// StateClaimLabel is the label KubeVirt gives a VM's state claim; its value is the VM's name
// (backendstorage.PVCPrefix).
const StateClaimLabel = "persistent-state-for"

// deleteLeftStateClaims deletes, live, the state claims labelled for VM name in namespace that no
// existing VM owns, and names those still there (being deleted). One list, and one read of the
// VM if any claim is found.
func (m *machines) deleteLeftStateClaims(ctx context.Context, namespace, name string) ([]string, error) {
	list := &corev1.PersistentVolumeClaimList{}
	if err := m.c.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{StateClaimLabel: name}); err != nil {
		return nil, classify(err, "list the state PersistentVolumeClaims of VM "+namespace+"/"+name)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	var vmUID types.UID
	vm := &kubevirtv1.VirtualMachine{}
	switch err := m.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, vm); {
	case err == nil:
		vmUID = vm.UID
	case !apierrors.IsNotFound(err):
		return nil, classify(err, "get "+describe("VirtualMachine", namespace, name))
	}
	var left []string
	for i := range list.Items {
		pvc := &list.Items[i]
		if vmUID != "" && ownedByUID(pvc, vmUID) {
			continue // the state of the VM that has the name now
		}
		what := describe("PersistentVolumeClaim", pvc.Namespace, pvc.Name)
		left = append(left, what)
		if pvc.DeletionTimestamp != nil {
			continue
		}
		uid := pvc.UID
		if err := m.c.Delete(ctx, pvc, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return nil, classify(err, "delete "+what)
		}
	}
	return left, nil
}

// ownedByUID reports whether obj names an owner of that UID.
func ownedByUID(obj metav1.Object, uid types.UID) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == uid {
			return true
		}
	}
	return false
}

// noLeftState is the creation step of a machine with persistent state: nil once no claim an
// earlier VM of its name left is there, else a wait while it is deleted.
func (m *machines) noLeftState(ctx context.Context, spec *MachineSpec) error {
	if !spec.Firmware.PersistentState() {
		return nil
	}
	left, err := m.deleteLeftStateClaims(ctx, spec.Namespace, spec.Name)
	if err != nil || len(left) == 0 {
		return err
	}
	return Waiting(reasons.VMCreating, deletionRetry,
		"%s, the firmware state (TPM, EFI variables) an earlier VM named %s left, is being deleted first: a VM of that name would start on it; waiting until it is gone",
		strings.Join(left, ", "), spec.Name)
}

// stateClaimsOf names the state claims of the machine's VM left once the VM is gone, deleting
// them (see deleteLeftStateClaims); none for a machine without persistent state.
func (m *machines) stateClaimsOf(ctx context.Context, ref MachineRef) ([]string, error) {
	if !ref.PersistentState {
		return nil, nil
	}
	left, err := m.deleteLeftStateClaims(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("the VM's firmware state: %w", err)
	}
	return left, nil
}

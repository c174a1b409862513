package harvester

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
)

func (m *machines) Observe(ctx context.Context, ref MachineRef) (Observation, error) {
	vm, err := m.getOwnedVM(ctx, ref, true)
	if _, conflict := errkind.AsPermanent(err); conflict {
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

// vmiNotifies says whether the VM's VMI wakes its machine when it changes: the VMI carries the
// owner annotation of the VM's template (see notifier). A VM adopted from the published provider
// has none there (its template is never rewritten: KubeVirt would ask for a restart), so its
// machine is looked at as one whose objects are not watched.
func vmiNotifies(vm *kubevirtv1.VirtualMachine) bool {
	return vm.Spec.Template != nil && vm.Spec.Template.ObjectMeta.Annotations[AnnotationMachineRequest] != ""
}

func vmGone(ref MachineRef) error {
	return Permanent(reasons.VMDeleted, "%s (UID %s) was deleted outside the provider", describe("VirtualMachine", ref.Namespace, ref.Name), ref.VMUID)
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

func (m *machines) observeVM(ctx context.Context, vm *kubevirtv1.VirtualMachine) (Observation, error) {
	obs := Observation{
		Namespace:       vm.Namespace,
		Name:            vm.Name,
		VMExists:        true,
		VMUID:           vm.UID,
		ProviderID:      ProviderIDPrefix + string(vm.UID),
		FailureDomain:   vm.Annotations[AnnotationFailureDomain],
		PrintableStatus: string(vm.Status.PrintableStatus),
		VMCreatedAt:     vm.CreationTimestamp.Time,
	}
	if m.cacheFor(vm.Namespace) != nil {
		metrics.ObserveVM(vm.UID)
		obs.Watched = vmiNotifies(vm)
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

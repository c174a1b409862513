package harvester

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

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
	created, notice := false, ""
	if vm == nil {
		// The front door's gate and the image decide whether the machine can be created at
		// all: both are read-only, and checked before the place is recorded and anything is
		// created, so a request that cannot work leaves nothing behind. Then the disks, the
		// cloud-init Secret owned by the root disk (so that it goes with the disk, without a
		// second write to name an owner), and the VM last: it starts only once everything it
		// mounts is there.
		if err := spec.loadUserData(ctx); err != nil {
			return Observation{}, err
		}
		if err := spec.gate(ctx); err != nil {
			return Observation{}, err
		}
		image, err := m.usableImage(ctx, spec)
		if err != nil {
			return Observation{}, err
		}
		if notice, err = m.checkDevices(ctx, spec); err != nil {
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
		if err := m.noLeftState(ctx, spec); err != nil {
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
	obs.VMCreated, obs.TookOverFrom, obs.Predecessor = created, takenOver.UID, takenOver
	if created {
		obs.Notice = notice
	}
	return obs, err
}

// record has the front door store where the machine lives, if its Door is a PlaceRecorder.
func (m *machines) record(ctx context.Context, spec *MachineSpec) error {
	recorder, ok := spec.Door.(PlaceRecorder)
	if !ok {
		return nil
	}
	id, err := m.Identity(ctx)
	if err != nil {
		return err
	}
	return recorder.Record(ctx, id)
}

// findVM returns the machine's VM (nil if there is none), taking over a VM of an earlier
// MachineRequest of the same name when no VM is recorded (see takeOverSuperseded).
func (m *machines) findVM(ctx context.Context, spec *MachineSpec, confirmAbsence bool) (*kubevirtv1.VirtualMachine, Predecessor, error) {
	vm, err := m.getOwnedVM(ctx, spec.Ref(), confirmAbsence)
	if p, ok := errkind.AsPermanent(err); ok && p.Reason == ReasonNameTaken && spec.Owner.Succession != nil {
		return m.findSucceededVM(ctx, spec)
	}
	if p, ok := errkind.AsPermanent(err); ok && p.Reason == ReasonNameTaken && spec.VMUID == "" {
		vm, old, err := m.takeOverSuperseded(ctx, spec)
		return vm, Predecessor{UID: old}, err
	}
	return vm, Predecessor{}, err
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
func (m *machines) createVM(ctx context.Context, spec *MachineSpec) (vm *kubevirtv1.VirtualMachine, takenOver Predecessor, created bool, err error) {
	vm = BuildVirtualMachine(spec)
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	err = m.c.Create(ctx, vm)
	switch {
	case err == nil:
		return vm, Predecessor{}, true, nil
	case apierrors.IsAlreadyExists(err):
		vm, takenOver, err = m.findVM(ctx, spec, true)
		if err == nil && vm == nil {
			err = fmt.Errorf("create %s: it exists and is gone again, will look again", what)
		}
		return vm, takenOver, false, err
	}
	return nil, Predecessor{}, false, createError(err, what)
}

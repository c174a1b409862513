package sim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KubeVirt's backend storage (pkg/storage/backend-storage): a VMI with a persistent TPM or
// persistent EFI variables keeps them in a PVC of its own, which virt-controller finds or makes
// before it creates the launcher pod, and waits for until it is bound.
const (
	// StateClaimLabel labels a VM's state PVC with the VM's name (backendstorage.PVCPrefix); the
	// PVC's name is the label, "-", the VM's name, "-" and a random suffix.
	StateClaimLabel = "persistent-state-for"
	// stateClaimSize is backendstorage.PVCSize.
	stateClaimSize = "10Mi"
	// stateVolumeName is the VMI's volume status entry of the PVC (backendstorage.VolumeName).
	stateVolumeName = StateClaimLabel + "-this-vm"
	// StateStorageClass is the KubeVirt CR's spec.configuration.vmStateStorageClass in
	// Harvester, and the class of that name its chart installs.
	StateStorageClass = "vmstate-persistence"
)

// needsStateClaim is backendstorage.IsBackendStorageNeeded for a VMI spec: a persistent TPM or
// persistent EFI.
func needsStateClaim(spec *kubevirtv1.VirtualMachineInstanceSpec) bool {
	d := spec.Domain
	persistentTPM := d.Devices.TPM != nil && ptr.Deref(d.Devices.TPM.Enabled, true) && ptr.Deref(d.Devices.TPM.Persistent, false)
	persistentEFI := d.Firmware != nil && d.Firmware.Bootloader != nil && d.Firmware.Bootloader.EFI != nil && ptr.Deref(d.Firmware.Bootloader.EFI.Persistent, false)
	return persistentTPM || persistentEFI
}

// stateClaim is virt-controller's handleBackendStorage and IsPVCReady: the VMI's state PVC, found
// as PVCForVMI finds it (the PVC of the namespace labelled with the VMI's name and not being
// deleted, whoever's VM made it) or made as createPVC makes it (owned by the VMI's owners: the
// VM); ready once bound. nil and ready for a VMI that needs none.
func (r *vmReconciler) stateClaim(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (pvc *corev1.PersistentVolumeClaim, ready bool, err error) {
	if !needsStateClaim(&vmi.Spec) {
		return nil, true, nil
	}
	list := &corev1.PersistentVolumeClaimList{}
	if err := r.sim.c.List(ctx, list, client.InNamespace(vmi.Namespace), client.MatchingLabels{StateClaimLabel: vmi.Name}); err != nil {
		return nil, false, err
	}
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp == nil {
			pvc = &list.Items[i]
			break
		}
	}
	if pvc == nil {
		owners := vmi.OwnerReferences
		if len(owners) == 0 {
			owners = []metav1.OwnerReference{*metav1.NewControllerRef(vmi, kubevirtv1.VirtualMachineInstanceGroupVersionKind)}
		}
		mode := corev1.PersistentVolumeFilesystem
		pvc = &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: vmi.Namespace, GenerateName: StateClaimLabel + "-" + vmi.Name + "-",
				OwnerReferences: owners,
				Labels:          map[string]string{StateClaimLabel: vmi.Name, "cdi.kubevirt.io/applyStorageProfile": "true"},
			},
			Spec: corev1.PersistentVolumeClaimSpec{
				// A storage class named in the KubeVirt CR gets ReadWriteMany (getAccessMode).
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(stateClaimSize)}},
				StorageClassName: ptr.To(StateStorageClass),
				VolumeMode:       &mode,
			},
		}
		if err := r.sim.c.Create(ctx, pvc); err != nil {
			r.sim.event(componentKubeVirt, vmi, corev1.EventTypeWarning, "FailedBackendStorageCreate", fmt.Sprintf("failed to create backend storage: %v", err))
			return nil, false, err
		}
	}
	return pvc, pvc.Status.Phase == corev1.ClaimBound, nil
}

// withStateVolume is UpdateVolumeStatus: the VMI's status names its state PVC.
func withStateVolume(st *kubevirtv1.VirtualMachineInstanceStatus, pvc *corev1.PersistentVolumeClaim) {
	info := &kubevirtv1.PersistentVolumeClaimInfo{ClaimName: pvc.Name, AccessModes: pvc.Spec.AccessModes}
	for i := range st.VolumeStatus {
		if st.VolumeStatus[i].Name == stateVolumeName {
			st.VolumeStatus[i].PersistentVolumeClaimInfo = info
			return
		}
	}
	st.VolumeStatus = append(st.VolumeStatus, kubevirtv1.VolumeStatus{Name: stateVolumeName, PersistentVolumeClaimInfo: info})
}

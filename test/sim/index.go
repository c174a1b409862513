package sim

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Field indexes of the simulator's cache. The controllers the simulator plays find the objects
// related to another through indexes (Harvester's "harvesterhci.io/vm-by-pvc", the garbage
// collector's owner graph), not by listing a namespace on every event: listing costs a deep copy
// of every object per event, so at 1000 machines the simulator, not the provider, would be what
// a benchmark measures.
const (
	// indexVMByClaim: the PVCs and DataVolumes a VM mounts.
	indexVMByClaim = "sim.vm.claims"
	// indexVMBySecret: the Secrets a VM reads cloud-init from.
	indexVMBySecret = "sim.vm.cloudInitSecrets" //nolint:gosec // G101: an index name, not a credential
	// indexVMByMAC: the MAC addresses a VM's interfaces ask for.
	indexVMByMAC = "sim.vm.macs"
	// indexVMIByClaim: the PVCs a VMI mounts.
	indexVMIByClaim = "sim.vmi.claims"
	// indexDataVolumeBySource: "namespace/name" of the PVC a DataVolume clones.
	indexDataVolumeBySource = "sim.datavolume.sourcePVC"
	// indexOwnerUID: the UIDs of an object's owners (on the collected kinds' metadata).
	indexOwnerUID = "sim.ownerUIDs"
)

// addIndexes registers the indexes with mgr's cache, before it starts.
func (s *Simulator) addIndexes(ctx context.Context, mgr manager.Manager) error {
	idx := mgr.GetFieldIndexer()
	vmIndex := func(name string, values func(*kubevirtv1.VirtualMachine) []string) error {
		return idx.IndexField(ctx, &kubevirtv1.VirtualMachine{}, name, func(o client.Object) []string {
			return values(o.(*kubevirtv1.VirtualMachine))
		})
	}
	if err := vmIndex(indexVMByClaim, claimsOf); err != nil {
		return err
	}
	if err := vmIndex(indexVMBySecret, cloudInitSecrets); err != nil {
		return err
	}
	if err := vmIndex(indexVMByMAC, vmMACs); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &kubevirtv1.VirtualMachineInstance{}, indexVMIByClaim, func(o client.Object) []string {
		return claimsOfSpec(&o.(*kubevirtv1.VirtualMachineInstance).Spec)
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &cdiv1.DataVolume{}, indexDataVolumeBySource, func(o client.Object) []string {
		if src := o.(*cdiv1.DataVolume).Spec.Source; src != nil && src.PVC != nil {
			return []string{src.PVC.Namespace + "/" + src.PVC.Name}
		}
		return nil
	}); err != nil {
		return err
	}
	for _, kind := range collectedKinds() {
		gvk, err := s.c.GroupVersionKindFor(kind)
		if err != nil {
			return err
		}
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(gvk)
		if err := idx.IndexField(ctx, meta, indexOwnerUID, ownerUIDs); err != nil {
			return err
		}
	}
	return nil
}

func ownerUIDs(o client.Object) []string {
	var uids []string
	for _, ref := range o.GetOwnerReferences() {
		uids = append(uids, string(ref.UID))
	}
	return uids
}

// vmsByIndex lists, through the simulator's cache, the VMs of namespace ("" for all) whose index
// field has value.
func vmsByIndex(ctx context.Context, c client.Reader, namespace, field, value string) ([]kubevirtv1.VirtualMachine, error) {
	vms := &kubevirtv1.VirtualMachineList{}
	opts := []client.ListOption{client.MatchingFields{field: value}}
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	err := c.List(ctx, vms, opts...)
	return vms.Items, err
}

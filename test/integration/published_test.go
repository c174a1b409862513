package integration

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// The published provider (butlerdotdev/butler-provider-harvester, internal/harvester/client.go at
// fabb05a) labels what it creates only with this, and names the root disk "<machineName>-rootdisk".
const (
	publishedManagedBy      = "butler.butlerlabs.dev/managed-by"
	publishedManagedByValue = "butler-provider-harvester"
)

// publishedMachine creates on Harvester what the published provider creates for a machine: the
// root disk, then the VM, without cloud-init (the bootstrap gives no userData). The published
// provider names the disk's storage class longhorn-<image name>, which is the image's class on
// Harvester up to v1.7.x (util.GetImageStorageClassName); from v1.8.0 Harvester names it
// lh-<image uid>, as the simulated Harvester does, refusing any other. So the disk gets the
// image's class as Harvester reports it: what the published provider wrote where its guess was
// right.
func (w *world) publishedMachine(name string, diskGB int) *kubevirtv1.VirtualMachine {
	w.t.Helper()
	class := w.imageClass(w.imageName)
	labels := map[string]string{publishedManagedBy: publishedManagedByValue}
	w.must(hv.Create(w.ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-rootdisk", Namespace: w.hvNs, Labels: labels,
			Annotations: map[string]string{"harvesterhci.io/imageId": w.hvNs + "/" + w.imageName}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			StorageClassName: ptr.To(class),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(fmt.Sprintf("%dGi", diskGB))}},
		},
	}))
	memory := resource.MustParse("4096Mi")
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.hvNs, Labels: labels,
			Annotations: map[string]string{"harvesterhci.io/vmRunStrategy": "Always"}},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{
						CPU:    &kubevirtv1.CPU{Cores: 2, Sockets: 1, Threads: 1},
						Memory: &kubevirtv1.Memory{Guest: &memory},
						Resources: kubevirtv1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("125m"), corev1.ResourceMemory: memory},
							Limits:   corev1.ResourceList{corev1.ResourceMemory: memory},
						},
						Devices: kubevirtv1.Devices{
							Disks: []kubevirtv1.Disk{{Name: "rootdisk", BootOrder: ptr.To[uint](1),
								DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}}},
							Interfaces: []kubevirtv1.Interface{{Name: "default", Model: "virtio",
								InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}}},
						},
					},
					Networks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{
						Multus: &kubevirtv1.MultusNetwork{NetworkName: w.hvNs + "/vlan40"}}}},
					Volumes: []kubevirtv1.Volume{{Name: "rootdisk", VolumeSource: kubevirtv1.VolumeSource{
						PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
							PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-rootdisk"}}}}},
				},
			},
		},
	}
	w.must(hv.Create(w.ctx, vm))
	return vm
}

// A MachineRequest the published provider served, taken over by this provider (its manager
// replaced, the same finalizer on the MachineRequest): its VM is adopted, with or without the
// bare providerID the published provider writes only when its create succeeded, and deleting the
// MachineRequest removes the VM and its <name>-rootdisk.
func TestPublishedProviderMachineAdopted(t *testing.T) {
	for _, withProviderID := range []bool{true, false} {
		t.Run(fmt.Sprintf("providerID %v", withProviderID), func(t *testing.T) {
			w := newWorld(t)
			name := "published-0"
			if !withProviderID {
				name = "published-1"
			}
			// The published provider ran while this one did not.
			stopManager()
			restarted := false
			defer func() {
				if !restarted {
					stopManager = startManager(context.Background(), mgmtCfg)
				}
			}()
			vm := w.publishedMachine(name, 20)
			// The published provider reported it Running with its IP: the VM runs and has one.
			eventually(t, timeout, func() error {
				vmi := &kubevirtv1.VirtualMachineInstance{}
				if err := hv.Get(w.ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
					return err
				}
				if harvester.SelectAddresses(vmi.Status.Interfaces, harvester.NICOf(vm)).Primary == "" {
					return fmt.Errorf("VMI %s has no IPv4 address yet", vmi.Name)
				}
				return nil
			})
			mr := w.machineRequest(name)
			mr.Spec.UserData = "" // as the Butler bootstrap creates them
			mr.Finalizers = []string{v1alpha1.MachineRequestFinalizer}
			w.must(mgmt.Create(w.ctx, mr))
			mr.Status = v1alpha1.MachineRequestStatus{Phase: v1alpha1.MachinePhaseRunning, IPAddress: "10.40.0.99",
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Running",
					Message: "VM is running with IP 10.40.0.99", LastTransitionTime: metav1.Now()}}}
			if withProviderID {
				mr.Status.ProviderID = string(vm.UID) // bare, as the published provider writes it
			}
			w.must(mgmt.Status().Update(w.ctx, mr))
			stopManager = startManager(context.Background(), mgmtCfg)
			restarted = true

			eventually(t, timeout, func() error {
				got := w.get(mr)
				adopted := &kubevirtv1.VirtualMachine{}
				if err := hv.Get(w.ctx, client.ObjectKeyFromObject(vm), adopted); err != nil {
					return err
				}
				if adopted.UID != vm.UID || adopted.Labels[harvester.LabelMachineRequestUID] != string(got.UID) {
					return fmt.Errorf("VM %s (UID %s) labels %v: not adopted", adopted.Name, adopted.UID, adopted.Labels)
				}
				if got.Status.Phase != v1alpha1.MachinePhaseRunning || got.Status.ProviderID != "harvester://"+string(vm.UID) || got.Status.IPAddress == "10.40.0.99" {
					return fmt.Errorf("phase %s, providerID %q, IP %s; want Running with the VM's providerID and its real address",
						got.Status.Phase, got.Status.ProviderID, got.Status.IPAddress)
				}
				return nil
			})
			w.requireRecorded(mr, name)
			if vms, pvcs, _ := w.harvesterObjects(); vms != 1 || pvcs != 1 {
				t.Fatalf("%d VMs and %d PVCs: the adopted machine got another", vms, pvcs)
			}

			w.deleteAndWait(mr)
			w.requireHarvesterEmpty("after deleting the adopted machine")
		})
	}
}

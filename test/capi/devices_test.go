package capi

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// TestClusterAPIDevicesDedicatedCPUsAndModel runs a Machine whose HarvesterMachine asks for
// dedicated CPUs and a CPU model through the real Cluster API core manager. Harvester's VM
// mutator (simulated) gives its VM no overcommit and requires the CPU manager label; with no node
// whose CPU manager is on, the machine is VMUnschedulable and says what to turn on; once a node
// has it, the machine runs there, its VM pinned, with the model asked for and requests equal to
// its limits.
func TestClusterAPIDevicesDedicatedCPUsAndModel(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	w.tenantCluster()
	pinned := tenant
	pinned.MachineSpec.DedicatedCPUPlacement = true
	pinned.MachineSpec.CPUModel = "EPYC-Rome"
	hm, machine := pinned.Machine("tenant-pinned", "")
	w.must(testbed.CreateAll(ctx, c, hm, machine))

	w.readyCondition(hm.Name, infrav1.ReasonVMUnschedulable, "spec.dedicatedCpuPlacement", "Enable CPU Manager", kubevirtv1.CPUManager+"=true")

	w.must(hv.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "harvester-node-2"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+kubevirtv1.CPUManager+`":"true"}}}`))))
	vm := &kubevirtv1.VirtualMachine{}
	waitFor(ctx, t, w.capi, "the pinned machine provisioned", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", machine, vm, &infrav1.HarvesterMachine{})
	})
	d := vm.Spec.Template.Spec.Domain
	if !d.CPU.DedicatedCPUPlacement || d.CPU.Model != "EPYC-Rome" || int64(d.CPU.Cores) != int64(tenant.MachineSpec.CPU) {
		t.Errorf("VM cpu %+v, want %d dedicated cores of model EPYC-Rome", d.CPU, tenant.MachineSpec.CPU)
	}
	if !equality.Semantic.DeepEqual(d.Resources.Requests, d.Resources.Limits) {
		t.Errorf("VM requests %v, want its limits %v", d.Resources.Requests, d.Resources.Limits)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	w.must(hv.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi))
	if vmi.Status.NodeName != "harvester-node-2" {
		t.Errorf("the VMI runs on %q, want harvester-node-2, the node whose CPU manager is on", vmi.Status.NodeName)
	}
}

// TestClusterAPIDevicesFirmwareSecureBootAndTPM runs a Machine whose HarvesterMachine boots UEFI
// with Secure Boot, persistent EFI variables and a persistent TPM. Its VM has KubeVirt's Secure
// Boot with SMM and both persistent; KubeVirt (simulated) keeps their state in a claim of its own.
// A state claim an earlier VM of the machine's name left is deleted before the VM is made, so the
// new machine never starts on another's TPM; and when the machine is deleted its VM's state claim
// goes with it, before the HarvesterMachine is released.
func TestClusterAPIDevicesFirmwareSecureBootAndTPM(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	w.tenantCluster()
	sealed := tenant
	sealed.MachineSpec.Firmware = &infrav1.Firmware{Boot: infrav1.FirmwareUEFI, SecureBoot: true, PersistentEFI: true, TPM: infrav1.TPMPersistent}
	hm, machine := sealed.Machine("tenant-sealed", "")
	stateClaims := func() []corev1.PersistentVolumeClaim {
		list := &corev1.PersistentVolumeClaimList{}
		w.must(hv.Client.List(ctx, list, client.InNamespace("vms"), client.MatchingLabels{harvester.StateClaimLabel: hm.Name}))
		return list.Items
	}
	// What an earlier VM of the name left, its garbage collection not done: KubeVirt would give
	// it to the next VM of the name.
	left := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "persistent-state-for-tenant-sealed-0ld00", Labels: map[string]string{harvester.StateClaimLabel: hm.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine", Name: hm.Name, UID: "a-vm-deleted-before"}}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Mi")}}},
	}
	w.must(hv.Client.Create(ctx, left))
	w.must(testbed.CreateAll(ctx, c, hm, machine))

	vm := &kubevirtv1.VirtualMachine{}
	waitFor(ctx, t, w.capi, "the machine provisioned on a state claim of its own", func() error {
		if err := machineOnHarvester(ctx, c, hv.Client, "vms", machine, vm, &infrav1.HarvesterMachine{}); err != nil {
			return err
		}
		claims := stateClaims()
		if len(claims) != 1 || claims[0].Name == left.Name || !metav1.IsControlledBy(&claims[0], vm) {
			return fmt.Errorf("state claims %v, want one the VM owns", namesOfClaims(claims))
		}
		return nil
	})
	d := vm.Spec.Template.Spec.Domain
	efi := d.Firmware.Bootloader.EFI
	if !ptr.Deref(efi.SecureBoot, false) || !ptr.Deref(efi.Persistent, false) || d.Features == nil || !ptr.Deref(d.Features.SMM.Enabled, false) ||
		d.Devices.TPM == nil || !ptr.Deref(d.Devices.TPM.Persistent, false) {
		t.Errorf("VM firmware %+v, features %+v, TPM %+v: want Secure Boot with SMM, persistent EFI and TPM", efi, d.Features, d.Devices.TPM)
	}

	w.must(c.Delete(ctx, machine))
	waitFor(ctx, t, w.capi, "the HarvesterMachine released", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(hm), hm); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%w), finalizers %v", err, hm.Finalizers)
		}
		return nil
	})
	if claims := stateClaims(); len(claims) != 0 {
		t.Errorf("state claims %v left once the HarvesterMachine is gone", namesOfClaims(claims))
	}
	if vms, disks, secrets := w.harvesterLeft(); vms+disks+secrets != 0 {
		t.Errorf("%d VMs, %d disks and %d cloud-init Secrets left on Harvester", vms, disks, secrets)
	}
}

// namesOfClaims names the claims, for messages.
func namesOfClaims(claims []corev1.PersistentVolumeClaim) []string {
	names := make([]string, 0, len(claims))
	for i := range claims {
		names = append(names, claims[i].Name)
	}
	return names
}

// TestClusterAPIDevicesPCIPassthroughAndVGPU runs Machines whose HarvesterMachines ask for a GPU
// passed through whole and for a vGPU, through the real Cluster API core manager, on a simulated
// Harvester with one A10 on harvester-node-2 and one vGPU on harvester-node-3 that can take type
// NVIDIA A2-4Q. Until passthrough is enabled for the A10 the first machine waits with
// DeviceUnavailable, naming the field, the PCIDevice and what to enable, and nothing is made on
// Harvester; then it runs on the A10's node with the device in its VM. A second machine asking for
// the one A10 is made and waits VMUnschedulable, naming the field, until the first machine is
// deleted. The vGPU machine waits the same way until the vGPU is enabled with its type. The
// template of such machines reports the devices' Node resource in status.capacity, and nothing
// is left on Harvester at the end.
func TestClusterAPIDevicesPCIPassthroughAndVGPU(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	w.tenantCluster()
	const (
		a10      = "nvidia.com/GA102GL_A10"
		vgpuType = "NVIDIA A2-4Q"
		a2       = "nvidia.com/NVIDIA_A2-4Q"
	)
	device, err := hv.Sim.AddPCIDevice(ctx, sim.PCIDevice{Node: "harvester-node-2", Address: "0000:af:00.0", VendorID: "10de", DeviceID: "2236", ResourceName: a10})
	w.must(err)
	vgpu, err := hv.Sim.AddVGPUDevice(ctx, "harvester-node-3", "0000:08:01.4", vgpuType)
	w.must(err)

	gpuWorker := tenant
	gpuWorker.MachineSpec.HostDevices = []infrav1.PassthroughDevice{{DeviceName: a10, NodeResourceName: "nvidia.com/gpu"}}
	hm, machine := gpuWorker.Machine("tenant-gpu-0", "")
	w.must(testbed.CreateAll(ctx, c, hm, machine))
	w.readyCondition(hm.Name, infrav1.ReasonDeviceUnavailable, "spec.hostDevices[0].deviceName "+a10,
		"passthrough is enabled for none of its PCIDevices ("+device+")", "Enable Passthrough")
	if vms, disks, secrets := w.harvesterLeft(); vms+disks+secrets != 0 {
		t.Errorf("%d VMs, %d disks and %d cloud-init Secrets on Harvester for a machine whose device is not offered", vms, disks, secrets)
	}

	w.must(hv.Sim.EnablePassthrough(ctx, device))
	vm := &kubevirtv1.VirtualMachine{}
	waitFor(ctx, t, w.capi, "the GPU machine provisioned once passthrough is enabled", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", machine, vm, &infrav1.HarvesterMachine{})
	})
	if got, want := vm.Spec.Template.Spec.Domain.Devices.HostDevices, []kubevirtv1.HostDevice{{Name: "hostdevice-1", DeviceName: a10}}; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("VM host devices %+v, want %+v", got, want)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	w.must(hv.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi))
	if vmi.Status.NodeName != "harvester-node-2" {
		t.Errorf("the VMI runs on %q, want harvester-node-2, the A10's node", vmi.Status.NodeName)
	}

	// The one A10 is taken: a second machine asking for it is made, and waits for it.
	hm2, machine2 := gpuWorker.Machine("tenant-gpu-1", "")
	w.must(testbed.CreateAll(ctx, c, hm2, machine2))
	w.readyCondition(hm2.Name, infrav1.ReasonVMUnschedulable, "Insufficient "+a10, "device "+a10+" (spec.hostDevices[0])", "in use by another VM", "Enable Passthrough")
	w.must(c.Delete(ctx, machine))
	w.gone(ns, hm.Name)
	waitFor(ctx, t, w.capi, "the second GPU machine provisioned on the freed A10", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", machine2, vm, &infrav1.HarvesterMachine{})
	})

	// A vGPU, until one is enabled with the type.
	vgpuWorker := tenant
	vgpuWorker.MachineSpec.GPUs = []infrav1.PassthroughDevice{{DeviceName: a2}}
	hm3, machine3 := vgpuWorker.Machine("tenant-vgpu-0", "")
	w.must(testbed.CreateAll(ctx, c, hm3, machine3))
	w.readyCondition(hm3.Name, infrav1.ReasonDeviceUnavailable, "spec.gpus[0].deviceName "+a2, "Advanced > vGPU Devices", "VGPUDevices that can take it: "+vgpu)
	w.must(hv.Sim.EnableVGPU(ctx, vgpu, vgpuType))
	waitFor(ctx, t, w.capi, "the vGPU machine provisioned once the vGPU is enabled", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", machine3, vm, &infrav1.HarvesterMachine{})
	})
	if got, want := vm.Spec.Template.Spec.Domain.Devices.GPUs, []kubevirtv1.GPU{{Name: "gpu-1", DeviceName: a2}}; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("VM GPUs %+v, want %+v", got, want)
	}

	// What the autoscaler reads of such machines' template: the Node resource of the GPU.
	tmpl, _ := gpuWorker.MachineDeployment("gpu-workers", 0)
	tmpl.Spec.Template.Spec.GPUs = vgpuWorker.MachineSpec.GPUs
	w.must(c.Create(ctx, tmpl))
	waitFor(ctx, t, w.capi, "the GPU template's capacity", func() error {
		w.must(c.Get(ctx, client.ObjectKeyFromObject(tmpl), tmpl))
		gpus, ok := tmpl.Status.Capacity["nvidia.com/gpu"]
		if !ok || gpus.Value() != 1 || len(tmpl.Status.Capacity) != 3 {
			return fmt.Errorf("status.capacity %v, want cpu, memory and one nvidia.com/gpu (the vGPU names no Node resource)", tmpl.Status.Capacity)
		}
		return nil
	})

	w.deleteLeavingNothing(machine2, machine3)
}

// TestClusterAPIDevicesCheckedOnlyWithTheDeviceGrant runs device machines with the provider's
// Harvester credentials bound by config/harvester/rbac.yaml alone: the device check is skipped,
// never the machine, which is made as asked and says so in its Created event, and waits
// VMUnschedulable, naming the field, while Harvester does not offer its device. With
// config/harvester/device-rbac.yaml applied too, the check runs (a machine asking for a device
// Harvester has none of waits DeviceUnavailable before anything is made) and the machine runs once
// passthrough is enabled.
func TestClusterAPIDevicesCheckedOnlyWithTheDeviceGrant(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	w.credentialsBoundBy("rbac.yaml")
	w.tenantCluster()
	const a10 = "nvidia.com/GA102GL_A10"
	device, err := hv.Sim.AddPCIDevice(ctx, sim.PCIDevice{Node: "harvester-node-1", Address: "0000:3b:00.0", VendorID: "10de", DeviceID: "2236", ResourceName: a10})
	w.must(err)

	gpuWorker := tenant
	gpuWorker.MachineSpec.HostDevices = []infrav1.PassthroughDevice{{DeviceName: a10}}
	hm, machine := gpuWorker.Machine("tenant-gpu-0", "")
	w.must(testbed.CreateAll(ctx, c, hm, machine))
	w.waitEvent("HarvesterMachine", hm.Name, "Created", "its passthrough devices were not checked before it was made", "may not get KubeVirt harvester-system/kubevirt",
		"config/harvester/device-rbac.yaml")
	w.readyCondition(hm.Name, infrav1.ReasonVMUnschedulable, "Insufficient "+a10, "device "+a10+" (spec.hostDevices[0])", "Enable Passthrough")

	w.applyOnHarvester("device-rbac.yaml")
	unknown := tenant
	unknown.MachineSpec.HostDevices = []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/GA100"}}
	hm2, machine2 := unknown.Machine("tenant-gpu-1", "")
	w.must(testbed.CreateAll(ctx, c, hm2, machine2))
	w.readyCondition(hm2.Name, infrav1.ReasonDeviceUnavailable, "spec.hostDevices[0].deviceName nvidia.com/GA100", "no PCIDevice on Harvester has status.resourceName nvidia.com/GA100")
	w.must(hv.Sim.EnablePassthrough(ctx, device))
	waitFor(ctx, t, w.capi, "the GPU machine provisioned once passthrough is enabled", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", machine, &kubevirtv1.VirtualMachine{}, &infrav1.HarvesterMachine{})
	})

	w.deleteLeavingNothing(machine, machine2)
}

// deleteLeavingNothing deletes the Machines, waits for their HarvesterMachines (of the same names)
// to go, and checks that nothing of them is left on Harvester.
func (w *capiWorld) deleteLeavingNothing(machines ...*unstructured.Unstructured) {
	w.t.Helper()
	for _, m := range machines {
		w.must(w.c.Delete(w.ctx, m))
	}
	for _, m := range machines {
		w.gone(ns, m.GetName())
	}
	if vms, disks, secrets := w.harvesterLeft(); vms+disks+secrets != 0 {
		w.t.Errorf("%d VMs, %d disks and %d cloud-init Secrets left on Harvester", vms, disks, secrets)
	}
}

package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// (q) Passthrough devices: a VM asks for any free device of a resource, which only a node whose
// device plugin advertises one free takes (one device to one VM); Harvester's pcidevices webhook
// refuses resources it knows no device of; enabling passthrough (a PCIDeviceClaim) permits the
// resource in the KubeVirt CR and advertises the device on its node, enabling a vGPU with a type
// does the same for the type's mediated devices, and disabling takes the device off the node.
// KubeVirt refuses host devices only without its HostDevices feature gate.
func TestPassthroughDevicesFollowHarvester(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	sc := f.classOf("talos")
	// Resources of this test alone: the nodes and the KubeVirt CR are the cluster's.
	a10 := "nvidia.com/GA102GL_A10_" + strings.ToUpper(f.ns[4:])
	vgpuType := "NVIDIA A2-4Q " + f.ns
	a2 := vgpuResourceName(vgpuType)
	vmWith := func(name string, hostDevices []string, gpus []string) (*kubevirtv1.VirtualMachine, error) {
		pvc := f.rootDisk(name+"-disk-0", "talos", sc)
		f.must(h.Client.Create(f.ctx, pvc))
		vm := f.vmObject(name, pvc.Name, "vlan40", nil)
		for i, r := range hostDevices {
			vm.Spec.Template.Spec.Domain.Devices.HostDevices = append(vm.Spec.Template.Spec.Domain.Devices.HostDevices, kubevirtv1.HostDevice{Name: fmt.Sprintf("hostdevice-%d", i+1), DeviceName: r})
		}
		for i, r := range gpus {
			vm.Spec.Template.Spec.Domain.Devices.GPUs = append(vm.Spec.Template.Spec.Domain.Devices.GPUs, kubevirtv1.GPU{Name: fmt.Sprintf("gpu-%d", i+1), DeviceName: r})
		}
		return vm, h.Client.Create(f.ctx, vm)
	}
	allocatable := func(node, resourceName string) (int64, bool) {
		n := &corev1.Node{}
		f.must(h.Client.Get(f.ctx, client.ObjectKey{Name: node}, n))
		q, ok := n.Status.Allocatable[corev1.ResourceName(resourceName)]
		return q.Value(), ok
	}
	kubeVirt := func() *kubevirtv1.KubeVirt {
		kv := &kubevirtv1.KubeVirt{}
		f.must(h.Client.Get(f.ctx, client.ObjectKey{Namespace: KubeVirtNamespace, Name: KubeVirtName}, kv))
		return kv
	}
	runsOn := func(vm, node string) {
		f.t.Helper()
		f.eventually(vm+" running on "+node, func() error {
			vmi, err := f.getVMI(vm)
			if err != nil {
				return err
			}
			if vmi.Status.Phase != kubevirtv1.Running || vmi.Status.NodeName != node {
				return fmt.Errorf("VMI %s on %q", vmi.Status.Phase, vmi.Status.NodeName)
			}
			return nil
		})
	}
	unschedulable := func(vm, reason string) {
		f.t.Helper()
		f.eventually(vm+" unschedulable for want of "+reason, func() error {
			for _, e := range f.launcherEvents(vm) {
				if e.Reason == "FailedScheduling" && strings.Contains(e.Message, "3 Insufficient "+reason+".") {
					if s := f.getVM(vm).Status.PrintableStatus; s != kubevirtv1.VirtualMachineStatusUnschedulable {
						return fmt.Errorf("VM printableStatus %s", s)
					}
					return nil
				}
			}
			return fmt.Errorf("no FailedScheduling event naming %s", reason)
		})
	}

	device, err := h.Sim.AddPCIDevice(f.ctx, PCIDevice{Node: "harvester-node-1", Address: "0000:af:00.0", VendorID: "10de", DeviceID: "2236", ResourceName: a10})
	f.must(err)
	vgpu, err := h.Sim.AddVGPUDevice(f.ctx, "harvester-node-2", "0000:08:01.4", vgpuType)
	f.must(err)
	t.Cleanup(func() {
		_ = h.Sim.DisablePassthrough(f.ctx, device)
		_ = h.Client.Delete(f.ctx, deviceObject(PCIDeviceGVK, device))
		_ = h.Client.Delete(f.ctx, deviceObject(VGPUDeviceGVK, vgpu))
	})

	// Resources Harvester knows no device of: its pcidevices webhook refuses them, as an internal
	// error.
	if _, err := vmWith("unknown-device", []string{"nvidia.com/GA100_" + f.ns}, nil); !apierrors.IsInternalError(err) ||
		!strings.Contains(err.Error(), `admission webhook "pcidevices.harvesterhci.io" denied the request: hostdevice hostdevice-1: resource name nvidia.com/GA100_`+f.ns+` not found in pcidevice and usbdevice cache`) {
		t.Errorf("a VM asking for a device no PCIDevice is of: %v, want the pcidevices webhook's refusal", err)
	}
	if _, err := vmWith("unconfigured-vgpu", nil, []string{a2}); !apierrors.IsInternalError(err) ||
		!strings.Contains(err.Error(), "gpu device gpu-1: resource name "+a2+" not found in pcidevice cache") {
		t.Errorf("a VM asking for a vGPU type no vGPU is enabled with: %v, want the pcidevices webhook's refusal", err)
	}

	// A device whose passthrough is not enabled: no node advertises it, the VM waits.
	_, err = vmWith("first", []string{a10}, nil)
	f.must(err)
	unschedulable("first", a10)
	if kv := kubeVirt(); kv.Spec.Configuration.PermittedHostDevices != nil &&
		slices.ContainsFunc(kv.Spec.Configuration.PermittedHostDevices.PciHostDevices, func(d kubevirtv1.PciHostDevice) bool { return d.ResourceName == a10 }) {
		t.Errorf("the KubeVirt CR permits %s before passthrough is enabled", a10)
	}

	// Passthrough enabled: the claim is set up, the resource permitted and advertised on the
	// device's node, which takes the VM.
	f.must(h.Sim.EnablePassthrough(f.ctx, device))
	runsOn("first", "harvester-node-1")
	claim := &unstructured.Unstructured{}
	claim.SetGroupVersionKind(PCIDeviceClaimGVK)
	f.must(h.Client.Get(f.ctx, client.ObjectKey{Name: device}, claim))
	if enabled, _, _ := unstructured.NestedBool(claim.Object, "status", "passthroughEnabled"); !enabled || nestedString(claim, "status", "kernelDriverToUnbind") != "nvidia" {
		t.Errorf("claim status %v, want passthrough enabled and the host driver to unbind", claim.Object["status"])
	}
	if !slices.Contains(kubeVirt().Spec.Configuration.PermittedHostDevices.PciHostDevices,
		kubevirtv1.PciHostDevice{PCIVendorSelector: "10de:2236", ResourceName: a10, ExternalResourceProvider: true}) {
		t.Errorf("the KubeVirt CR's pciHostDevices %+v lack %s from an external provider", kubeVirt().Spec.Configuration.PermittedHostDevices.PciHostDevices, a10)
	}
	if n, _ := allocatable("harvester-node-1", a10); n != 1 {
		t.Errorf("harvester-node-1 advertises %d of %s, want its one claimed device", n, a10)
	}
	if _, ok := allocatable("harvester-node-2", a10); ok {
		t.Errorf("harvester-node-2 advertises %s, which it has no device of", a10)
	}

	// The one device is the first VM's: a second waits until the first is gone.
	_, err = vmWith("second", []string{a10}, nil)
	f.must(err)
	unschedulable("second", a10)
	f.must(h.Client.Delete(f.ctx, f.getVM("first")))
	runsOn("second", "harvester-node-1")

	// A vGPU enabled with its type: configured, its type permitted as mediated devices and
	// advertised on its node.
	f.must(h.Sim.EnableVGPU(f.ctx, vgpu, vgpuType))
	f.eventually("the vGPU configured and advertised", func() error {
		if n, _ := allocatable("harvester-node-2", a2); n != 1 {
			return fmt.Errorf("harvester-node-2 advertises %d of %s", n, a2)
		}
		return nil
	})
	v := deviceObject(VGPUDeviceGVK, vgpu)
	f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(v), v))
	if nestedString(v, "status", "vGPUStatus") != vGPUStatusConfigured || nestedString(v, "status", "configureVGPUTypeName") != vgpuType || nestedString(v, "status", "uuid") == "" {
		t.Errorf("vGPU status %v, want configured with %q", v.Object["status"], vgpuType)
	}
	if !slices.Contains(kubeVirt().Spec.Configuration.PermittedHostDevices.MediatedDevices,
		kubevirtv1.MediatedHostDevice{MDEVNameSelector: vgpuType, ResourceName: a2, ExternalResourceProvider: true}) {
		t.Errorf("the KubeVirt CR's mediatedDevices %+v lack %s", kubeVirt().Spec.Configuration.PermittedHostDevices.MediatedDevices, a2)
	}
	_, err = vmWith("with-vgpu", nil, []string{a2})
	f.must(err)
	runsOn("with-vgpu", "harvester-node-2")

	// KubeVirt without its HostDevices feature gate refuses host devices.
	kv := kubeVirt()
	gates := kv.Spec.Configuration.DeveloperConfiguration.FeatureGates
	kv.Spec.Configuration.DeveloperConfiguration.FeatureGates = slices.DeleteFunc(slices.Clone(gates), func(g string) bool { return g == "HostDevices" })
	f.must(h.Client.Update(f.ctx, kv))
	attempt := 0
	f.eventually("the gate's refusal", func() error {
		attempt++ // the webhook reads the KubeVirt CR from its cache: a first VM may pass
		name := fmt.Sprintf("no-gate-%d", attempt)
		_, err := vmWith(name, []string{a10}, nil)
		if err == nil {
			_ = h.Client.Delete(f.ctx, f.getVM(name))
			return fmt.Errorf("created")
		}
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "Host Devices feature gate is not enabled in kubevirt-config") {
			return fmt.Errorf("refused with %w", err)
		}
		return nil
	})
	kv = kubeVirt()
	kv.Spec.Configuration.DeveloperConfiguration.FeatureGates = gates
	f.must(h.Client.Update(f.ctx, kv))

	// Passthrough disabled: the node no longer advertises the device; the permission stays.
	f.must(h.Client.Delete(f.ctx, f.getVM("second")))
	f.must(h.Sim.DisablePassthrough(f.ctx, device))
	f.eventually("the device off harvester-node-1", func() error {
		if n, _ := allocatable("harvester-node-1", a10); n != 0 {
			return fmt.Errorf("harvester-node-1 advertises %d", n)
		}
		return nil
	})
	if !slices.ContainsFunc(kubeVirt().Spec.Configuration.PermittedHostDevices.PciHostDevices, func(d kubevirtv1.PciHostDevice) bool { return d.ResourceName == a10 }) {
		t.Errorf("the KubeVirt CR no longer permits %s: Harvester keeps a permission once given", a10)
	}
}

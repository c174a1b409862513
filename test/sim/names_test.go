package sim

import (
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// The simulator spells the names it shares with the provider on its own (names.go); this is the
// one place the two meet. A mismatch means one side drifted from upstream: the message says which
// upstream source is the truth, so the side that disagrees with it is the one to fix.
func TestNamesAgreeWithTheProvider(t *testing.T) {
	for _, n := range []struct {
		what, sim, provider, truth string
	}{
		{"PVC image annotation", annotationImageID, harvester.AnnotationImageID,
			"harvester pkg/util/constants.go AnnotationImageID"},
		{"VM removed-PVCs annotation", annotationRemovedPVCs, harvester.AnnotationRemovedPVCs,
			"harvester pkg/util/constants.go RemovedPVCsAnnotationKey"},
		{"VirtualMachineImage kind", VirtualMachineImageGVK.String(), harvester.VirtualMachineImageGVK.String(),
			"harvester pkg/apis/harvesterhci.io/v1beta1 (SchemeGroupVersion, VirtualMachineImage)"},
		{"NetworkAttachmentDefinition kind", NetworkAttachmentDefinitionGVK.String(), harvester.NetworkAttachmentDefinitionGVK.String(),
			"k8snetworkplumbingwg/network-attachment-definition-client pkg/apis/k8s.cni.cncf.io/v1/register.go"},
		{"PCIDevice kind", PCIDeviceGVK.String(), harvester.PCIDeviceGVK.String(),
			"harvester/pcidevices pkg/apis/devices.harvesterhci.io/v1beta1 (pcidevice.go)"},
		{"PCIDeviceClaim kind", PCIDeviceClaimGVK.String(), harvester.PCIDeviceClaimGVK.String(),
			"harvester/pcidevices pkg/apis/devices.harvesterhci.io/v1beta1 (pcideviceclaim.go)"},
		{"VGPUDevice kind", VGPUDeviceGVK.String(), harvester.VGPUDeviceGVK.String(),
			"harvester/pcidevices pkg/apis/devices.harvesterhci.io/v1beta1 (sriovgpudevice.go)"},
		{"a vGPU type's resource", vgpuResourceName("GRID RTX6000/8Q  x.y"), harvester.VGPUResourceName("GRID RTX6000/8Q  x.y"),
			"harvester/pcidevices pkg/util/common/common.go GeneratevGPUDeviceName"},
		{"VM generation annotation (KubeVirt's own constant as the provider's side)", annotationVMGeneration, kubevirtv1.VirtualMachineGenerationAnnotation,
			"kubevirt staging/src/kubevirt.io/api/core/v1/types.go VirtualMachineGenerationAnnotation"},
	} {
		if n.sim != n.provider {
			t.Errorf("%s: the simulator says %q, the provider %q; the truth is %s: fix the side that differs from it",
				n.what, n.sim, n.provider, n.truth)
		}
	}
}

// The simulator's scheme (Scheme) knows every typed kind the provider reads and writes on Harvester
// (harvester.RemoteScheme), so that the simulator can serve each of them.
func TestSchemeKnowsTheProvidersKinds(t *testing.T) {
	ours := Scheme()
	for gvk := range harvester.RemoteScheme().AllKnownTypes() {
		if !ours.Recognizes(gvk) {
			t.Errorf("the simulator's scheme does not know %s, which the provider's RemoteScheme does", gvk)
		}
	}
}

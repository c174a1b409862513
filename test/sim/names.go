package sim

import "k8s.io/apimachinery/pkg/runtime/schema"

// The names the simulator reads and writes on objects (annotations, finalizers, kinds), spelled as
// Harvester, KubeVirt, Longhorn and Multus define them, each with where upstream defines it. The
// simulator takes none of them from the provider (internal/harvester): it plays the systems the
// provider talks to, so it must not agree with the provider by construction. names_test.go is the
// one place the two meet: it checks that both spell the names they share alike.
//
// The simulator's own fault-injection hooks (AnnotationFault, AnnotationImportDelay, AnnotationCloneDelay,
// AnnotationVirtualSize, under sim.butler.butlerlabs.dev) are not upstream names and stay with the
// code they drive. It reads none of the provider's butler.butlerlabs.dev labels: Harvester does not.

// Harvester's annotations (harvester pkg/util/constants.go).
const (
	// annotationImageID binds a PVC to the VirtualMachineImage ("<namespace>/<name>") it is
	// cloned from (util.AnnotationImageID).
	annotationImageID = "harvesterhci.io/imageId"
	// annotationRemovedPVCs lists the PVCs Harvester's VM controller deletes together with the VM
	// (util.RemovedPVCsAnnotationKey).
	annotationRemovedPVCs = "harvesterhci.io/removedPersistentVolumeClaims"
	// annotationRunStrategy is the run strategy Harvester's VM controller records on a VM
	// (util.AnnotationRunStrategy).
	annotationRunStrategy = "harvesterhci.io/vmRunStrategy"
	// annotationMACAddress holds the MAC addresses of a VM's interfaces by interface name, written
	// by Harvester's VM controller (util.AnnotationMacAddressName).
	annotationMACAddress = "harvesterhci.io/mac-address"
	// annotationReservedMemory is the memory a user reserves for QEMU, taken from the guest's, read
	// by Harvester's VM mutator (util.AnnotationReservedMemory).
	annotationReservedMemory = "harvesterhci.io/reservedMemory"
)

// harvesterVMFinalizer is the finalizer of Harvester's VM controller, which deletes the removed
// PVCs of a deleted VM: the wrangler OnRemove handler vmControllerCleanupPVCAndSnapshotFinalizerName
// (harvester pkg/controller/master/virtualmachine/register.go) under wrangler's finalizer prefix
// "wrangler.cattle.io/" (rancher/wrangler pkg/generic/remove.go).
const harvesterVMFinalizer = "wrangler.cattle.io/VMController.CleanupPVCAndSnapshot"

// AnnotationRoute is where Harvester keeps a VM network's CIDR and gateway, on its
// NetworkAttachmentDefinition (harvester-network-controller pkg/utils/labels.go, KeyNetworkRoute).
const AnnotationRoute = "network.harvesterhci.io/route"

// annotationVMGeneration is the VM generation KubeVirt records on the VMI it starts (kubevirt
// staging/src/kubevirt.io/api/core/v1/types.go, VirtualMachineGenerationAnnotation).
const annotationVMGeneration = "kubevirt.io/vm-generation"

// longhornProvisioner is Longhorn's CSI driver, the provisioner of Harvester's storage classes
// (longhorn-manager types/types.go, LonghornDriverName).
const longhornProvisioner = "driver.longhorn.io"

// VirtualMachineImageGVK is Harvester's image kind (harvester pkg/apis/harvesterhci.io/v1beta1:
// SchemeGroupVersion in zz_generated_register.go, the VirtualMachineImage type in image.go).
var VirtualMachineImageGVK = schema.GroupVersionKind{Group: "harvesterhci.io", Version: "v1beta1", Kind: "VirtualMachineImage"}

// NetworkAttachmentDefinitionGVK is the Multus network kind VMs attach to
// (k8snetworkplumbingwg/network-attachment-definition-client pkg/apis/k8s.cni.cncf.io/v1/register.go).
var NetworkAttachmentDefinitionGVK = schema.GroupVersionKind{Group: "k8s.cni.cncf.io", Version: "v1", Kind: "NetworkAttachmentDefinition"}

// defaultNICName is the interface KubeVirt gives a VM whose spec names none: its pod network
// (kubevirt staging/src/kubevirt.io/api/core/v1/defaults.go DefaultPodNetwork and
// DefaultBridgeNetworkInterface).
const defaultNICName = "default"

// Harvester's device kinds, of its pcidevices-controller add-on (harvester/pcidevices
// pkg/apis/devices.harvesterhci.io/v1beta1: pcidevice.go, pcideviceclaim.go, sriovgpudevice.go),
// cluster-scoped.
var (
	PCIDeviceGVK      = schema.GroupVersionKind{Group: "devices.harvesterhci.io", Version: "v1beta1", Kind: "PCIDevice"}
	PCIDeviceClaimGVK = schema.GroupVersionKind{Group: "devices.harvesterhci.io", Version: "v1beta1", Kind: "PCIDeviceClaim"}
	VGPUDeviceGVK     = schema.GroupVersionKind{Group: "devices.harvesterhci.io", Version: "v1beta1", Kind: "VGPUDevice"}
)

// Harvester's KubeVirt CR, which the pcidevices controllers permit devices in
// (harvester/pcidevices pkg/controller/pcideviceclaim: DefaultNS and KubevirtCR).
const (
	KubeVirtNamespace = "harvester-system"
	KubeVirtName      = "kubevirt"
)

// vGPUStatusConfigured is a configured VGPUDevice's status.vGPUStatus (harvester/pcidevices
// sriovgpudevice.go, VGPUEnabled).
const vGPUStatusConfigured = "vGPUConfigured"

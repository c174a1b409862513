package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HarvesterMachineSpec is one virtual machine on Harvester: its size, disks, image and network.
// The machine gets its Harvester credentials, namespace and defaults from the ProviderConfig of
// its cluster's HarvesterCluster, and its user data from its Machine's bootstrap data Secret
// (spec.bootstrap.dataSecretName), which reaches the VM through a cloud-init Secret on Harvester.
//
// Left out: a storage class for the root disk (Harvester clones it from the image, in the image's
// storage class); scheduling affinity of its own (a machine is placed by its failure domain only:
// its VM requires the node labels the HarvesterCluster gives its Machine's spec.failureDomain);
// and spec.failureDomain, which the Cluster API contract v1beta2 keeps only for v1beta1
// compatibility (status.failureDomain reports where the machine was placed).
// +kubebuilder:validation:XValidation:rule="!(has(self.networks) && has(self.interfaces))",message="spec.networks and spec.interfaces are exclusive: give every NIC, with its network, in spec.interfaces"
type HarvesterMachineSpec struct {
	// ProviderID is "harvester://<VirtualMachine UID>" (Cluster API contract). The provider sets
	// it once the VM exists; it cannot be changed or removed after that. The workload cluster's
	// Node of the machine must report the same provider ID for Cluster API to link them.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^harvester://[^/]+$`
	ProviderID string `json:"providerID,omitempty"`

	// CPU is the number of virtual CPU cores (whole cores, as KubeVirt's cpu.cores; Cluster API
	// providers of VMs count CPUs the same way).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	CPU int32 `json:"cpu"`

	// DedicatedCPUPlacement pins each of the VM's vCPUs to a host CPU of its own (KubeVirt's
	// dedicatedCpuPlacement), for workloads that must not share CPUs. Harvester then gives the
	// VM its CPUs and memory without overcommit and runs it only on nodes whose CPU manager is
	// on (Harvester's node action "Enable CPU Manager"): with none, the machine is reported
	// VMUnschedulable. Needs Harvester v1.5.0 or later, whose VM mutator leaves such VMs
	// without overcommit; KubeVirt refuses them otherwise. Default false.
	// +optional
	DedicatedCPUPlacement bool `json:"dedicatedCpuPlacement,omitempty"`

	// CPUModel is the CPU model the guest sees (KubeVirt's cpu.model): host-model, KubeVirt's
	// default when empty; host-passthrough (the host's CPU as it is, which ties live migration
	// to identical hosts); or a named model such as EPYC-Rome or Skylake-Server-IBRS, which the
	// VM's node must support (Harvester v1.8.0 and later list each node's models in ConfigMap
	// harvester-system/node-cpu-model-configuration). A model no node supports leaves the
	// machine VMUnschedulable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	CPUModel string `json:"cpuModel,omitempty"`

	// Firmware is how the VM boots: BIOS (the default) or UEFI, with or without Secure Boot, and
	// whether its EFI variables and a virtual TPM keep their state from one boot to the next.
	// +optional
	Firmware *Firmware `json:"firmware,omitempty"`

	// HostDevices are PCI devices of a Harvester node passed through to the VM, whole (a GPU, a
	// NIC, an NVMe drive). Each names the device resource Harvester publishes for the device model
	// (its PCIDevice's status.resourceName, shown on Harvester's PCI Devices page, for example
	// nvidia.com/GA102GL_A10); the VM gets one device of that model per item, on a node that has
	// one free. Harvester offers a device only once passthrough is enabled for it (Advanced > PCI
	// Devices > Enable Passthrough, which needs the pcidevices-controller add-on): until one is,
	// the machine waits and says so. A machine with passthrough devices cannot live-migrate.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	HostDevices []PassthroughDevice `json:"hostDevices,omitempty"`

	// GPUs are virtual GPUs (NVIDIA vGPU types, mediated devices) given to the VM. Each names the
	// vGPU type's device resource (nvidia.com/<type>, spaces as underscores, for example
	// nvidia.com/NVIDIA_A2-4Q); the VM gets one vGPU of that type per item, on a node that has
	// one free. Harvester offers a type once a vGPU of it is enabled (Advanced > vGPU Devices >
	// Enable, choosing the type); until one is, the machine waits and says so. Harvester v1.8
	// passes vGPUs through as PCI devices and turns these entries into host devices of the same
	// names itself: give vGPUs here on every version.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	GPUs []PassthroughDevice `json:"gpus,omitempty"`

	// Memory of the VM, a Kubernetes quantity of at least 1Gi (for example 4Gi or 8192Mi). The VM
	// gets it in whole MiB, rounded up.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Gi')) >= 0",message="memory must be at least 1Gi"
	Memory resource.Quantity `json:"memory"`

	// RootDisk is the boot disk, cloned from the image. It always uses the image's storage class,
	// as Harvester requires of disks cloned from an image.
	// +required
	RootDisk RootDisk `json:"rootDisk"`

	// ExtraDisks are blank data disks attached after the root disk, in order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	ExtraDisks []Disk `json:"extraDisks,omitempty"`

	// Image is the VirtualMachineImage the root disk is cloned from, "<namespace>/<name>".
	// Defaults to the ProviderConfig's spec.harvester.imageName.
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Image string `json:"image,omitempty"`

	// Networks are the NetworkAttachmentDefinitions the VM's NICs attach to, each
	// "<namespace>/<name>", in order. The first is the primary network: its address becomes the
	// machine's InternalIP. Defaults to the ProviderConfig's spec.harvester.networkName. The
	// provider supports one network today; the field is a list so that more can come.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=3
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="size(self) <= 1",message="networks may name one network only: the provider supports one network per machine today (more will come as more items of this list)"
	Networks []string `json:"networks,omitempty"`

	// Interfaces are the VM's network interfaces, the primary first: its address is the machine's
	// InternalIP. Each attaches to a network and takes its addresses by DHCP or from IP address
	// pools, through Cluster API's IPAM contract (an IPAddressClaim per pool, served by an IPAM
	// provider such as Cluster API's in-cluster one); the guest is given them as cloud-init
	// network configuration, matched by each NIC's MAC address. Exclusive with networks, which
	// gives one NIC by DHCP; without either the machine has one NIC on the ProviderConfig's
	// spec.harvester.networkName, by DHCP.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:rule="self.all(i, self.exists_one(j, j.network == i.network))",message="each network may have one interface only: give the machine one interface per network"
	Interfaces []NetworkInterface `json:"interfaces,omitempty"`

	// Labels are added to the VirtualMachine on Harvester. Keys and values must be valid
	// Kubernetes labels; the provider's own labels take precedence.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`
}

// PassthroughDevice is a device of a Harvester node given to a machine's VM (KubeVirt's
// hostDevices and gpus entries): the device resource Harvester offers it as, and the resource the
// tenant cluster's Node advertises it as, for the HarvesterMachineTemplate's status.capacity.
type PassthroughDevice struct {
	// DeviceName is the device resource on Harvester (KubeVirt's deviceName): the resource name
	// Harvester's pcidevices controller publishes in the KubeVirt CR's permittedHostDevices and
	// its device plugin advertises on the nodes that have such a device free, "<vendor
	// domain>/<name>" (nvidia.com/GA102GL_A10 for a PCI device, nvidia.com/NVIDIA_A2-4Q for a
	// vGPU type).
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')",message="deviceName must be a device resource name \"<vendor domain>/<name>\" as Harvester's PCI Devices and vGPU Devices pages show it, for example nvidia.com/GA102GL_A10 or nvidia.com/NVIDIA_A2-4Q"
	DeviceName string `json:"deviceName"`

	// NodeResourceName is the extended resource the tenant cluster's Node advertises for the
	// device once the guest's device plugin runs (nvidia.com/gpu for the NVIDIA device plugin or
	// GPU operator, whatever name a MIG or time-slicing configuration gives), counted in the
	// HarvesterMachineTemplate's status.capacity (summed per name), so that the cluster
	// autoscaler can scale a MachineDeployment from zero for pods that request it. Without it the
	// device is not reported there: the name Harvester gives the device is not the one the
	// guest's Node advertises, and the provider cannot tell that one.
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')",message="nodeResourceName must be an extended resource name \"<domain>/<name>\" as the tenant's Node advertises it, for example nvidia.com/gpu"
	NodeResourceName string `json:"nodeResourceName,omitempty"`
}

// Firmware is a machine's firmware and its persistent state (KubeVirt's firmware.bootloader,
// features.smm and devices.tpm).
//
// Persistent state (persistentEfi, a Persistent TPM) lives in a 10Mi PersistentVolumeClaim that
// Harvester's KubeVirt makes beside the VM when it first starts, named
// persistent-state-for-<VM name>-<random> and owned by the VM, in the storage class the KubeVirt
// CR's vmStateStorageClass names (Harvester's vmstate-persistence). It needs KubeVirt's
// VMPersistentState feature gate, on by default from Harvester v1.7.0 (KubeVirt 1.6) and to be
// enabled in the KubeVirt CR before that. The provider deletes the claim with the machine, and
// never lets a machine's VM start on the state another VM of its name left behind.
// +kubebuilder:validation:XValidation:rule="!has(self.secureBoot) || !self.secureBoot || (has(self.boot) && self.boot == 'UEFI')",message="secureBoot needs boot: UEFI (Secure Boot is a UEFI feature)",fieldPath=".secureBoot"
// +kubebuilder:validation:XValidation:rule="!has(self.persistentEfi) || !self.persistentEfi || (has(self.boot) && self.boot == 'UEFI')",message="persistentEfi needs boot: UEFI (BIOS has no EFI variables to keep)",fieldPath=".persistentEfi"
type Firmware struct {
	// Boot is the firmware the VM boots with: BIOS (SeaBIOS, KubeVirt's default) or UEFI
	// (OVMF). The image must boot with it: a UEFI image needs an EFI system partition. Default
	// BIOS.
	// +optional
	// +kubebuilder:validation:Enum=BIOS;UEFI
	Boot FirmwareBoot `json:"boot,omitempty"`

	// SecureBoot has UEFI verify the boot loader's signature (needs boot: UEFI and an image
	// signed for it). The provider turns on the System Management Mode that KubeVirt requires
	// of Secure Boot. Default false: plain UEFI boots unsigned loaders.
	// +optional
	SecureBoot bool `json:"secureBoot,omitempty"`

	// PersistentEFI keeps the VM's EFI variables (boot entries, enrolled keys) from one boot to
	// the next, in the VM's state claim (see Firmware). Needs boot: UEFI. Default false: every
	// boot starts from the firmware's defaults.
	// +optional
	PersistentEFI bool `json:"persistentEfi,omitempty"`

	// TPM gives the VM a virtual TPM 2.0 (swtpm): Persistent keeps its state (keys, sealed
	// secrets such as a disk encryption key) in the VM's state claim (see Firmware); Ephemeral
	// starts it empty on every boot. Default: no TPM.
	// +optional
	// +kubebuilder:validation:Enum=Persistent;Ephemeral
	TPM TPMMode `json:"tpm,omitempty"`
}

// FirmwareBoot is the firmware a machine boots with.
type FirmwareBoot string

// Firmware a machine boots with.
const (
	FirmwareBIOS FirmwareBoot = "BIOS"
	FirmwareUEFI FirmwareBoot = "UEFI"
)

// TPMMode is whether a machine's virtual TPM keeps its state.
type TPMMode string

// Modes of a machine's virtual TPM.
const (
	TPMPersistent TPMMode = "Persistent"
	TPMEphemeral  TPMMode = "Ephemeral"
)

// NetworkInterface is one NIC of a machine: the network it attaches to, and how it gets its
// addresses (the shape of the vSphere provider's network devices).
// +kubebuilder:validation:XValidation:rule="!has(self.gateway4) || (has(self.addressesFromPools) && size(self.addressesFromPools) > 0)",message="gateway4 is the gateway of addresses from pools (whose IPAddress gives none): with DHCP the DHCP server gives it",fieldPath=".gateway4"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway6) || (has(self.addressesFromPools) && size(self.addressesFromPools) > 0)",message="gateway6 is the gateway of addresses from pools (whose IPAddress gives none): with DHCP the DHCP server gives it",fieldPath=".gateway6"
type NetworkInterface struct {
	// Network is the NetworkAttachmentDefinition the NIC attaches to, "<namespace>/<name>".
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Network string `json:"network"`

	// DHCP4 has the guest take an IPv4 address on the NIC by DHCP. Defaults to true on a NIC
	// without addressesFromPools, false on one with them.
	// +optional
	DHCP4 *bool `json:"dhcp4,omitempty"`

	// DHCP6 has the guest take an IPv6 address on the NIC by DHCPv6. Defaults to false.
	// +optional
	DHCP6 *bool `json:"dhcp6,omitempty"`

	// AddressesFromPools are the IP address pools the NIC's static addresses come from, one
	// address each: one pool per address family (an IPv4 pool and an IPv6 pool for dual stack).
	// The provider claims each address with an IPAddressClaim owned by the HarvesterMachine,
	// makes the VM once every claim is bound, and releases the claims once the VM is gone.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	AddressesFromPools []IPPoolReference `json:"addressesFromPools,omitempty"`

	// Gateway4 is the IPv4 default gateway of the NIC's addresses from pools, where the pool's
	// IPAddress gives none. It must be in the address's prefix.
	// +optional
	// +kubebuilder:validation:Format=ipv4
	// +kubebuilder:validation:MaxLength=15
	Gateway4 string `json:"gateway4,omitempty"`

	// Gateway6 is the IPv6 default gateway of the NIC's addresses from pools, where the pool's
	// IPAddress gives none. It must be in the address's prefix.
	// +optional
	// +kubebuilder:validation:Format=ipv6
	// +kubebuilder:validation:MaxLength=45
	Gateway6 string `json:"gateway6,omitempty"`

	// Nameservers are the DNS servers the guest uses, where DHCP gives none.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:MinLength=2
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:Pattern=`^[0-9a-fA-F.:]+$`
	Nameservers []string `json:"nameservers,omitempty"`
}

// IPPoolReference names an IP address pool of an IPAM provider (the poolRef of Cluster API's
// IPAddressClaim), in the HarvesterMachine's namespace.
type IPPoolReference struct {
	// APIGroup is the pool kind's API group (for example ipam.cluster.x-k8s.io).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	APIGroup string `json:"apiGroup"`

	// Kind is the pool's kind (for example InClusterIPPool).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z][a-zA-Z0-9]*$`
	Kind string `json:"kind"`

	// Name is the pool's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// RootDisk is a machine's boot disk.
type RootDisk struct {
	// Size of the disk, a Kubernetes quantity of at least 1Gi and at least the image's virtual
	// size (for example 40Gi). The disk gets it in whole GiB, rounded up.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Gi')) >= 0",message="disk size must be at least 1Gi"
	Size resource.Quantity `json:"size"`
}

// Disk is a blank data disk.
type Disk struct {
	// Size of the disk, a Kubernetes quantity of at least 1Gi (for example 100Gi). The disk gets it
	// in whole GiB, rounded up.
	// +required
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('1Gi')) >= 0",message="disk size must be at least 1Gi"
	Size resource.Quantity `json:"size"`

	// StorageClassName of the disk on Harvester; defaults to the ProviderConfig's
	// spec.harvester.storageClassName, then to the Harvester cluster's default storage class.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	StorageClassName string `json:"storageClassName,omitempty"`
}

// HarvesterMachineInitializationStatus is the Cluster API contract's initialization of an
// InfraMachine.
// +kubebuilder:validation:MinProperties=1
type HarvesterMachineInitializationStatus struct {
	// Provisioned is true once the VM runs and reports its address: Cluster API then copies
	// spec.providerID, status.addresses and status.failureDomain to the Machine. It is never set
	// back to false.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// HarvesterMachineStatus is what the provider observed of a HarvesterMachine. It has no
// failureReason or failureMessage: the Cluster API contract v1beta2 dropped them, and a machine
// that cannot be made says so in its Ready condition (reason and message).
type HarvesterMachineStatus struct {
	// Initialization reports when the machine is provisioned (Cluster API contract).
	// +optional
	Initialization HarvesterMachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// Addresses of the machine: the VM's name as Hostname and the addresses the guest reports on
	// its primary NIC as InternalIP.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	Addresses []MachineAddress `json:"addresses,omitempty"`

	// FailureDomain is the failure domain the machine was placed in (Cluster API contract): its
	// Machine's spec.failureDomain when its VM was created. The VM stays where it was placed, so
	// this does not follow later changes of the Machine or of the HarvesterCluster's failure
	// domains.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// Conditions: Ready (mirrored by Cluster API into the Machine's InfrastructureReady; its reason
	// says what the machine waits for or why it cannot be made, see conditions.go) and Paused
	// (True while the Cluster or the HarvesterMachine is paused).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:path=harvestermachines,scope=Namespaced,categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster API Cluster of this HarvesterMachine"
// +kubebuilder:printcolumn:name="Machine",type="string",JSONPath=".metadata.ownerReferences[?(@.kind==\"Machine\")].name",description="Cluster API Machine of this HarvesterMachine",priority=1
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status",description="Ready condition"
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID",description="harvester://<VirtualMachine UID>"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// HarvesterMachine is a virtual machine on Harvester for a Cluster API Machine (an InfraMachine
// of the Cluster API contract v1beta2).
//
// Its spec cannot be changed once created, except for spec.providerID, which the provider sets:
// the VM is not resized or rebuilt in place. Change the HarvesterMachineTemplate instead, and
// Cluster API rolls out new machines.
type HarvesterMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the machine.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(oldSelf.providerID) || (has(self.providerID) && self.providerID == oldSelf.providerID)",message="spec.providerID cannot be changed or removed once set: it names the machine's VM",fieldPath=".providerID"
	// +kubebuilder:validation:XValidation:rule="self.cpu == oldSelf.cpu && has(self.firmware) == has(oldSelf.firmware) && (!has(self.firmware) || self.firmware == oldSelf.firmware) && has(self.dedicatedCpuPlacement) == has(oldSelf.dedicatedCpuPlacement) && (!has(self.dedicatedCpuPlacement) || self.dedicatedCpuPlacement == oldSelf.dedicatedCpuPlacement) && has(self.cpuModel) == has(oldSelf.cpuModel) && (!has(self.cpuModel) || self.cpuModel == oldSelf.cpuModel) && has(self.hostDevices) == has(oldSelf.hostDevices) && (!has(self.hostDevices) || self.hostDevices == oldSelf.hostDevices) && has(self.gpus) == has(oldSelf.gpus) && (!has(self.gpus) || self.gpus == oldSelf.gpus) && self.memory == oldSelf.memory && self.rootDisk == oldSelf.rootDisk && has(self.extraDisks) == has(oldSelf.extraDisks) && (!has(self.extraDisks) || self.extraDisks == oldSelf.extraDisks) && has(self.image) == has(oldSelf.image) && (!has(self.image) || self.image == oldSelf.image) && has(self.networks) == has(oldSelf.networks) && (!has(self.networks) || self.networks == oldSelf.networks) && has(self.interfaces) == has(oldSelf.interfaces) && (!has(self.interfaces) || self.interfaces == oldSelf.interfaces) && has(self.labels) == has(oldSelf.labels) && (!has(self.labels) || self.labels == oldSelf.labels)",message="spec cannot be changed except for spec.providerID: the machine's VM is not resized or rebuilt in place; change the HarvesterMachineTemplate and let Cluster API roll out new machines"
	Spec HarvesterMachineSpec `json:"spec"`

	// Status is what the provider observed.
	// +optional
	Status HarvesterMachineStatus `json:"status,omitempty,omitzero"`
}

// +kubebuilder:object:root=true

// HarvesterMachineList is a list of HarvesterMachines.
type HarvesterMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HarvesterMachine `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HarvesterMachine{}, &HarvesterMachineList{})
}

// GetConditions returns the conditions (the getter of Cluster API's condition utilities).
func (m *HarvesterMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions sets the conditions (the setter of Cluster API's condition utilities).
func (m *HarvesterMachine) SetConditions(conditions []metav1.Condition) {
	m.Status.Conditions = conditions
}

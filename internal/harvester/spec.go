package harvester

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
)

// MachineSpec is everything needed to create one machine on Harvester. The controller derives it
// from a MachineRequest and its ProviderConfig; this package never reads either directly.
type MachineSpec struct {
	Owner Owner
	// Namespace is the Harvester namespace the VM and its disks live in.
	Namespace string
	// Name is the VM name (the MachineRequest's spec.machineName).
	Name string
	// VMUID is the UID of the machine's VM once it has been recorded; Ensure never replaces it.
	VMUID types.UID
	Role  string
	CPU   uint32
	// DedicatedCPUs pins each vCPU to a host CPU of its own (KubeVirt's dedicatedCpuPlacement).
	DedicatedCPUs bool
	// CPUModel is the guest's CPU model (KubeVirt's cpu.model; empty: KubeVirt's host-model).
	CPUModel string
	// Firmware is how the VM boots (the zero value: BIOS, no TPM).
	Firmware Firmware
	// HostDevices are the device resources of the PCI devices passed through to the VM, one
	// device each (KubeVirt's hostDevices[].deviceName), and GPUs those of its vGPUs (gpus[]).
	HostDevices, GPUs []string
	MemoryMB          int64
	DiskGB            int64
	// ExtraDisks are blank data disks, attached in order after the root disk.
	ExtraDisks []DiskSpec
	// Image is the VirtualMachineImage the root disk is cloned from.
	Image ObjectRef
	// NICs are the VM's network interfaces, the primary first: at least one, at most MaxNICs.
	NICs []NIC
	// DefaultStorageClass is used for extra disks that name none (empty: the cluster default).
	DefaultStorageClass string
	UserData            string
	NetworkData         string
	// Labels are the user's labels for the VM (spec.labels); ours take precedence.
	Labels map[string]string
	// NodeSelector, if set, are the labels a Harvester node must carry for the VM to run on it
	// (the nodes of a failure domain). It is part of the VM as created: a VM that exists keeps
	// the node selection it was created with, as it keeps the rest of its spec (Ensure never
	// rewrites a VM).
	NodeSelector map[string]string
	// FailureDomain names the failure domain NodeSelector stands for (the front door's name for
	// it): recorded on the VM (AnnotationFailureDomain) and read back (Observation.FailureDomain),
	// so that a status lost (clusterctl move carries none) is rebuilt from where the VM was placed.
	FailureDomain string

	// Door is the front door the machine came through, asked at the steps where it has
	// something to say: each step is an interface of its own (UserDataLoader, CreationGate,
	// PlaceRecorder), and the engine asks Door only for the steps it implements. Nil: the door
	// has nothing to say at any step.
	Door any
	// userDataLoaded says that UserData holds what Door's LoadUserData read (see loadUserData).
	userDataLoaded bool
}

// Firmware is a VM's firmware and the state it keeps (KubeVirt's firmware.bootloader, features.smm
// and devices.tpm).
type Firmware struct {
	// UEFI boots the VM with UEFI (OVMF) rather than BIOS.
	UEFI bool
	// SecureBoot verifies the boot loader's signature (UEFI only; KubeVirt requires SMM of it).
	SecureBoot bool
	// PersistentEFI keeps the EFI variables from one boot to the next (UEFI only).
	PersistentEFI bool
	// TPM gives the VM a virtual TPM 2.0; PersistentTPM keeps its state.
	TPM, PersistentTPM bool
}

// PersistentState reports whether the VM keeps state outside its disks: KubeVirt then makes it a
// state PersistentVolumeClaim (see StateClaimLabel).
func (f Firmware) PersistentState() bool { return f.PersistentEFI || (f.TPM && f.PersistentTPM) }

// PrimaryNetwork is the network of the machine's primary NIC (none: the zero ObjectRef).
func (s *MachineSpec) PrimaryNetwork() ObjectRef {
	if len(s.NICs) == 0 {
		return ObjectRef{}
	}
	return s.NICs[0].Network
}

// HasCloudInit reports whether the machine has cloud-init data. Without any (what the Butler
// bootstrap sends: Talos gets its configuration pushed to the booted node), the VM gets no
// cloud-init disk and no Secret is created for it.
func (s *MachineSpec) HasCloudInit() bool { return s.UserData != "" || s.NetworkData != "" }

// UserDataLoader is a Door whose user data costs a read (Cluster API's bootstrap data Secret):
// it leaves UserData empty, and the engine has it read the data when it first needs it, once: to
// create the machine, to recreate its cloud-init Secret or take one over, and to prove a
// succession. A machine whose VM and cloud-init Secret exist costs no read. Such data is the
// machine's as created: the cloud-init Secret of a machine made with it is not brought up to date
// when the data changes (Cluster API never rewrites a Machine's bootstrap data; a VM reads it
// once, at its first boot).
type UserDataLoader interface {
	LoadUserData(ctx context.Context) (string, error)
}

// CreationGate is a Door that holds creation up: Ensure asks it before it creates anything for a
// machine that has no VM, and returns its error as is. A front door's creation-only checks (who
// may use the credentials, the ProviderConfig's preflight) go here, so that they never judge a
// machine whose VM exists.
type CreationGate interface {
	Gate(ctx context.Context) error
}

// PlaceRecorder is a Door that stores where the machine lives (the cluster, Namespace and Name)
// before anything is created for it: Ensure calls Record once the image has passed its read-only
// check and before the first create, or when it finds a VM of the machine that nothing recorded
// (adopted, or created just before a crash). Nothing is created unless it succeeds. A door whose
// machine has its place recorded already gives a Door that does not implement it: the engine
// then neither records nor asks the cluster's identity.
type PlaceRecorder interface {
	Record(ctx context.Context, cluster ClusterIdentity) error
}

// userDataDeferred reports whether the machine's user data is still to be read (see
// UserDataLoader).
func (s *MachineSpec) userDataDeferred() bool {
	_, ok := s.Door.(UserDataLoader)
	return ok && !s.userDataLoaded
}

// loadUserData fills UserData from the Door's UserDataLoader, once.
func (s *MachineSpec) loadUserData(ctx context.Context) error {
	if !s.userDataDeferred() {
		return nil
	}
	data, err := s.Door.(UserDataLoader).LoadUserData(ctx)
	if err != nil {
		return err
	}
	s.UserData, s.userDataLoaded = data, true
	return nil
}

// gate asks the Door's CreationGate, if it has one.
func (s *MachineSpec) gate(ctx context.Context) error {
	if g, ok := s.Door.(CreationGate); ok {
		return g.Gate(ctx)
	}
	return nil
}

// DiskSpec is one extra disk.
type DiskSpec struct {
	SizeGB       int64
	StorageClass string
}

// ObjectRef is a namespaced reference written as "<namespace>/<name>".
type ObjectRef struct {
	Namespace string
	Name      string
}

func (r ObjectRef) String() string { return r.Namespace + "/" + r.Name }

// ParseObjectRef parses "<namespace>/<name>"; a bare name takes defaultNamespace.
func ParseObjectRef(s, defaultNamespace string) (ObjectRef, error) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 1 && parts[0] != "":
		return ObjectRef{Namespace: defaultNamespace, Name: parts[0]}, nil
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return ObjectRef{Namespace: parts[0], Name: parts[1]}, nil
	default:
		return ObjectRef{}, fmt.Errorf("%q is not of the form <namespace>/<name>", s)
	}
}

// MachineRef identifies an existing machine for observation and deletion.
type MachineRef struct {
	Owner     Owner
	Namespace string
	Name      string
	// VMUID is the recorded UID of the machine's VM (empty until recorded). A VM of ours under
	// the name with another UID is not this machine's VM.
	VMUID types.UID
	// PersistentState says that the machine's VM keeps firmware state (Firmware.PersistentState):
	// its deletion then waits for the VM's state claim too.
	PersistentState bool
}

// Ref returns the reference to the machine this spec describes.
func (s *MachineSpec) Ref() MachineRef {
	return MachineRef{Owner: s.Owner, Namespace: s.Namespace, Name: s.Name, VMUID: s.VMUID, PersistentState: s.Firmware.PersistentState()}
}

// Names of the objects derived from a machine name.
func cloudInitSecretName(machine string) string  { return machine + "-cloudinit" }
func diskName(i int) string                      { return fmt.Sprintf("disk-%d", i) }
func diskClaimName(machine string, i int) string { return fmt.Sprintf("%s-%s", machine, diskName(i)) }

// Names of the VM's passthrough devices, from 1 in the order of the spec: stable, unique in the
// VM, and never a PCIDevice's name (Harvester's pcidevices webhooks look devices named after a
// PCIDevice up as that very device, claimed by its owner; the provider asks for any free device of
// a resource instead).
func hostDeviceName(i int) string { return fmt.Sprintf("hostdevice-%d", i+1) }
func gpuName(i int) string        { return fmt.Sprintf("gpu-%d", i+1) }

// HasDevices reports whether the machine asks for passthrough devices or vGPUs.
func (s *MachineSpec) HasDevices() bool { return len(s.HostDevices)+len(s.GPUs) > 0 }

// NICName is the name of the VM's first (primary) network interface; its VMI status entry carries
// the machine's address.
const NICName = "nic-1"

// ClusterIdentity names a Harvester cluster (see clustercache.ClusterIdentity).
type ClusterIdentity = clustercache.ClusterIdentity

package v1alpha1

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MachineRole is the role of a machine in the cluster being bootstrapped.
// +kubebuilder:validation:Enum=control-plane;worker
type MachineRole string

// Machine roles, as in the published butler-api enum, so callers written against it work unchanged.
const (
	MachineRoleControlPlane MachineRole = "control-plane"
	MachineRoleWorker       MachineRole = "worker"
)

// MachinePhase is the lifecycle phase of a MachineRequest.
// +kubebuilder:validation:Enum=Pending;Creating;Running;Failed;Deleting;Deleted;Unknown
type MachinePhase string

const (
	// MachinePhasePending means accepted, with nothing created on the infrastructure yet.
	MachinePhasePending MachinePhase = "Pending"
	// MachinePhaseCreating means the VM exists and the provider waits for its IP address.
	MachinePhaseCreating MachinePhase = "Creating"
	// MachinePhaseRunning means the VM runs and status.ipAddress is set.
	MachinePhaseRunning MachinePhase = "Running"
	// MachinePhaseFailed is terminal for this generation; failureReason and failureMessage say why.
	// Changing the spec retries.
	MachinePhaseFailed MachinePhase = "Failed"
	// MachinePhaseDeleting means the VM and its disks are being removed.
	MachinePhaseDeleting MachinePhase = "Deleting"
	// MachinePhaseDeleted means everything is removed (seen only briefly, before the object goes).
	MachinePhaseDeleted MachinePhase = "Deleted"
	// MachinePhaseUnknown is part of the published enum; this provider never sets it.
	MachinePhaseUnknown MachinePhase = "Unknown"
)

// MachineRequestSpec is the machine a caller asks for.
type MachineRequestSpec struct {
	// ProviderRef names the ProviderConfig that says where and how to create the machine. It
	// cannot be changed once set: the machine lives where it was created (status.placement).
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.providerRef cannot be changed: the machine stays on the Harvester cluster it was created on; delete and recreate the MachineRequest to move it"
	ProviderRef ProviderReference `json:"providerRef"`

	// MachineName is the name of the VM, a DNS label. Objects on Harvester are named after it.
	// It cannot be changed once set.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.machineName cannot be changed: the VM on Harvester is named after it; delete and recreate the MachineRequest to rename the machine"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	MachineName string `json:"machineName"`

	// Role is the machine's role in the cluster.
	// +kubebuilder:validation:Required
	Role MachineRole `json:"role"`

	// CPU is the number of virtual CPU cores.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	CPU int32 `json:"cpu"`

	// MemoryMB is the memory in MiB.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Minimum=1024
	MemoryMB int32 `json:"memoryMB"`

	// DiskGB is the root disk size in GiB; it must be at least the image's virtual size.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Minimum=10
	DiskGB int32 `json:"diskGB"`

	// ExtraDisks are blank data disks attached after the root disk, in order.
	// +optional
	ExtraDisks []DiskSpec `json:"extraDisks,omitempty"`

	// Image overrides the ProviderConfig's default image. For harvester: "<namespace>/<name>" of a
	// VirtualMachineImage (a bare name means the ProviderConfig's harvester.namespace).
	// +optional
	Image string `json:"image,omitempty"`

	// UserData is the cloud-init user data or Talos machine configuration. It reaches the VM
	// through a Secret, so any size works up to the Secret limit of 1 MiB (together with
	// networkData). Never logged.
	// +optional
	UserData string `json:"userData,omitempty"`

	// NetworkData is cloud-init network configuration (v1 or v2), delivered like userData.
	// +optional
	NetworkData string `json:"networkData,omitempty"`

	// Labels are added to the VirtualMachine on Harvester. Keys and values must be valid
	// Kubernetes labels; the provider's own labels take precedence.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// DiskSpec is an extra disk.
type DiskSpec struct {
	// SizeGB is the disk size in GiB.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Minimum=1
	SizeGB int32 `json:"sizeGB"`

	// StorageClass of the disk; defaults to the ProviderConfig's harvester.storageClassName,
	// then to the Harvester cluster's default storage class.
	// +optional
	StorageClass string `json:"storageClass,omitempty"`
}

// MachineRequestStatus is what the provider observed.
type MachineRequestStatus struct {
	// Phase is the lifecycle phase.
	// +optional
	Phase MachinePhase `json:"phase,omitempty"`

	// ProviderID identifies the VM: "harvester://<VirtualMachine uid>".
	// +optional
	ProviderID string `json:"providerID,omitempty"`

	// IPAddress is the machine's first routable IPv4 address on its NIC.
	// +optional
	IPAddress string `json:"ipAddress,omitempty"`

	// IPAddresses lists every address the guest reported on its NIC.
	// +optional
	IPAddresses []string `json:"ipAddresses,omitempty"`

	// MACAddress is the MAC address of the machine's NIC.
	// +optional
	MACAddress string `json:"macAddress,omitempty"`

	// FailureReason is set when Phase is Failed: one of the permanent reasons documented in
	// this package (for example ImageNotFound, NameConflict, VMDeleted).
	// +optional
	FailureReason string `json:"failureReason,omitempty"`

	// FailureMessage says what failed and how to fix it.
	// +optional
	FailureMessage string `json:"failureMessage,omitempty"`

	// Conditions are Ready, Progressing and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastUpdated is when the phase last changed.
	// +optional
	LastUpdated *metav1.Time `json:"lastUpdated,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Placement is where earlier versions of this provider recorded the machine's place.
	//
	// Deprecated: the place is recorded in annotation
	// harvester.butler.butlerlabs.dev/placement (AnnotationPlacement), which every
	// MachineRequest schema keeps, and the VM's UID in providerID. A placement found here is
	// moved to the annotation, and then cleared. Not part of the published schema.
	// +optional
	Placement *Placement `json:"placement,omitempty"`
}

// Placement is where on Harvester a machine was created: the value of AnnotationPlacement (JSON).
type Placement struct {
	// ClusterID identifies the Harvester cluster: the UID of its kube-system namespace.
	// +kubebuilder:validation:MinLength=1
	ClusterID string `json:"clusterID"`

	// Server is the API server URL the machine was created through, for people to read; the
	// cluster is recognised by ClusterID.
	// +optional
	Server string `json:"server,omitempty"`

	// Namespace is the Harvester namespace of the VM, its disks and its cloud-init Secret.
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`

	// Name is the VirtualMachine's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// VMUID is the VirtualMachine's UID, once the provider has seen it (only in the deprecated
	// status.placement: the annotation leaves it to status.providerID).
	// +optional
	VMUID string `json:"vmUID,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mr
// +kubebuilder:printcolumn:name="Machine",type="string",JSONPath=".spec.machineName",description="VM name"
// +kubebuilder:printcolumn:name="Role",type="string",JSONPath=".spec.role",description="Machine role"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase",description="Current phase"
// +kubebuilder:printcolumn:name="IP",type="string",JSONPath=".status.ipAddress",description="IP address"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// MachineRequest asks a provider for one virtual machine.
type MachineRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MachineRequestSpec   `json:"spec,omitempty"`
	Status MachineRequestStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MachineRequestList is a list of MachineRequests.
type MachineRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MachineRequest `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MachineRequest{}, &MachineRequestList{})
}

// ProviderConfigKey returns the namespace and name of the referenced ProviderConfig.
func (m *MachineRequest) ProviderConfigKey() (namespace, name string) {
	namespace = m.Spec.ProviderRef.Namespace
	if namespace == "" {
		namespace = m.Namespace
	}
	return namespace, m.Spec.ProviderRef.Name
}

// RecordedPlacement returns where the machine lives as recorded in AnnotationPlacement, else (by an
// earlier version of the provider) in the deprecated status.placement; nil if neither holds one.
// The error says why an annotation that is there cannot be read.
func (m *MachineRequest) RecordedPlacement() (*Placement, error) {
	if p, err := DecodePlacement(m.Annotations); p != nil || err != nil {
		return p, err
	}
	if m.Status.Placement != nil {
		p := *m.Status.Placement
		return &p, nil
	}
	return nil, nil
}

// DecodePlacement reads AnnotationPlacement from an object's annotations (of any kind that records
// its machine's place there); nil if it holds none. The error says why an annotation that is
// there cannot be read.
func DecodePlacement(annotations map[string]string) (*Placement, error) {
	value, ok := annotations[AnnotationPlacement]
	if !ok {
		return nil, nil
	}
	p := &Placement{}
	if err := json.Unmarshal([]byte(value), p); err != nil {
		return nil, fmt.Errorf("annotation %s is not a placement: %w", AnnotationPlacement, err)
	}
	if p.ClusterID == "" || p.Namespace == "" || p.Name == "" {
		return nil, fmt.Errorf("annotation %s lacks the clusterID, namespace or name", AnnotationPlacement)
	}
	return p, nil
}

// EncodePlacement is the value of AnnotationPlacement for p (its VMUID is left to status.providerID).
func EncodePlacement(p Placement) string {
	p.VMUID = ""
	value, _ := json.Marshal(p) // a struct of strings always encodes
	return string(value)
}

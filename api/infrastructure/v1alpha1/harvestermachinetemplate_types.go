package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HarvesterMachineTemplateSpec holds the template of the HarvesterMachines Cluster API makes
// (for MachineDeployments, MachineSets and control planes).
type HarvesterMachineTemplateSpec struct {
	// Template is copied into each HarvesterMachine made from it.
	// +required
	Template HarvesterMachineTemplateResource `json:"template"`
}

// HarvesterMachineTemplateResource is what each HarvesterMachine made from the template gets.
type HarvesterMachineTemplateResource struct {
	// ObjectMeta holds labels and annotations for the HarvesterMachines made from the template.
	// +optional
	ObjectMeta ObjectMeta `json:"metadata,omitempty,omitzero"`

	// Spec of the HarvesterMachines. spec.providerID must be left empty: the provider sets it on
	// each machine.
	// +required
	// +kubebuilder:validation:XValidation:rule="!has(self.providerID)",message="spec.template.spec.providerID must not be set: the provider sets it on each HarvesterMachine",fieldPath=".providerID"
	Spec HarvesterMachineSpec `json:"spec"`
}

// HarvesterMachineTemplateStatus is what the provider reports of a template, computed from its
// spec alone: what a Node made from it will advertise, for the cluster autoscaler to scale a
// MachineDeployment from zero machines (the InfraMachineTemplate contract's opt-in autoscaling
// from zero).
type HarvesterMachineTemplateStatus struct {
	// Capacity is what a Node made from the template advertises: cpu is spec.cpu; memory is
	// spec.memory rounded up to a whole MiB, as the VM is given it, all of it the guest's (under
	// Harvester's default settings its VM mutator reserves none of it for QEMU: the
	// additional-guest-memory-overhead-ratio setting puts QEMU's share on top). The guest kernel
	// keeps a few percent for itself, so the Node's own capacity reads a little lower: leave
	// that headroom in the requests of pods that should fit a new machine. Each device of
	// spec.hostDevices and spec.gpus that names a nodeResourceName adds one of it (nvidia.com/gpu:
	// 2 for two GPUs the guest's NVIDIA device plugin advertises so); a device without one is not
	// counted, since the name Harvester gives it is not what the guest's Node advertises.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// NodeInfo is the operating system of a Node made from the template: linux, as the images
	// of every flavour are. Its architecture is not reported, because the spec cannot say it;
	// the cluster autoscaler then assumes its CAPI_SCALE_ZERO_DEFAULT_ARCH, or amd64.
	// +optional
	NodeInfo *NodeInfo `json:"nodeInfo,omitempty"`
}

// NodeInfo is the architecture and operating system of a Node made from a template.
// +kubebuilder:validation:MinProperties=1
type NodeInfo struct {
	// Architecture is the Node's CPU architecture.
	// +optional
	// +kubebuilder:validation:Enum=amd64;arm64;s390x;ppc64le
	Architecture string `json:"architecture,omitempty"`

	// OperatingSystem is the Node's operating system, such as linux.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	OperatingSystem string `json:"operatingSystem,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=harvestermachinetemplates,scope=Namespaced,categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="CPU",type="integer",JSONPath=".spec.template.spec.cpu",description="Virtual CPU cores"
// +kubebuilder:printcolumn:name="Memory",type="string",JSONPath=".spec.template.spec.memory",description="Memory"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// HarvesterMachineTemplate is the template of HarvesterMachines (an InfraMachineTemplate of the
// Cluster API contract v1beta2).
//
// spec.template.spec is immutable, as Cluster API expects of templates: create a new template and
// point the MachineDeployment or control plane at it to roll machines out. The CRD cannot say so
// itself (a CEL rule would also refuse the server-side-apply dry runs of Cluster API's topology
// controller, which the contract requires to pass for ClusterClass support): the
// ValidatingAdmissionPolicy in config/capi enforces it, and lets those dry runs through.
type HarvesterMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the template.
	// +required
	Spec HarvesterMachineTemplateSpec `json:"spec"`

	// Status is what a machine made from the template will have (see
	// HarvesterMachineTemplateStatus).
	// +optional
	Status HarvesterMachineTemplateStatus `json:"status,omitempty,omitzero"`
}

// +kubebuilder:object:root=true

// HarvesterMachineTemplateList is a list of HarvesterMachineTemplates.
type HarvesterMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HarvesterMachineTemplate `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HarvesterMachineTemplate{}, &HarvesterMachineTemplateList{})
}

package v1alpha1

import (
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

// +kubebuilder:object:root=true
// +kubebuilder:storageversion
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

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HarvesterClusterTemplateSpec holds the template of the HarvesterClusters Cluster API makes for
// the Clusters of a ClusterClass.
type HarvesterClusterTemplateSpec struct {
	// Template is copied into each HarvesterCluster made from it.
	// +required
	Template HarvesterClusterTemplateResource `json:"template"`
}

// HarvesterClusterTemplateResource is what each HarvesterCluster made from the template gets.
type HarvesterClusterTemplateResource struct {
	// ObjectMeta holds labels and annotations for the HarvesterClusters made from the template.
	// +optional
	ObjectMeta ObjectMeta `json:"metadata,omitempty,omitzero"`

	// Spec of the HarvesterClusters. A control plane endpoint belongs to one cluster: leave it out
	// of a template shared by several Clusters, and set it per Cluster (a ClusterClass patch, or
	// the Cluster's spec.controlPlaneEndpoint).
	// +required
	Spec HarvesterClusterSpec `json:"spec"`
}

// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:resource:path=harvesterclustertemplates,scope=Namespaced,categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// HarvesterClusterTemplate is the template of HarvesterClusters (an InfraClusterTemplate of the
// Cluster API contract v1beta2, for ClusterClasses).
//
// spec.template.spec is immutable, as Cluster API expects of templates. The CRD cannot say so
// itself (a CEL rule would also refuse the server-side-apply dry runs of Cluster API's topology
// controller, which the contract requires to pass for ClusterClass support): the
// ValidatingAdmissionPolicy in config/capi enforces it, and lets those dry runs through.
type HarvesterClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the template.
	// +required
	Spec HarvesterClusterTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// HarvesterClusterTemplateList is a list of HarvesterClusterTemplates.
type HarvesterClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HarvesterClusterTemplate `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HarvesterClusterTemplate{}, &HarvesterClusterTemplateList{})
}

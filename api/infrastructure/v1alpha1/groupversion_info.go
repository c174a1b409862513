// Package v1alpha1 holds the infrastructure.butlerlabs.dev/v1alpha1 kinds of the Cluster API
// infrastructure provider that shares this project's Harvester engine: HarvesterCluster,
// HarvesterClusterTemplate, HarvesterMachine and HarvesterMachineTemplate. They follow the Cluster
// API provider contract v1beta2 (InfraCluster, InfraMachine and their templates); every CRD carries
// the label cluster.x-k8s.io/v1beta2: v1alpha1, which tells Cluster API which version of ours
// speaks that contract.
//
// The package depends on the Kubernetes API types only, not on sigs.k8s.io/cluster-api: the
// contract's shared types (APIEndpoint, MachineAddress, FailureDomain, template ObjectMeta) are
// defined here with the contract's JSON shape.
//
// Where the machines go comes from a Butler ProviderConfig (butler.butlerlabs.dev/v1alpha1,
// provider harvester), named by the HarvesterCluster: its credentials, Harvester namespace,
// network, default image and default storage class, as for a MachineRequest.
// +kubebuilder:object:generate=true
// +groupName=infrastructure.butlerlabs.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the Cluster API infrastructure kinds.
	GroupVersion = schema.GroupVersion{Group: "infrastructure.butlerlabs.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // as in api/v1alpha1

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// ContractVersionLabel is the label on every CRD of this package that maps the Cluster API
// contract version v1beta2 to the CRD versions implementing it (an underscore-separated list).
const ContractVersionLabel = "cluster.x-k8s.io/v1beta2"

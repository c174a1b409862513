package v1alpha1

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// HarvesterClusterSpec is the Harvester infrastructure of one Cluster API Cluster: which Butler
// ProviderConfig its machines are made with, its control plane endpoint and its failure domains.
type HarvesterClusterSpec struct {
	// ProviderConfigRef names the Butler ProviderConfig (butler.butlerlabs.dev/v1alpha1, provider
	// harvester) that gives the cluster's machines their Harvester credentials, Harvester
	// namespace, network, default image and default storage class; its preflight checks gate the
	// creation of machines, as for MachineRequests. The HarvesterMachines of the cluster use it;
	// they name none themselves. It cannot be changed on a HarvesterCluster: the machines stay on
	// the Harvester cluster they were created on.
	// +required
	ProviderConfigRef ProviderConfigReference `json:"providerConfigRef"`

	// ControlPlaneEndpoint is the endpoint of the cluster's Kubernetes API (Cluster API contract).
	// Set it when the endpoint is known beforehand, such as a kube-vip virtual IP on the Harvester
	// network: Cluster API then copies it to the Cluster. Leave it empty when the endpoint comes
	// from elsewhere (the Cluster's spec.controlPlaneEndpoint, set by the user or by a control
	// plane provider). Once set, it cannot be changed: certificates and kubeconfigs name it. The
	// port defaults to 6443.
	// +optional
	// +kubebuilder:validation:XValidation:rule="has(self.host)",message="controlPlaneEndpoint.host is required when controlPlaneEndpoint is set"
	ControlPlaneEndpoint APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// FailureDomains are sets of Harvester nodes, each chosen by node labels, where machines can
	// be placed. The provider reports them in status.failureDomains, from which Cluster API places
	// machines (spreading control plane machines over those with controlPlane true), and the
	// provider schedules each machine's VM onto the nodes of its Machine's failure domain. Without
	// failure domains, Harvester places VMs on any node.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []HarvesterFailureDomain `json:"failureDomains,omitempty"`

	// GuestCredentials says whether the provider gives the cluster's nodes the Harvester
	// credentials Harvester's cloud provider and CSI driver run with in the tenant cluster.
	// Managed (the default): the provider makes, on Harvester, in the ProviderConfig's Harvester
	// namespace, a ServiceAccount for this cluster bound to Harvester's own roles
	// (harvesterhci.io:cloudprovider in that namespace, harvesterhci.io:csi-driver cluster-wide,
	// as Harvester's own guest integration binds them), its token, and a kubeconfig whose
	// namespace is that namespace; it delivers the kubeconfig in Secret
	// <Cluster name>-harvester-cloud-config of this namespace, for a ClusterResourceSet to apply
	// as Secret kube-system/cloud-config in the tenant cluster. It re-issues the token when the
	// ProviderConfig's credentials or namespace change, and deletes all of it with the
	// HarvesterCluster. Without it the tenant's Nodes never get a providerID and Cluster API never
	// links Machines to Nodes. None: the provider makes nothing; give the tenant cluster its
	// cloud-config yourself (and delete what it made before, which it does on the switch).
	// +optional
	// +kubebuilder:default=Managed
	GuestCredentials GuestCredentialsPolicy `json:"guestCredentials,omitempty"`

	// ManagementNetwork is the Harvester network (the NetworkAttachmentDefinition
	// "namespace/name") that Harvester's cloud provider reads the Nodes' addresses from: its
	// --management-network flag, which the cluster templates set from the same variable
	// (HARVESTER_MANAGEMENT_NETWORK). It must be the network of every machine's first NIC, whose
	// address is the machine's: a machine whose first NIC is on another network is reported
	// Degraded (ManagementNetworkMismatch), since its Node would get another NIC's address, or
	// none. Empty (the default): the cloud provider reads the first NIC's, whatever its network.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`
	ManagementNetwork string `json:"managementNetwork,omitempty"`
}

// GuestCredentialsPolicy says who gives a tenant cluster its Harvester cloud-config.
// +kubebuilder:validation:Enum=Managed;None
type GuestCredentialsPolicy string

const (
	// GuestCredentialsManaged means the provider makes and rotates the credentials (the default).
	GuestCredentialsManaged GuestCredentialsPolicy = "Managed"
	// GuestCredentialsNone means the provider makes none.
	GuestCredentialsNone GuestCredentialsPolicy = "None"
)

// GuestCredentialsManagedByProvider reports whether the provider makes the cluster's guest
// credentials: unless spec.guestCredentials is None (empty is the default, Managed).
func (s *HarvesterClusterSpec) GuestCredentialsManagedByProvider() bool {
	return s.GuestCredentials != GuestCredentialsNone
}

// HarvesterFailureDomain is a failure domain made of the Harvester nodes that carry some labels.
type HarvesterFailureDomain struct {
	// Name of the failure domain, as Machines name it in spec.failureDomain.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// ControlPlane says whether control plane machines may be placed in the failure domain.
	// +optional
	// +kubebuilder:default=true
	ControlPlane *bool `json:"controlPlane,omitempty"`

	// NodeSelector chooses the Harvester nodes of the failure domain by their labels (for
	// example topology.kubernetes.io/zone: zone-a): a VM of the failure domain runs only on nodes
	// that carry all of them.
	// +required
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	NodeSelector map[string]string `json:"nodeSelector"`
}

// HarvesterClusterInitializationStatus is the Cluster API contract's initialization of an
// InfraCluster.
// +kubebuilder:validation:MinProperties=1
type HarvesterClusterInitializationStatus struct {
	// Provisioned is true once the cluster's infrastructure is ready for machines: the
	// ProviderConfig is usable and the control plane endpoint is known. Cluster API then copies
	// spec.controlPlaneEndpoint and status.failureDomains to the Cluster. It is never set back to
	// false.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// HarvesterClusterStatus is what the provider observed of a HarvesterCluster.
type HarvesterClusterStatus struct {
	// Initialization reports when the cluster's infrastructure is provisioned (Cluster API
	// contract).
	// +optional
	Initialization HarvesterClusterInitializationStatus `json:"initialization,omitempty,omitzero"`

	// FailureDomains are spec.failureDomains as the Cluster API contract reports them, each with
	// its node selector as attributes.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []FailureDomain `json:"failureDomains,omitempty"`

	// Conditions: Ready (mirrored by Cluster API into the Cluster's InfrastructureReady; its reason
	// says what the cluster waits for, see conditions.go), Paused (True while the Cluster or the
	// HarvesterCluster is paused) and GuestCredentialsReady (where the tenant's Harvester
	// cloud-config stands; see spec.guestCredentials).
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
// +kubebuilder:resource:path=harvesterclusters,scope=Namespaced,categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']",description="Cluster API Cluster of this HarvesterCluster"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host",description="Control plane endpoint host"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status",description="Ready condition"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// HarvesterCluster is the Harvester infrastructure of a Cluster API Cluster (an InfraCluster of
// the Cluster API contract v1beta2).
type HarvesterCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the cluster's infrastructure.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.providerConfigRef == oldSelf.providerConfigRef",message="spec.providerConfigRef cannot be changed: the cluster's machines stay on the Harvester cluster they were created on; create a new Cluster to move them",fieldPath=".providerConfigRef"
	// +kubebuilder:validation:XValidation:rule="!has(oldSelf.controlPlaneEndpoint) || (has(self.controlPlaneEndpoint) && self.controlPlaneEndpoint == oldSelf.controlPlaneEndpoint)",message="spec.controlPlaneEndpoint cannot be changed or removed once set: the cluster's certificates and kubeconfigs name it",fieldPath=".controlPlaneEndpoint"
	Spec HarvesterClusterSpec `json:"spec"`

	// Status is what the provider observed.
	// +optional
	Status HarvesterClusterStatus `json:"status,omitempty,omitzero"`
}

// +kubebuilder:object:root=true

// HarvesterClusterList is a list of HarvesterClusters.
type HarvesterClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HarvesterCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HarvesterCluster{}, &HarvesterClusterList{})
}

// ProviderConfigKey returns the namespace and name of the cluster's ProviderConfig.
func (c *HarvesterCluster) ProviderConfigKey() (namespace, name string) {
	namespace = c.Spec.ProviderConfigRef.Namespace
	if namespace == "" {
		namespace = c.Namespace
	}
	return namespace, c.Spec.ProviderConfigRef.Name
}

// GetConditions returns the conditions (the getter of Cluster API's condition utilities).
func (c *HarvesterCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions sets the conditions (the setter of Cluster API's condition utilities).
func (c *HarvesterCluster) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

// ContractFailureDomains returns spec.failureDomains as the contract's status.failureDomains:
// controlPlane true unless the spec says false, and the node selector as attributes. It returns
// nil when the spec has none.
func (s *HarvesterClusterSpec) ContractFailureDomains() []FailureDomain {
	if len(s.FailureDomains) == 0 {
		return nil
	}
	out := make([]FailureDomain, 0, len(s.FailureDomains))
	for _, fd := range s.FailureDomains {
		out = append(out, FailureDomain{
			Name:         fd.Name,
			ControlPlane: ptr.To(fd.ControlPlane == nil || *fd.ControlPlane),
			Attributes:   maps.Clone(fd.NodeSelector),
		})
	}
	return out
}

// NodeSelectorFor returns a copy of the node selector of the failure domain named name, and
// whether the spec has one of that name.
func (s *HarvesterClusterSpec) NodeSelectorFor(name string) (map[string]string, bool) {
	for _, fd := range s.FailureDomains {
		if fd.Name == name {
			return maps.Clone(fd.NodeSelector), true
		}
	}
	return nil, false
}

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProviderType is the kind of infrastructure a ProviderConfig describes. This controller
// reconciles only "harvester"; the other blocks are kept so the CRD stays a superset of the
// published schema.
// +kubebuilder:validation:Enum=harvester;nutanix;proxmox;azure;aws;gcp;local
type ProviderType string

// Provider types of the published schema; all but ProviderTypeHarvester are accepted by the CRD
// but ignored by this controller.
const (
	ProviderTypeHarvester ProviderType = "harvester"
	ProviderTypeNutanix   ProviderType = "nutanix"
	ProviderTypeProxmox   ProviderType = "proxmox"
	ProviderTypeAzure     ProviderType = "azure"
	ProviderTypeAWS       ProviderType = "aws"
	ProviderTypeGCP       ProviderType = "gcp"
	ProviderTypeLocal     ProviderType = "local"
)

// ProviderConfigScopeType says who may use a ProviderConfig.
// +kubebuilder:validation:Enum=platform;team
type ProviderConfigScopeType string

// Scopes of the published schema. This provider lets objects of any namespace use a platform
// ProviderConfig, and of a team's namespaces (labelled butler.butlerlabs.dev/team=<team>, as
// Butler labels them) a team's; a ProviderConfig without a scope serves only its own namespace.
const (
	ProviderConfigScopePlatform ProviderConfigScopeType = "platform"
	ProviderConfigScopeTeam     ProviderConfigScopeType = "team"
)

// ProviderConfigSpec says where machines are created and with which credentials.
// +kubebuilder:validation:XValidation:rule="self.provider == 'local' || (has(self.credentialsRef) && size(self.credentialsRef.name) > 0)",message="credentialsRef with a non-empty name is required for all providers except local"
type ProviderConfigSpec struct {
	// Provider is the infrastructure type.
	// +kubebuilder:validation:Required
	Provider ProviderType `json:"provider"`

	// CredentialsRef names the Secret with the provider's credentials. For harvester, the key
	// (default "kubeconfig") holds a self-contained kubeconfig for the Harvester cluster.
	// Required for all providers except "local".
	// +optional
	CredentialsRef *SecretReference `json:"credentialsRef,omitempty"`

	// Harvester configures the harvester provider.
	// +optional
	Harvester *HarvesterProviderConfig `json:"harvester,omitempty"`
	// Nutanix configures the nutanix provider (schema only; not reconciled here).
	// +optional
	Nutanix *NutanixProviderConfig `json:"nutanix,omitempty"`
	// Proxmox configures the proxmox provider (schema only; not reconciled here).
	// +optional
	Proxmox *ProxmoxProviderConfig `json:"proxmox,omitempty"`
	// Azure configures the azure provider (schema only; not reconciled here).
	// +optional
	Azure *AzureProviderConfig `json:"azure,omitempty"`
	// AWS configures the aws provider (schema only; not reconciled here).
	// +optional
	AWS *AWSProviderConfig `json:"aws,omitempty"`
	// GCP configures the gcp provider (schema only; not reconciled here).
	// +optional
	GCP *GCPProviderConfig `json:"gcp,omitempty"`
	// Local configures the local provider (schema only; not reconciled here).
	// +optional
	Local *LocalProviderConfig `json:"local,omitempty"`

	// Scope says who may use this ProviderConfig. This provider lets objects of other namespaces
	// use it when scope.type is "platform", or when it is "team" and their namespace carries the
	// label butler.butlerlabs.dev/team with teamRef's name; without a scope, only its own namespace.
	// +optional
	Scope *ProviderConfigScope `json:"scope,omitempty"`
	// Network is the platform's network configuration (schema only; not used here).
	// +optional
	Network *ProviderNetworkConfig `json:"network,omitempty"`
	// Limits are per-team limits (schema only; not enforced here).
	// +optional
	Limits *ProviderLimits `json:"limits,omitempty"`
}

// HarvesterProviderConfig says where on Harvester machines are created.
type HarvesterProviderConfig struct {
	// Endpoint overrides the API server URL of the credentials' kubeconfig.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// Namespace on Harvester for VMs, disks and cloud-init Secrets.
	// +kubebuilder:default="default"
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// NetworkName is the VM network: "<namespace>/<name>" of a NetworkAttachmentDefinition.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]+/[a-z0-9-]+$`
	NetworkName string `json:"networkName"`

	// ImageName is the default VirtualMachineImage, "<namespace>/<name>", used by
	// MachineRequests without spec.image.
	// +optional
	ImageName string `json:"imageName,omitempty"`

	// StorageClassName is the default storage class of extra disks. Root disks always use the
	// image's storage class, as Harvester requires.
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`
}

// NutanixProviderConfig configures Nutanix (schema only).
type NutanixProviderConfig struct {
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^https?://`
	Endpoint string `json:"endpoint"`
	// +kubebuilder:default=9440
	// +optional
	Port int32 `json:"port,omitempty"`
	// +kubebuilder:default=false
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// +kubebuilder:validation:Required
	ClusterUUID string `json:"clusterUUID"`
	// +kubebuilder:validation:Required
	SubnetUUID string `json:"subnetUUID"`
	// +optional
	ImageUUID string `json:"imageUUID,omitempty"`
	// +optional
	StorageContainerUUID string `json:"storageContainerUUID,omitempty"`
}

// ProxmoxProviderConfig configures Proxmox (schema only).
type ProxmoxProviderConfig struct {
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^https?://`
	Endpoint string `json:"endpoint"`
	// +kubebuilder:default=false
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinItems=1
	Nodes []string `json:"nodes"`
	// +kubebuilder:validation:Required
	Storage string `json:"storage"`
	// TemplateID is the VM template ID to clone.
	// +optional
	TemplateID int32 `json:"templateID,omitempty"`
	// +optional
	VMIDRange *VMIDRange `json:"vmidRange,omitempty"`
}

// VMIDRange is a range of Proxmox VM IDs (schema only).
type VMIDRange struct {
	// +kubebuilder:validation:Minimum=100
	Start int32 `json:"start"`
	// +kubebuilder:validation:Minimum=100
	End int32 `json:"end"`
}

// AzureProviderConfig configures Azure (schema only).
type AzureProviderConfig struct {
	// +kubebuilder:validation:Required
	SubscriptionID string `json:"subscriptionID"`
	// +kubebuilder:validation:Required
	ResourceGroup string `json:"resourceGroup"`
	// +optional
	Location string `json:"location,omitempty"`
	// +optional
	VNetName string `json:"vnetName,omitempty"`
	// +optional
	SubnetName string `json:"subnetName,omitempty"`
	// +optional
	VMSize string `json:"vmSize,omitempty"`
	// +optional
	ImageURN string `json:"imageURN,omitempty"`
}

// AWSProviderConfig configures AWS (schema only).
type AWSProviderConfig struct {
	// +kubebuilder:validation:Required
	Region string `json:"region"`
	// +optional
	VPCID string `json:"vpcID,omitempty"`
	// +optional
	SubnetIDs []string `json:"subnetIDs,omitempty"`
	// +optional
	SecurityGroupIDs []string `json:"securityGroupIDs,omitempty"`
}

// GCPProviderConfig configures GCP (schema only).
type GCPProviderConfig struct {
	// +kubebuilder:validation:Required
	ProjectID string `json:"projectID"`
	// +kubebuilder:validation:Required
	Region string `json:"region"`
	// +optional
	Zone string `json:"zone,omitempty"`
	// +optional
	Network string `json:"network,omitempty"`
	// +optional
	Subnetwork string `json:"subnetwork,omitempty"`
	// +optional
	MachineType string `json:"machineType,omitempty"`
	// +optional
	ImageProject string `json:"imageProject,omitempty"`
	// +optional
	ImageFamily string `json:"imageFamily,omitempty"`
	// +optional
	Image string `json:"image,omitempty"`
	// +optional
	ServiceAccount string `json:"serviceAccount,omitempty"`
	// +optional
	Tags []string `json:"tags,omitempty"`
}

// LocalProviderConfig configures the local provider (schema only).
type LocalProviderConfig struct {
	// +optional
	KindNodeImage string `json:"kindNodeImage,omitempty"`
}

// ProviderConfigScope says who may use a ProviderConfig.
type ProviderConfigScope struct {
	// Type is "platform" (objects of any namespace may use the ProviderConfig) or "team" (those of
	// the team's namespaces).
	// +kubebuilder:default="platform"
	// +optional
	Type ProviderConfigScopeType `json:"type,omitempty"`
	// TeamRef names the team of a "team" ProviderConfig: namespaces labelled
	// butler.butlerlabs.dev/team with its name are the team's.
	// +optional
	TeamRef *LocalObjectReference `json:"teamRef,omitempty"`
}

// ProviderNetworkConfig is the platform's network configuration (schema only).
type ProviderNetworkConfig struct {
	// +kubebuilder:validation:Enum=ipam;cloud
	// +kubebuilder:default="cloud"
	// +optional
	Mode string `json:"mode,omitempty"`
	// +optional
	PoolRefs []PoolReference `json:"poolRefs,omitempty"`
	// +optional
	Subnet string `json:"subnet,omitempty"`
	// +optional
	Gateway string `json:"gateway,omitempty"`
	// +optional
	DNSServers []string `json:"dnsServers,omitempty"`
	// +optional
	TimeServers []string `json:"timeServers,omitempty"`
	// +optional
	LoadBalancer *ProviderLBConfig `json:"loadBalancer,omitempty"`
	// +optional
	QuotaPerTenant *NetworkQuota `json:"quotaPerTenant,omitempty"`
}

// PoolReference names a network pool (schema only).
type PoolReference struct {
	// +kubebuilder:validation:Required
	Name string `json:"name"`
	// +kubebuilder:default=0
	// +optional
	Priority *int32 `json:"priority,omitempty"`
}

// ProviderLBConfig configures load balancer address allocation (schema only).
type ProviderLBConfig struct {
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +optional
	DefaultPoolSize *int32 `json:"defaultPoolSize,omitempty"`
	// +kubebuilder:validation:Enum=static;elastic
	// +kubebuilder:default="static"
	// +optional
	AllocationMode string `json:"allocationMode,omitempty"`
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +optional
	InitialPoolSize *int32 `json:"initialPoolSize,omitempty"`
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +optional
	GrowthIncrement *int32 `json:"growthIncrement,omitempty"`
}

// NetworkQuota limits addresses per tenant (schema only).
type NetworkQuota struct {
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxNodeIPs *int32 `json:"maxNodeIPs,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxLoadBalancerIPs *int32 `json:"maxLoadBalancerIPs,omitempty"`
}

// ProviderLimits are per-team limits (schema only).
type ProviderLimits struct {
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxClustersPerTeam *int32 `json:"maxClustersPerTeam,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxNodesPerTeam *int32 `json:"maxNodesPerTeam,omitempty"`
}

// ProviderConfigStatus is what was observed about a ProviderConfig.
type ProviderConfigStatus struct {
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	Validated bool `json:"validated,omitempty"`
	// +optional
	LastValidationTime *metav1.Time `json:"lastValidationTime,omitempty"`
	// +optional
	ProviderVersion string `json:"providerVersion,omitempty"`
	// +optional
	Ready bool `json:"ready,omitempty"`
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// +optional
	Capacity *ProviderCapacity `json:"capacity,omitempty"`
}

// ProviderCapacity is the provider's spare capacity (schema only).
type ProviderCapacity struct {
	// +optional
	AvailableIPs int32 `json:"availableIPs,omitempty"`
	// +optional
	EstimatedTenants int32 `json:"estimatedTenants,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pc
// +kubebuilder:printcolumn:name="Provider",type="string",JSONPath=".spec.provider",description="Infrastructure provider type"
// +kubebuilder:printcolumn:name="Scope",type="string",JSONPath=".spec.scope.type",description="Visibility scope"
// +kubebuilder:printcolumn:name="Ready",type="boolean",JSONPath=".status.ready",description="Provider ready"
// +kubebuilder:printcolumn:name="Validated",type="boolean",JSONPath=".status.validated",description="Configuration validated"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ProviderConfig describes an infrastructure provider and its credentials.
type ProviderConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProviderConfigSpec   `json:"spec,omitempty"`
	Status ProviderConfigStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ProviderConfigList is a list of ProviderConfigs.
type ProviderConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderConfig `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ProviderConfig{}, &ProviderConfigList{})
}

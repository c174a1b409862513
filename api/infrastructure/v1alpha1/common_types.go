package v1alpha1

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// APIEndpoint is a reachable Kubernetes API server endpoint. It has the JSON shape of Cluster
// API's APIEndpoint (sigs.k8s.io/cluster-api/api/core/v1beta2), defined here so that this package
// does not depend on Cluster API.
// +kubebuilder:validation:MinProperties=1
type APIEndpoint struct {
	// Host is the DNS name or IP address on which the API server is serving.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Host string `json:"host,omitempty"`

	// Port is the port on which the API server is serving; defaults to 6443.
	// +optional
	// +kubebuilder:default=6443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// IsZero reports whether neither host nor port is set.
func (e APIEndpoint) IsZero() bool { return e.Host == "" && e.Port == 0 }

// IsValid reports whether both host and port are set.
func (e APIEndpoint) IsValid() bool { return e.Host != "" && e.Port != 0 }

// String is "host:port" (IPv6 hosts in brackets).
func (e APIEndpoint) String() string {
	return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port)))
}

// MachineAddressType is the type of a machine address, one of the Cluster API contract's.
// +kubebuilder:validation:Enum=Hostname;ExternalIP;InternalIP;ExternalDNS;InternalDNS
type MachineAddressType string

// Machine address types of the Cluster API contract.
const (
	MachineHostName    MachineAddressType = "Hostname"
	MachineExternalIP  MachineAddressType = "ExternalIP"
	MachineInternalIP  MachineAddressType = "InternalIP"
	MachineExternalDNS MachineAddressType = "ExternalDNS"
	MachineInternalDNS MachineAddressType = "InternalDNS"
)

// MachineAddress is an address of a machine. It has the JSON shape of Cluster API's
// MachineAddress (sigs.k8s.io/cluster-api/api/core/v1beta2), defined here so that this package
// does not depend on Cluster API.
type MachineAddress struct {
	// Type is the address type: Hostname, ExternalIP, InternalIP, ExternalDNS or InternalDNS.
	// +required
	Type MachineAddressType `json:"type"`

	// Address is the address.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Address string `json:"address"`
}

// FailureDomain is a failure domain as Cluster API reads it from an InfraCluster's
// status.failureDomains. It has the JSON shape of Cluster API's v1beta2 FailureDomain
// (sigs.k8s.io/cluster-api/api/core/v1beta2), defined here so that this package does not depend
// on Cluster API.
type FailureDomain struct {
	// Name of the failure domain.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// ControlPlane says whether control plane machines may be placed in the failure domain.
	// +optional
	ControlPlane *bool `json:"controlPlane,omitempty"`

	// Attributes are free-form attributes of the failure domain. This provider reports the
	// failure domain's Harvester node selector here.
	// +optional
	Attributes map[string]string `json:"attributes,omitempty"`
}

// ObjectMeta is the metadata a template gives the objects made from it: labels and annotations.
// It has the JSON shape of Cluster API's ObjectMeta (sigs.k8s.io/cluster-api/api/core/v1beta2),
// defined here so that this package does not depend on Cluster API.
// +kubebuilder:validation:MinProperties=1
type ObjectMeta struct {
	// Labels of the objects made from the template.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations of the objects made from the template.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ProviderConfigReference names a Butler ProviderConfig (butler.butlerlabs.dev/v1alpha1) whose
// spec.provider is harvester.
type ProviderConfigReference struct {
	// Name of the ProviderConfig.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Namespace of the ProviderConfig; defaults to the namespace of the referencing object. A
	// ProviderConfig of another namespace may be used only when its spec.scope.type is "platform",
	// as for MachineRequests.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// ProviderIDPrefix starts every provider ID of this provider: "harvester://<VirtualMachine UID>",
// as the MachineRequest's status.providerID and the Harvester cloud provider's node provider IDs.
const ProviderIDPrefix = "harvester://"

// ProviderID is the provider ID of the machine whose VirtualMachine has the UID vmUID.
func ProviderID(vmUID types.UID) string { return ProviderIDPrefix + string(vmUID) }

// VMUIDFromProviderID returns the VirtualMachine UID of a provider ID made by ProviderID.
func VMUIDFromProviderID(providerID string) (types.UID, error) {
	uid, ok := strings.CutPrefix(providerID, ProviderIDPrefix)
	if !ok || uid == "" || strings.Contains(uid, "/") {
		return "", fmt.Errorf("provider ID %q is not of the form %s<VirtualMachine UID>", providerID, ProviderIDPrefix)
	}
	return types.UID(uid), nil
}

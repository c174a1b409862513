package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ImageSyncSpec asks for an image of the Butler Image Factory on a provider.
type ImageSyncSpec struct {
	// FactoryRef names the image in the Butler Image Factory.
	// +kubebuilder:validation:Required
	FactoryRef ImageFactoryRef `json:"factoryRef"`

	// ProviderConfigRef names the ProviderConfig of the provider the image goes to (its
	// harvester.namespace, for Harvester).
	// +kubebuilder:validation:Required
	ProviderConfigRef ProviderReference `json:"providerConfigRef"`

	// Format is the image file format in the factory URL ("qcow2", "raw", "iso").
	// +kubebuilder:default="qcow2"
	// +optional
	Format string `json:"format,omitempty"`

	// TransferMode says who moves the image: "direct", the provider downloads it from the factory
	// URL itself; "proxy", a controller downloads and uploads it (not supported for Harvester).
	// +kubebuilder:validation:Enum=direct;proxy
	// +kubebuilder:default="direct"
	// +optional
	TransferMode string `json:"transferMode,omitempty"`

	// DisplayName names the image on the provider; by default it is derived from the platform,
	// version, architecture and schematic.
	// +optional
	DisplayName string `json:"displayName,omitempty"`
}

// ImageFactoryRef names an image of the Butler Image Factory.
type ImageFactoryRef struct {
	// SchematicID is the schematic's content address (SHA-256 hex).
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=8
	SchematicID string `json:"schematicID"`

	// Version is the OS version, such as "v1.12.4".
	// +kubebuilder:validation:Required
	Version string `json:"version"`

	// Arch is the CPU architecture.
	// +kubebuilder:validation:Enum=amd64;arm64
	// +kubebuilder:default="amd64"
	// +optional
	Arch string `json:"arch,omitempty"`

	// Platform is the factory's platform, such as "nocloud" (KubeVirt and cloud-init, Harvester's
	// choice), "metal" or "vmware".
	// +kubebuilder:default="nocloud"
	// +optional
	Platform string `json:"platform,omitempty"`
}

// ImageSyncPhase is the lifecycle phase of an ImageSync.
// +kubebuilder:validation:Enum=Pending;Building;Downloading;Uploading;Ready;Failed
type ImageSyncPhase string

// Phases of an ImageSync, as in the published butler-api enum. Harvester downloads images itself,
// so this provider uses Pending, Downloading, Ready and Failed.
const (
	// ImageSyncPhasePending: accepted; the image is not on the provider yet.
	ImageSyncPhasePending ImageSyncPhase = "Pending"
	// ImageSyncPhaseBuilding: the factory builds the image (not used for Harvester).
	ImageSyncPhaseBuilding ImageSyncPhase = "Building"
	// ImageSyncPhaseDownloading: the provider downloads the image from the factory.
	ImageSyncPhaseDownloading ImageSyncPhase = "Downloading"
	// ImageSyncPhaseUploading: a controller uploads the image (not used for Harvester).
	ImageSyncPhaseUploading ImageSyncPhase = "Uploading"
	// ImageSyncPhaseReady: the image is on the provider; status.providerImageRef names it.
	ImageSyncPhaseReady ImageSyncPhase = "Ready"
	// ImageSyncPhaseFailed: the sync cannot succeed as asked; failureReason and failureMessage
	// say why.
	ImageSyncPhaseFailed ImageSyncPhase = "Failed"
)

// Transfer modes of an ImageSync.
const (
	TransferModeDirect = "direct"
	TransferModeProxy  = "proxy"
)

// ImageSyncStatus is what the provider observed.
type ImageSyncStatus struct {
	// Phase is the lifecycle phase.
	// +optional
	Phase ImageSyncPhase `json:"phase,omitempty"`

	// Conditions are Ready and Progressing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ProviderImageRef names the image on the provider once Ready; for Harvester
	// "<namespace>/<name>" of a VirtualMachineImage, usable as a MachineRequest's spec.image.
	// +optional
	ProviderImageRef string `json:"providerImageRef,omitempty"`

	// ArtifactURL is the factory URL the image is downloaded from.
	// +optional
	ArtifactURL string `json:"artifactURL,omitempty"`

	// ArtifactSHA256 is the artifact's verified checksum (not set for Harvester, which downloads
	// the image itself).
	// +optional
	ArtifactSHA256 string `json:"artifactSHA256,omitempty"`

	// ProviderTaskID tracks an asynchronous task of the provider (not used for Harvester).
	// +optional
	ProviderTaskID string `json:"providerTaskID,omitempty"`

	// FailureReason is set when Phase is Failed: one of the ImageSync reasons of this package.
	// +optional
	FailureReason string `json:"failureReason,omitempty"`

	// FailureMessage says what failed and how to fix it.
	// +optional
	FailureMessage string `json:"failureMessage,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// LastUpdated is when the phase last changed.
	// +optional
	LastUpdated *metav1.Time `json:"lastUpdated,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=is
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase",description="Sync phase"
// +kubebuilder:printcolumn:name="Schematic",type="string",JSONPath=".spec.factoryRef.schematicID",description="Schematic ID",priority=1
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".spec.factoryRef.version",description="OS version"
// +kubebuilder:printcolumn:name="Provider",type="string",JSONPath=".spec.providerConfigRef.name",description="Target provider"
// +kubebuilder:printcolumn:name="Image Ref",type="string",JSONPath=".status.providerImageRef",description="Provider image reference"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// ImageSync asks for an image of the Butler Image Factory on a provider. The Butler bootstrap
// creates one, waits for it to be Ready and gives its status.providerImageRef to every
// MachineRequest as spec.image.
type ImageSync struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ImageSyncSpec   `json:"spec,omitempty"`
	Status ImageSyncStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ImageSyncList is a list of ImageSyncs.
type ImageSyncList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageSync `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ImageSync{}, &ImageSyncList{})
}

// ProviderConfigKey returns the namespace and name of the referenced ProviderConfig.
func (s *ImageSync) ProviderConfigKey() (namespace, name string) {
	namespace = s.Spec.ProviderConfigRef.Namespace
	if namespace == "" {
		namespace = s.Namespace
	}
	return namespace, s.Spec.ProviderConfigRef.Name
}

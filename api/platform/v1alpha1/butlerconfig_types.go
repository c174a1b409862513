package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ButlerConfigName is the name of the one ButlerConfig of a Butler installation.
const ButlerConfigName = "butler"

// ButlerConfigSpec is the part of Butler's platform configuration this provider reads; the schema
// keeps the rest as it is.
type ButlerConfigSpec struct {
	// ImageFactory configures the Butler Image Factory, which ImageSyncs download from.
	// +optional
	ImageFactory *ImageFactoryConfig `json:"imageFactory,omitempty"`
}

// ImageFactoryConfig is the Butler Image Factory's connection.
type ImageFactoryConfig struct {
	// URL is the factory's base URL.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`

	// CredentialsRef names the Secret with the factory's API key (not needed to download).
	// +optional
	CredentialsRef *SecretReference `json:"credentialsRef,omitempty"`

	// DefaultSchematicID is the schematic used when a cluster names none.
	// +optional
	DefaultSchematicID string `json:"defaultSchematicID,omitempty"`

	// AutoSync lets Butler create ImageSyncs by itself.
	// +kubebuilder:default=true
	// +optional
	AutoSync *bool `json:"autoSync,omitempty"`
}

// SecretReference names a key of a Secret.
type SecretReference struct {
	// +kubebuilder:validation:Required
	Name string `json:"name"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Key string `json:"key,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=bc

// ButlerConfig is Butler's platform configuration, one per installation, named "butler". This
// provider reads its spec.imageFactory and never writes it.
type ButlerConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:pruning:PreserveUnknownFields
	Spec ButlerConfigSpec `json:"spec,omitempty"`
}

// +kubebuilder:object:root=true

// ButlerConfigList is a list of ButlerConfigs.
type ButlerConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ButlerConfig `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ButlerConfig{}, &ButlerConfigList{})
}

// FactoryURL returns the Image Factory's URL, "" if none is configured.
func (c *ButlerConfig) FactoryURL() string {
	if c.Spec.ImageFactory == nil {
		return ""
	}
	return c.Spec.ImageFactory.URL
}

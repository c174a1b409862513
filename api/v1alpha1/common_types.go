package v1alpha1

// ProviderReference names a ProviderConfig.
type ProviderReference struct {
	// Name of the ProviderConfig.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Namespace of the ProviderConfig; defaults to the namespace of the referencing object.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// SecretReference names a key of a Secret.
type SecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Namespace of the Secret; defaults to the namespace of the referencing object.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Key of the Secret's data that holds the credentials. For harvester it defaults to
	// "kubeconfig" (DefaultCredentialsKey).
	// +optional
	Key string `json:"key,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the object.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// DefaultCredentialsKey is the Secret key that holds the Harvester kubeconfig when
// credentialsRef.key is empty.
const DefaultCredentialsKey = "kubeconfig"

// Package v1alpha1 holds the butler.butlerlabs.dev/v1alpha1 kinds this provider reconciles,
// MachineRequest and ProviderConfig, wire-compatible with the published butler-api schema: the same
// group, kinds, JSON names, enums, defaults, short names and printer columns. Fields and validations
// that the published schema lacks are additive and documented on the field.
// +kubebuilder:object:generate=true
// +groupName=butler.butlerlabs.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the butler API.
	GroupVersion = schema.GroupVersion{Group: "butler.butlerlabs.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // deprecated only to trim API packages' dependencies; kubebuilder still generates it and the published butler-api uses it, so this package stays a drop-in match

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

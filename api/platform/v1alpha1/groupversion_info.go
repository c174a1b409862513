// Package v1alpha1 holds the kinds of the Butler platform that this provider only reads:
// ButlerConfig, of which it uses spec.imageFactory. The kinds belong to Butler, which installs
// their CRDs; the CRD generated from this package (config/crd/platform) is a reduced schema that
// keeps every other field, for tests and the demo only. Neither the chart nor config/default
// installs it.
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
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // as in api/v1alpha1

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

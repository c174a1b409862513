package machinerequest

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// Installed MachineRequest schemas, as InstalledSchema reports them.
const (
	// SchemaProject is the project's own CRD (it has status.placement).
	SchemaProject = "project"
	// SchemaButler is Butler's published CRD (butler-api), which the Butler CLI installs before
	// any provider: it has none of the project's additions, and prunes them on every write.
	SchemaButler = "butler"
)

// InstalledSchema says which MachineRequest schema the API server serves, read from its OpenAPI
// v3 document (which every authenticated client may read): the project's own, or Butler's. The
// provider records everything it must find again (its finalizer, the placement annotation,
// status.providerID) where both keep it, so it works the same on either; the answer is logged so
// that an operator knows which fields to expect.
func InstalledSchema(cfg *rest.Config) (string, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	paths, err := dc.OpenAPIV3().Paths()
	if err != nil {
		return "", fmt.Errorf("read the API server's OpenAPI v3 paths: %w", err)
	}
	gv := "apis/" + v1alpha1.GroupVersion.Group + "/" + v1alpha1.GroupVersion.Version
	path, ok := paths[gv]
	if !ok {
		return "", fmt.Errorf("the API server serves no %s: are the CRDs installed?", v1alpha1.GroupVersion)
	}
	data, err := path.Schema("application/json")
	if err != nil {
		return "", fmt.Errorf("read the OpenAPI v3 schema of %s: %w", v1alpha1.GroupVersion, err)
	}
	return schemaOf(data)
}

// schemaOf finds the MachineRequest in an OpenAPI v3 document and tells the schemas apart by the
// field only the project's has.
func schemaOf(document []byte) (string, error) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Properties map[string]json.RawMessage `json:"properties"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(document, &doc); err != nil {
		return "", fmt.Errorf("decode the OpenAPI v3 schema: %w", err)
	}
	for name, s := range doc.Components.Schemas {
		if !strings.HasSuffix(name, "."+v1alpha1.GroupVersion.Version+".MachineRequest") {
			continue
		}
		if _, ok := s.Properties["status"].Properties["placement"]; ok {
			return SchemaProject, nil
		}
		return SchemaButler, nil
	}
	return "", fmt.Errorf("the OpenAPI v3 schema of %s has no MachineRequest", v1alpha1.GroupVersion)
}

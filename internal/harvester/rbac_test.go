package harvester

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// The documented Harvester RBAC (config/harvester/rbac.yaml) grants exactly RequiredPermissions,
// CDIPermissions and OptionalPermissions: what the provider uses, nothing it does not.
func TestDocumentedHarvesterRBACIsRequiredPermissions(t *testing.T) {
	data, err := os.ReadFile("../../config/harvester/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var granted []string
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj struct {
			Kind     string
			Metadata struct{ Namespace string }
			Rules    []rbacv1.PolicyRule
		}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "Role" && obj.Kind != "ClusterRole" {
			continue
		}
		for _, r := range obj.Rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						p := Permission{Verb: v, Group: g, Resource: res, Namespace: obj.Metadata.Namespace}
						if len(r.ResourceNames) == 0 {
							granted = append(granted, p.String())
						}
						for _, name := range r.ResourceNames {
							p.Name = name
							granted = append(granted, p.String())
						}
					}
				}
			}
		}
	}
	var required []string
	for _, p := range slices.Concat(RequiredPermissions("default", "default", "default"), CDIPermissions("default"), OptionalPermissions("default")) {
		required = append(required, p.String())
	}
	slices.Sort(granted)
	slices.Sort(required)
	if !slices.Equal(granted, required) {
		t.Errorf("config/harvester/rbac.yaml grants\n  %v\nbut the provider requires\n  %v", granted, required)
	}
}

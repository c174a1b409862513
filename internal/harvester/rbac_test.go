package harvester

import (
	"slices"
	"testing"
)

// The documented Harvester RBAC (config/harvester/rbac.yaml) grants exactly RequiredPermissions,
// CDIPermissions, OptionalPermissions and OwnershipPermissions: what the provider uses, nothing it
// does not.
func TestDocumentedHarvesterRBACIsRequiredPermissions(t *testing.T) {
	granted := grantedBy(t, "../../config/harvester/rbac.yaml")
	var required []string
	for _, p := range slices.Concat(RequiredPermissions("default", "default", "default"), CDIPermissions("default"), OptionalPermissions("default"), OwnershipPermissions("default")) {
		required = append(required, p.String())
	}
	slices.Sort(granted)
	slices.Sort(required)
	if !slices.Equal(granted, required) {
		t.Errorf("config/harvester/rbac.yaml grants\n  %v\nbut the provider requires\n  %v", granted, required)
	}
}

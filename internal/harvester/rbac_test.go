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

// The opt-in config/harvester/device-rbac.yaml grants exactly DevicePermissions: what the device
// check reads, nothing it does not, and nothing rbac.yaml grants already.
func TestDocumentedDeviceRBACIsDevicePermissions(t *testing.T) {
	granted := grantedBy(t, "../../config/harvester/device-rbac.yaml")
	main := grantedBy(t, "../../config/harvester/rbac.yaml")
	var want []string
	for _, p := range DevicePermissions() {
		if slices.Contains(main, p.String()) {
			t.Errorf("rbac.yaml grants %s already: the device check would need no opt-in for it", p)
		}
		want = append(want, p.String())
	}
	slices.Sort(granted)
	slices.Sort(want)
	if !slices.Equal(granted, want) {
		t.Errorf("config/harvester/device-rbac.yaml grants\n  %v\nbut DevicePermissions is\n  %v", granted, want)
	}
}

// Package layering is the table of which of the provider's packages (api/..., internal/...,
// cmd/...) may import which of them: the one statement of its layers. Its test holds the code to
// it (go list, every import the table does not allow named), and hack/layering-docs draws it into
// docs/architecture.md (make api-docs), where the test also fails if the drawing is stale. The
// test harness under test/ and the tools under hack/ may import what they need.
package layering

import (
	"fmt"
	"slices"
)

// Module is the module path the table's package paths are relative to.
const Module = "github.com/butlerdotdev/butler-provider-harvester"

// Package is a package of the module (its path in the module), what it is in a few words, and
// the packages of the module it may import.
type Package struct {
	Path, What string
	MayImport  []string
}

// Table is the module's packages with what each may import.
type Table []Package

// Packages is the provider's layering. Calls only go down: the manager's command, the one place
// that builds the controllers, the front doors and controllers, the small packages they share
// (each with one job), the engine, and the API packages, which import nothing of the module. A new import between the module's
// packages is a row changed here, which the diagram in docs/architecture.md then shows.
var Packages = Table{
	{"cmd/manager", "the manager: flags, probes, metrics", []string{
		"api/infrastructure/v1alpha1", "api/platform/v1alpha1", "api/v1alpha1", "internal/clustercache",
		"internal/controller/harvesterevents", "internal/controller/machinerequest", "internal/controller/setup",
		"internal/harvester", "internal/metrics", "internal/options",
	}},
	{"internal/controller/setup", "builds and registers every controller", []string{
		"internal/controller/clusterapi", "internal/controller/harvesterevents", "internal/controller/imagesync",
		"internal/controller/machinerequest", "internal/controller/providerconfig", "internal/harvester",
		"internal/options",
	}},
	{"internal/controller/machinerequest", "the MachineRequest door", []string{
		"api/reasons", "api/v1alpha1", "internal/controller/harvesterevents", "internal/controller/management",
		"internal/controller/objmeta", "internal/controller/outcome", "internal/controller/providerconfig",
		"internal/controller/requeue", "internal/controller/target", "internal/errkind", "internal/harvester",
		"internal/metrics", "internal/objstatus", "internal/options",
	}},
	{"internal/controller/clusterapi", "the Cluster API door", []string{
		"api/infrastructure/v1alpha1", "api/reasons", "api/v1alpha1", "internal/controller/harvesterevents",
		"internal/controller/management", "internal/controller/objmeta", "internal/controller/outcome",
		"internal/controller/providerconfig", "internal/controller/requeue", "internal/controller/target",
		"internal/errkind", "internal/harvester", "internal/objstatus", "internal/options",
	}},
	{"internal/controller/imagesync", "ImageSync → VirtualMachineImage", []string{
		"api/platform/v1alpha1", "api/v1alpha1", "internal/controller/harvesterevents",
		"internal/controller/management", "internal/controller/objmeta", "internal/controller/outcome",
		"internal/controller/providerconfig", "internal/controller/requeue", "internal/controller/target",
		"internal/errkind", "internal/harvester", "internal/imagefactory", "internal/objstatus", "internal/options",
	}},
	{"internal/controller/providerconfig", "ProviderConfig checks (preflight)", []string{
		"api/v1alpha1", "internal/controller/outcome", "internal/controller/requeue", "internal/controller/target",
		"internal/errkind", "internal/harvester", "internal/objstatus", "internal/options",
	}},
	{"internal/controller/target", "a ProviderConfig reference → its Harvester target; who may use it", []string{
		"api/v1alpha1", "internal/controller/requeue", "internal/errkind", "internal/harvester", "internal/objstatus",
	}},
	{"internal/controller/objmeta", "finalizers, annotations, the placement record; which updates wake", []string{
		"api/v1alpha1", "internal/controller/requeue", "internal/errkind", "internal/harvester", "internal/objstatus",
	}},
	{"internal/controller/outcome", "the engine's outcomes as the APIs' reasons and conditions", []string{
		"api/infrastructure/v1alpha1", "api/reasons", "api/v1alpha1", "internal/errkind", "internal/harvester",
		"internal/objstatus",
	}},
	{"internal/controller/harvesterevents", "Harvester's changes → the owners' work queues", []string{"internal/harvester"}},
	{"internal/controller/management", "the management cluster: its identity, the kinds it serves", nil},
	{"internal/controller/requeue", "poll intervals, retries, reconcile timeout, deletion stalls", []string{
		"internal/harvester", "internal/objstatus",
	}},
	{"internal/options", "the manager's flags, names and defaults", []string{"internal/clustercache"}},
	{"internal/imagefactory", "the Butler Image Factory's URLs and names", []string{"api/v1alpha1"}},
	{"internal/harvester", "the engine", []string{"api/reasons", "internal/clustercache", "internal/errkind", "internal/metrics"}},
	{"internal/clustercache", "a client, cache and identity per Harvester cluster", []string{"internal/metrics"}},
	{"internal/metrics", "the provider's metrics", []string{"api/v1alpha1"}},
	{"internal/errkind", "the error kinds: a wait, a permanent failure; the engine's words translated once", nil},
	{"internal/objstatus", "status, conditions, events, a reconcile's outcome", []string{"internal/errkind"}},
	{"internal/apiconsts", "an API file's documented constants, for tests and reasons-docs", []string{"internal/objstatus"}},
	{"internal/layering", "this table, for its test and layering-docs", nil},
	{"api/v1alpha1", "MachineRequest, ProviderConfig, ImageSync", []string{"api/reasons"}},
	{"api/infrastructure/v1alpha1", "HarvesterCluster, HarvesterMachine", []string{"api/reasons"}},
	{"api/platform/v1alpha1", "ButlerConfig, read only", nil},
	{"api/reasons", "every reason, declared once, with its behaviour", nil},
}

// Check compares the module's imports (each package of the module by its path in the module,
// with the packages of the module it imports) with the table, and says what does not fit: an
// import the table does not allow, a package without a row, a row for a package that is gone.
func (t Table) Check(imports map[string][]string) []string {
	var problems []string
	for _, pkg := range sortedKeys(imports) {
		row, ok := t.row(pkg)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has no row in the table (internal/layering): add one with what it may import", pkg))
			continue
		}
		for _, imp := range imports[pkg] {
			if !slices.Contains(row.MayImport, imp) {
				problems = append(problems, fmt.Sprintf("%s imports %s, which the table (internal/layering) does not allow", pkg, imp))
			}
		}
	}
	for _, p := range t {
		if _, ok := imports[p.Path]; !ok {
			problems = append(problems, fmt.Sprintf("the table (internal/layering) has a row for %s, which no longer exists", p.Path))
		}
	}
	return problems
}

// row is the table's row of the package at path.
func (t Table) row(path string) (Package, bool) {
	i := slices.IndexFunc(t, func(p Package) bool { return p.Path == path })
	if i < 0 {
		return Package{}, false
	}
	return t[i], true
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

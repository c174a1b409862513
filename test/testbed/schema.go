package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ButlerSchemas are the sets of Butler's published CRDs the management cluster can have instead of
// the project's, as test/testdata/butler-crds holds them (test/testdata/butler-crds/SOURCE.md
// says where each comes from). The Butler CLI installs its own CRDs before any provider, and
// Helm never replaces a CRD that exists: on such a cluster the provider works with Butler's
// MachineRequest schema, which prunes every status field it does not know.
// butler-cli has no ImageSync CRD (the CLI installs none): the manager runs without its ImageSync
// controller there.
var ButlerSchemas = []string{"butler-api-v0.13.0", "butler-api-main", "butler-cli"}

// CRDDirectories returns the directories of the CRDs the management cluster gets: the project's
// own (config/crd/bases, and Butler's ButlerConfig reduced to what the provider reads, in
// config/crd/platform) when schema is "", else those of one of ButlerSchemas.
func CRDDirectories(repoRoot, schema string) ([]string, error) {
	if schema == "" || schema == "project" {
		return []string{filepath.Join(repoRoot, "config", "crd", "bases"), filepath.Join(repoRoot, "config", "crd", "platform")}, nil
	}
	dir := filepath.Join(repoRoot, "test", "testdata", "butler-crds", schema)
	if _, err := os.Stat(filepath.Join(dir, "butler.butlerlabs.dev_machinerequests.yaml")); err != nil {
		return nil, fmt.Errorf("CRD schema %q: %w (choose one of: project, %s)", schema, err, strings.Join(ButlerSchemas, ", "))
	}
	return []string{dir}, nil
}

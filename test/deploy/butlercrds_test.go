package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// butlerAPI is the published butler-api release whose CRDs test/testdata/butler-crds/butler-api-v0.13.0
// holds (the integration tests and make test-chaos run on them).
const butlerAPI = "github.com/butlerdotdev/butler-api@v0.13.0"

// The copies of Butler's CRDs the tests run on are the module's own, byte for byte, as the module
// proxy serves them (cached by Go).
func TestButlerCRDFixturesMatchTheModule(t *testing.T) {
	cmd := exec.Command("go", "mod", "download", "-json", butlerAPI)
	cmd.Dir = t.TempDir() // outside this module: nothing is added to go.mod or go.sum
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", butlerAPI, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s printed %s", butlerAPI, out)
	}
	fixtures := filepath.Join(repoRoot(), "test", "testdata", "butler-crds", "butler-api-v0.13.0")
	files, err := filepath.Glob(filepath.Join(fixtures, "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("%d CRD fixtures (%v), want MachineRequest, ProviderConfig, ImageSync and ButlerConfig", len(files), err)
	}
	for _, f := range files {
		want, err := os.ReadFile(filepath.Join(mod.Dir, "config", "crd", "bases", filepath.Base(f)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s's", f, butlerAPI)
		}
	}
}

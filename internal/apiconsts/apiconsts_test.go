package apiconsts

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadTellsDocumentedConstants(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.go")
	src := `package p

// Single is documented by its group.
const Single = "single"

const (
	// Documented means something.
	ReasonDocumented = "Documented"
	ReasonBare       = "Bare"
	Other            = "other"
	NotAString       = 3
)
`
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Read(file, "Reason")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Constant{"ReasonDocumented": {"Documented", true}, "ReasonBare": {"Bare", false}}
	if len(got) != len(want) || got["ReasonDocumented"] != want["ReasonDocumented"] || got["ReasonBare"] != want["ReasonBare"] {
		t.Fatalf("Read = %v, want %v", got, want)
	}
	if single, _ := Read(file, "Single"); !single["Single"].Documented {
		t.Errorf("a constant alone in a documented group is documented: %v", single)
	}
	if v := Values(got, true); !v["Documented"] || v["Bare"] {
		t.Errorf("Values(documented) = %v", v)
	}
}

// A constant named after another package's constant of the module has that constant's value.
func TestReadResolvesTheModulesConstants(t *testing.T) {
	got, err := Read("../../api/v1alpha1/conditions.go", "Reason")
	if err != nil {
		t.Fatal(err)
	}
	if c := got["ReasonQuotaExceeded"]; c.Value != "QuotaExceeded" || !c.Documented {
		t.Fatalf("ReasonQuotaExceeded = %+v, want the value of reasons.QuotaExceeded", c)
	}
	groups, err := Groups("../../api/infrastructure/v1alpha1/conditions.go", "Reason")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups {
		for _, c := range g.Constants {
			found = found || c.Name == "ReasonVMProvisioning" && c.Value == "VMProvisioning"
		}
	}
	if !found {
		t.Fatalf("Groups did not resolve ReasonVMProvisioning: %+v", groups)
	}
}

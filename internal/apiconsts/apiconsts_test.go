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

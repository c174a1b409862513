package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeAPI writes a conditions.go into both API packages of a repository rooted at a temporary
// directory, and returns the root.
func writeAPI(t *testing.T, src string) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range packages {
		dir := filepath.Join(root, p.dir)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "conditions.go"), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestRenderListsEveryReasonWithItsMeaning(t *testing.T) {
	root := writeAPI(t, `package v1alpha1

// Reasons of the Ready condition.
const (
	// ReasonDiskInUse: a disk | another VM uses.
	ReasonDiskInUse = "DiskInUse"
	// ConditionReady is True while the machine runs.
	ConditionReady = "Ready"
	// AnnotationRetry is no condition.
	AnnotationRetry = "retry"
)
`)
	doc, err := render(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Reasons of the Ready condition.",
		"| `DiskInUse` | `ReasonDiskInUse` | attention | a disk \\| another VM uses. |",
		"| `Ready` | `ConditionReady` |  | is True while the machine runs. |",
		"| attention | someone must act",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the reference lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "AnnotationRetry") {
		t.Errorf("the reference lists a constant that is neither a condition nor a reason:\n%s", doc)
	}
}

func TestRenderRefusesAReasonWithoutMeaning(t *testing.T) {
	root := writeAPI(t, `package v1alpha1

const (
	// ReasonDocumented means something.
	ReasonDocumented = "Documented"
	ReasonSilent     = "Silent"
)
`)
	if _, err := render(root); err == nil || !strings.Contains(err.Error(), "ReasonSilent has no comment") {
		t.Fatalf("render = %v, want it to name ReasonSilent", err)
	}
}

func TestRenderRefusesAReasonWithoutBehaviour(t *testing.T) {
	root := writeAPI(t, `package v1alpha1

const (
	// ReasonUnheardOf means something.
	ReasonUnheardOf = "UnheardOf"
)
`)
	if _, err := render(root); err == nil || !strings.Contains(err.Error(), "ReasonUnheardOf (\"UnheardOf\") has no behaviour") {
		t.Fatalf("render = %v, want it to name ReasonUnheardOf", err)
	}
}

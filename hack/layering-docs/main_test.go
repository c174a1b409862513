package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/butlerdotdev/butler-provider-harvester/internal/layering"
)

func TestUpdateDrawsTheTableBetweenTheMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "architecture.md")
	doc := "# Architecture\n\n" + layering.Begin + "\n" + layering.End + "\n\nCalls only go down.\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := update(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Architecture\n\n" + layering.Packages.Section() + "\n\nCalls only go down.\n"
	if string(data) != want {
		t.Errorf("update wrote\n%s\nwant\n%s", data, want)
	}
}

func TestUpdateRefusesADocumentWithoutMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "architecture.md")
	if err := os.WriteFile(path, []byte("# Architecture\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := update(path); err == nil || !strings.Contains(err.Error(), layering.Begin) {
		t.Fatalf("update = %v, want it to name the missing markers", err)
	}
}

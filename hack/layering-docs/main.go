// Command layering-docs draws the provider's layering, the table of internal/layering (which of
// its packages may import which), as a Mermaid flowchart into docs/architecture.md, between the
// markers <!-- layering:begin --> and <!-- layering:end -->; the prose around them is kept. make
// api-docs runs it, and internal/layering's test fails when the drawing is stale.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/butlerdotdev/butler-provider-harvester/internal/layering"
)

func main() {
	doc := flag.String("doc", "docs/architecture.md", "The Markdown file whose marked section is the diagram.")
	repo := flag.String("repo", ".", "The repository's root.")
	flag.Parse()
	if err := update(filepath.Join(*repo, *doc)); err != nil {
		fmt.Fprintln(os.Stderr, "layering-docs:", err)
		os.Exit(1)
	}
}

// update writes the table's diagram into the file's marked section.
func update(path string) error {
	data, err := os.ReadFile(path) //nolint:gosec // G304: the repository's own document, named by the flag of whoever runs make api-docs
	if err != nil {
		return err
	}
	doc, err := layering.Packages.WithSection(string(data))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(doc), 0o644) //nolint:gosec // G703: the same document, written back
}

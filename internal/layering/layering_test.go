package layering

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// listFormat is the go list template of a package's imports: "path: import import ...".
const listFormat = "{{.ImportPath}}: {{join .Imports \" \"}}"

// Every import between the module's packages is one the table allows, every package has its row,
// and every row a package.
func TestImportsFollowTheTable(t *testing.T) {
	for _, problem := range Packages.Check(moduleImports(t)) {
		t.Error(problem)
	}
}

// docs/architecture.md draws the table as hack/layering-docs does.
func TestArchitectureDocDrawsTheTable(t *testing.T) {
	const path = "../../docs/architecture.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Packages.WithSection(string(data))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if string(data) != want {
		t.Errorf("%s: the package diagram is not the table's: run make api-docs (hack/layering-docs) and commit it", path)
	}
}

// The table names each package once, allows imports of packages it has rows for, and draws
// each package in a box.
func TestTableIsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Packages {
		if seen[p.Path] {
			t.Errorf("%s has two rows", p.Path)
		}
		seen[p.Path] = true
		if groupOf(p.Path) == "" {
			t.Errorf("%s is in none of the diagram's boxes %q", p.Path, groups)
		}
		if strings.Contains(p.What, `"`) {
			t.Errorf("%s: a quote would end its label in the diagram: %q", p.Path, p.What)
		}
		for _, imp := range p.MayImport {
			if _, ok := Packages.row(imp); !ok || imp == p.Path {
				t.Errorf("%s may import %s, which has no row of its own", p.Path, imp)
			}
		}
	}
}

func TestCheckNamesWhatDoesNotFit(t *testing.T) {
	table := Table{
		{"internal/a", "a", []string{"internal/b"}},
		{"internal/b", "b", nil},
		{"internal/gone", "gone", nil},
	}
	got := table.Check(map[string][]string{
		"internal/a":   {"internal/b"},
		"internal/b":   {"internal/a"},
		"internal/new": nil,
	})
	want := []string{
		"internal/b imports internal/a, which the table (internal/layering) does not allow",
		"internal/new has no row in the table (internal/layering): add one with what it may import",
		"the table (internal/layering) has a row for internal/gone, which no longer exists",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Check =\n%q\nwant\n%q", got, want)
	}
}

func TestWithSectionKeepsTheProse(t *testing.T) {
	table := Table{{"cmd/x", "x", []string{"api/y"}}, {"api/y", "y", nil}}
	doc := "# Title\n\nBefore.\n\n" + Begin + "\nold drawing\n" + End + "\n\nAfter.\n"
	got, err := table.WithSection(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "# Title\n\nBefore.\n\n"+Begin+"\n") || !strings.HasSuffix(got, End+"\n\nAfter.\n") ||
		strings.Contains(got, "old drawing") || !strings.Contains(got, "  cmd_x --> api_y\n") ||
		!strings.Contains(got, `cmd_x["cmd/x<br/><i>x</i>"]`) {
		t.Errorf("WithSection =\n%s", got)
	}
	if again, err := table.WithSection(got); err != nil || again != got {
		t.Errorf("WithSection of its own output changed it (%v):\n%s", err, again)
	}
	for _, bad := range []string{"no markers", End + "\n" + Begin, Begin + Begin + End} {
		if _, err := table.WithSection(bad); err == nil {
			t.Errorf("WithSection(%q) wants to fail", bad)
		}
	}
}

// moduleImports are the imports between the module's packages under api/, internal/ and cmd/,
// by their paths in the module, as go list reports them.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", listFormat, Module+"/api/...", Module+"/internal/...", Module+"/cmd/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	imports := map[string][]string{}
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		pkg, deps, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			t.Fatalf("go list printed %q, not %q", line, listFormat)
		}
		var own []string
		for _, dep := range strings.Fields(deps) {
			if rel, ok := strings.CutPrefix(dep, Module+"/"); ok {
				own = append(own, rel)
			}
		}
		imports[strings.TrimPrefix(pkg, Module+"/")] = own
	}
	return imports
}

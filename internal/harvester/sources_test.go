package harvester

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// engineSource is one of the package's Go files, parsed.
type engineSource struct {
	name string
	file *ast.File
}

// engineSources parses the package's Go files but its tests, in the order of their names: the
// tests that hold the engine's code to a rule read it as the compiler does.
func engineSources(t *testing.T) []engineSource {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var sources []engineSource
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, engineSource{name: name, file: f})
	}
	return sources
}

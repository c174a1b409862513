// Package apiconsts reads the documented string constants of an API package's Go file, for the
// tests that hold the front doors to what their APIs declare (reasons, condition types), and for
// hack/reasons-docs. A constant's value is a string literal, or a constant of another package of
// the module that the file imports (an API package names api/reasons' reasons: ReasonX =
// reasons.X), read from that package's files.
package apiconsts

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// Constant is a string constant of an API file.
type Constant struct {
	Value string
	// Documented is true when a comment says what the constant means (on the constant or on its
	// group).
	Documented bool
}

// Read returns the string constants of the Go file whose names start with prefix, by name.
func Read(file, prefix string) (map[string]Constant, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	values := valuesOf(file, f)
	out := map[string]Constant{}
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			documented := v.Doc != nil || (len(g.Specs) == 1 && g.Doc != nil)
			for i, name := range v.Names {
				if !strings.HasPrefix(name.Name, prefix) || i >= len(v.Values) {
					continue
				}
				value, ok, err := values(v.Values[i])
				if err != nil {
					return nil, err
				}
				if ok {
					out[name.Name] = Constant{Value: value, Documented: documented}
				}
			}
		}
	}
	return out, nil
}

// Values returns the values of the constants, the documented ones only if documented is true.
func Values(consts map[string]Constant, documented bool) map[string]bool {
	out := map[string]bool{}
	for _, c := range consts {
		if c.Documented || !documented {
			out[c.Value] = true
		}
	}
	return out
}

// RequireConditions fails t unless the condition types of c are documented Condition* constants
// of the API file, and its AsExpected a documented Reason* constant.
func RequireConditions(t testing.TB, file string, c objstatus.Conditions) {
	t.Helper()
	conditions, err := Read(file, "Condition")
	if err != nil {
		t.Fatal(err)
	}
	reasons, err := Read(file, "Reason")
	if err != nil {
		t.Fatal(err)
	}
	declared, documentedReasons := Values(conditions, true), Values(reasons, true)
	for _, condType := range []string{c.Ready, c.Progressing, c.Degraded} {
		if condType == "" || !declared[condType] {
			t.Errorf("condition type %q is not a documented Condition* constant of %s", condType, file)
		}
	}
	if c.AsExpected == "" || !documentedReasons[c.AsExpected] {
		t.Errorf("reason %q of Degraded=False is not a documented Reason* constant of %s", c.AsExpected, file)
	}
}

// Group is a const block of an API file whose names start with a prefix, in the order written.
type Group struct {
	// Doc is the block's comment.
	Doc       string
	Constants []Documented
}

// Documented is a string constant with the comment that says what it means.
type Documented struct {
	Name, Value, Doc string
}

// Groups returns the const blocks of the Go file that hold string constants whose names start
// with one of prefixes, each with its comment and its constants' comments, in the order written:
// what docs/reference/conditions.md is generated from (hack/reasons-docs).
func Groups(file string, prefixes ...string) ([]Group, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	values := valuesOf(file, f)
	var out []Group
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		group := Group{Doc: strings.TrimSpace(g.Doc.Text())}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			for i, name := range v.Names {
				if !hasAnyPrefix(name.Name, prefixes) || i >= len(v.Values) {
					continue
				}
				value, ok, err := values(v.Values[i])
				if err != nil {
					return nil, err
				}
				if !ok {
					continue
				}
				group.Constants = append(group.Constants, Documented{Name: name.Name, Value: value, Doc: strings.TrimSpace(v.Doc.Text())})
			}
		}
		if len(group.Constants) > 0 {
			out = append(out, group)
		}
	}
	return out, nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// valuesOf returns what gives the string value of a constant's expression in file f: a string
// literal, or pkg.Name for a package of the module f imports (ok is false for anything else).
func valuesOf(file string, f *ast.File) func(ast.Expr) (value string, ok bool, err error) {
	imported := map[string]map[string]string{} // by the import's name in f: that package's constants
	return func(e ast.Expr) (string, bool, error) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false, nil
			}
			value, err := strconv.Unquote(e.Value)
			return value, err == nil, err
		case *ast.SelectorExpr:
			pkg, ok := e.X.(*ast.Ident)
			if !ok {
				return "", false, nil
			}
			consts, ok := imported[pkg.Name]
			if !ok {
				var err error
				if consts, err = importedConstants(file, f, pkg.Name); err != nil {
					return "", false, err
				}
				imported[pkg.Name] = consts
			}
			if consts == nil {
				return "", false, nil // a package outside the module
			}
			value, ok := consts[e.Sel.Name]
			if !ok {
				return "", false, fmt.Errorf("%s: %s.%s is not a string constant of a package of the module", file, pkg.Name, e.Sel.Name)
			}
			return value, true, nil
		}
		return "", false, nil
	}
}

// importedConstants returns the string constants of the package of the module that file f
// imports as name, read from its directory; nil for a package outside the module.
func importedConstants(file string, f *ast.File, name string) (map[string]string, error) {
	root, module, err := moduleOf(file)
	if err != nil {
		return nil, err
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if (imp.Name == nil && filepath.Base(path) != name) || (imp.Name != nil && imp.Name.Name != name) {
			continue
		}
		rel, ok := strings.CutPrefix(path, module+"/")
		if !ok {
			return nil, nil
		}
		files, err := filepath.Glob(filepath.Join(root, rel, "*.go"))
		if err != nil {
			return nil, err
		}
		consts := map[string]string{}
		for _, pf := range files {
			if strings.HasSuffix(pf, "_test.go") {
				continue
			}
			got, err := Read(pf, "")
			if err != nil {
				return nil, err
			}
			for n, c := range got {
				consts[n] = c.Value
			}
		}
		return consts, nil
	}
	return nil, fmt.Errorf("%s imports no package named %s", file, name)
}

// moduleOf finds the module file belongs to: its root directory and its path.
func moduleOf(file string) (root, module string, err error) {
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return "", "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod")) //nolint:gosec // G304: the go.mod of a directory above a file of the module
		if err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					return dir, strings.TrimSpace(m), nil
				}
			}
			return "", "", fmt.Errorf("%s/go.mod names no module", dir)
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", fmt.Errorf("%s is in no module", file)
		}
		dir = parent
	}
}

// Package apiconsts reads the documented string constants of an API package's Go file, for the
// tests that hold the front doors to what their APIs declare (reasons, condition types).
package apiconsts

import (
	"testing"

	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"

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
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					value, err := strconv.Unquote(lit.Value)
					if err != nil {
						return nil, err
					}
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
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				value, err := strconv.Unquote(lit.Value)
				if err != nil {
					return nil, err
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

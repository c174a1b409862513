package reasons

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/butlerdotdev/butler-provider-harvester/internal/apiconsts"
)

// conditionWord is what metav1.Condition's schema accepts as a reason.
var conditionWord = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// declared returns the reasons of reasons.go by name (its string constants but the behaviours).
func declared(t *testing.T) map[string]string {
	t.Helper()
	consts, err := apiconsts.Read("reasons.go", "")
	if err != nil {
		t.Fatal(err)
	}
	behaviours := map[string]bool{}
	for _, b := range Behaviours {
		behaviours[string(b.Behaviour)] = true
	}
	out := map[string]string{}
	for name, c := range consts {
		if !behaviours[c.Value] {
			out[name] = c.Value
		}
	}
	return out
}

// Every reason has a behaviour that the reference documents, and one value no other reason has.
func TestEveryReasonHasItsBehaviour(t *testing.T) {
	consts := declared(t)
	if len(consts) < 50 {
		t.Fatalf("read %d reasons: the test no longer reads reasons.go", len(consts))
	}
	documented := map[Behaviour]bool{}
	for _, b := range Behaviours {
		documented[b.Behaviour] = b.Meaning != ""
	}
	values := map[string]string{}
	for name, value := range consts {
		if other, ok := values[value]; ok {
			t.Errorf("%s and %s are both %q: one word, one declaration", name, other, value)
		}
		values[value] = name
		if !conditionWord.MatchString(value) {
			t.Errorf("%s (%q) is not a reason metav1.Condition's schema accepts", name, value)
		}
		if b := Of(value); !documented[b] {
			t.Errorf("%s has behaviour %q, which Behaviours does not document: give it one of theirs", name, b)
		}
	}
	for reason := range behaviours {
		if _, ok := values[reason]; !ok {
			t.Errorf("behaviours has %q, which is no reason of reasons.go", reason)
		}
	}
}

// The waits that need a person degrade; of those, only the configuration's fail a MachineRequest
// after the grace period.
func TestDegradingAndConfiguration(t *testing.T) {
	for _, tc := range []struct {
		reason              string
		degrading, onConfig bool
	}{
		{PermissionDenied, true, true},
		{ProviderConfigNotFound, true, true},
		{QuotaExceeded, true, false},
		{DiskInUse, true, false},
		{ImageNotReady, false, false},
		{VMUnschedulable, false, false},
		{HarvesterUnavailable, false, false},
		{"NotAReason", false, false},
	} {
		if Degrading(tc.reason) != tc.degrading || OnConfiguration(tc.reason) != tc.onConfig {
			t.Errorf("%s: degrading %v, on configuration %v; want %v, %v", tc.reason, Degrading(tc.reason), OnConfiguration(tc.reason), tc.degrading, tc.onConfig)
		}
	}
}

// The API packages declare no reason of their own spelling: each Reason* constant of theirs is
// one of this package's, so that a word is declared once.
func TestAPIPackagesNameTheseReasons(t *testing.T) {
	consts := declared(t)
	files, err := filepath.Glob("../v1alpha1/*.go")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("../*/v1alpha1/*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, file := range slices.Concat(files, more) {
		if strings.HasSuffix(file, "_test.go") || strings.Contains(file, "zz_generated") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			v, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range v.Names {
				if !strings.HasPrefix(name.Name, "Reason") || i >= len(v.Values) {
					continue
				}
				checked++
				sel, ok := v.Values[i].(*ast.SelectorExpr)
				if ok {
					x, isIdent := sel.X.(*ast.Ident)
					ok = isIdent && x.Name == "reasons"
				}
				if !ok {
					t.Errorf("%s: %s is not one of package reasons' reasons: declare the word in api/reasons/reasons.go and name it here", file, name.Name)
					continue
				}
				if _, ok := consts[sel.Sel.Name]; !ok {
					t.Errorf("%s: %s names reasons.%s, which reasons.go does not declare", file, name.Name, sel.Sel.Name)
				}
			}
			return true
		})
	}
	if checked < 100 {
		t.Fatalf("checked %d reasons: the test no longer reads the API packages", checked)
	}
}

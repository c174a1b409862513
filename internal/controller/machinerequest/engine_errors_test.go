package machinerequest

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// stringConstants returns the string constants of a Go file whose names start with prefix.
func stringConstants(t *testing.T, file, prefix string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			for i, name := range v.Names {
				if !strings.HasPrefix(name.Name, prefix) || i >= len(v.Values) {
					continue
				}
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					out[name.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return out
}

// Every reason of the engine becomes a reason the MachineRequest's API documents: a reason added to
// the engine without its MachineRequest spelling fails here.
func TestEveryEngineReasonIsAMachineRequestReason(t *testing.T) {
	documented := map[string]bool{}
	for _, v := range stringConstants(t, "../../../api/v1alpha1/conditions.go", "Reason") {
		documented[v] = true
	}
	engine := stringConstants(t, "../../harvester/reasons.go", "Reason")
	if len(engine) < 20 {
		t.Fatalf("found %d engine reasons: the test no longer reads internal/harvester/reasons.go", len(engine))
	}
	for name, reason := range engine {
		got, _ := machineRequestTerms(reason)
		if !documented[got] {
			t.Errorf("harvester.%s (%q) becomes %q, which api/v1alpha1/conditions.go does not declare: map it in frontdoor.apiReasons", name, reason, got)
		}
	}
}

func TestEngineErrorsGetTheMachineRequestsWordsAndAdvice(t *testing.T) {
	err := asMachineRequestError(harvester.Permanent(harvester.ReasonNameTakenByAnotherManagementCluster, "VirtualMachine vms/cp-0 was created for MachineRequest a/b of another management cluster"))
	p, ok := objstatus.AsPermanent(err)
	if !ok || p.Reason != v1alpha1.ReasonNameConflict || !strings.Contains(p.Message, v1alpha1.AnnotationHandOver) || !strings.HasPrefix(p.Message, "VirtualMachine vms/cp-0") {
		t.Fatalf("got %v", err)
	}
	err = asMachineRequestError(harvester.Waiting(harvester.ReasonInvalidEndpoint, 0, "bad endpoint"))
	if w, ok := objstatus.AsWaiting(err); !ok || w.Reason != v1alpha1.ReasonInvalidProviderConfig || w.Message != "bad endpoint" {
		t.Fatalf("got %v", err)
	}
	err = asMachineRequestError(harvester.Waiting(harvester.ReasonQuotaExceeded, 0, "quota"))
	if w, ok := objstatus.AsWaiting(err); !ok || w.Reason != v1alpha1.ReasonQuotaExceeded || w.Message != "quota" {
		t.Fatalf("a reason spelled the same was changed: %v", err)
	}
	own := objstatus.Waiting(v1alpha1.ReasonProviderConfigNotFound, 0, "no ProviderConfig")
	if got := asMachineRequestError(own); !errors.Is(got, own) {
		t.Fatalf("the front door's own error was rewritten: %v", got)
	}
}

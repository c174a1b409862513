package machinerequest

import (
	"errors"
	"strings"
	"testing"

	"github.com/butlerdotdev/butler-provider-harvester/internal/apiconsts"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/outcome"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// Every word of the engine's own (internal/harvester/reasons.go) becomes a reason the
// MachineRequest's API documents, and none is a word the provider's reasons already have: a word
// added to the engine without its MachineRequest spelling, or declared twice, fails here.
func TestEveryEngineReasonIsAMachineRequestReason(t *testing.T) {
	declared, err := apiconsts.Read("../../../api/v1alpha1/conditions.go", "Reason")
	if err != nil {
		t.Fatal(err)
	}
	documented := apiconsts.Values(declared, false)
	engine, err := apiconsts.Read("../../harvester/reasons.go", "Reason")
	if err != nil {
		t.Fatal(err)
	}
	if len(engine) < 4 {
		t.Fatalf("found %d engine reasons: the test no longer reads internal/harvester/reasons.go", len(engine))
	}
	for name, c := range engine {
		reason := c.Value
		if reasons.Of(reason) != "" {
			t.Errorf("harvester.%s (%q) is one of api/reasons' words: use that one", name, reason)
		}
		got, _ := machineRequestTerms(reason)
		if !documented[got] {
			t.Errorf("harvester.%s (%q) becomes %q, which api/v1alpha1/conditions.go does not declare: map it in outcome.apiReasons", name, reason, got)
		}
	}
}

func TestEngineErrorsGetTheMachineRequestsWordsAndAdvice(t *testing.T) {
	err := asMachineRequestError(harvester.Permanent(harvester.ReasonNameTakenByAnotherManagementCluster, "VirtualMachine vms/cp-0 was created for MachineRequest a/b of another management cluster"))
	p, ok := errkind.AsPermanent(err)
	if !ok || p.Reason != v1alpha1.ReasonNameConflict || !strings.Contains(p.Message, v1alpha1.AnnotationHandOver) || !strings.HasPrefix(p.Message, "VirtualMachine vms/cp-0") {
		t.Fatalf("got %v", err)
	}
	err = asMachineRequestError(harvester.Waiting(harvester.ReasonInvalidEndpoint, 0, "bad endpoint"))
	if w, ok := errkind.AsWaiting(err); !ok || w.Reason != v1alpha1.ReasonInvalidProviderConfig || w.Message != "bad endpoint" {
		t.Fatalf("got %v", err)
	}
	err = asMachineRequestError(harvester.Waiting(reasons.QuotaExceeded, 0, "quota"))
	if w, ok := errkind.AsWaiting(err); !ok || w.Reason != v1alpha1.ReasonQuotaExceeded || w.Message != "quota" {
		t.Fatalf("a reason spelled the same was changed: %v", err)
	}
	own := errkind.Waiting(v1alpha1.ReasonProviderConfigNotFound, 0, "no ProviderConfig")
	if got := asMachineRequestError(own); !errors.Is(got, own) {
		t.Fatalf("the front door's own error was rewritten: %v", got)
	}
}

// The conditions every MachineRequest and ImageSync reports are declared and documented in their
// API package.
func TestConditionsAreDeclaredInTheAPI(t *testing.T) {
	apiconsts.RequireConditions(t, "../../../api/v1alpha1/conditions.go", outcome.ButlerConditions)
}

package clusterapi

import (
	"strings"
	"testing"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/apiconsts"
)

// A HarvesterMachine's user is told what to do through Cluster API, never to edit a MachineRequest.
func TestHarvesterMachineAdviceNamesNoMachineRequest(t *testing.T) {
	for reason := range harvesterMachineAdvice {
		_, advice := harvesterMachineTerms(reason)
		if strings.Contains(advice, "MachineRequest") || strings.Contains(advice, v1alpha1.AnnotationRetry) || strings.Contains(advice, "spec.machineName") {
			t.Errorf("%s: HarvesterMachine advice %q names the MachineRequest's fields", reason, advice)
		}
	}
	if _, advice := harvesterMachineTerms(reasons.VMDeleted); !strings.Contains(advice, "delete the Machine") {
		t.Errorf("VMDeleted advice %q, want it to say the Machine is replaced", advice)
	}
}

// The conditions every HarvesterCluster and HarvesterMachine reports (besides Paused) are
// declared and documented in their API package: objstatus writes them by these names.
func TestConditionsAreDeclaredInTheAPI(t *testing.T) {
	apiconsts.RequireConditions(t, "../../../api/infrastructure/v1alpha1/conditions.go", infrastructureConditions)
}

// The Cluster API kinds' annotations mean what the MachineRequest's of the same key mean: their
// keys are the same, so that one vocabulary serves both kinds of machine.
func TestAnnotationsShareTheMachineRequestsKeys(t *testing.T) {
	for _, pair := range [][2]string{
		{infrav1.AnnotationSkipHarvesterCleanup, v1alpha1.AnnotationSkipHarvesterCleanup},
		{infrav1.AnnotationPlacement, v1alpha1.AnnotationPlacement},
		{infrav1.AnnotationHandOver, v1alpha1.AnnotationHandOver},
	} {
		if pair[0] != pair[1] {
			t.Errorf("annotation %q of the Cluster API kinds is %q on MachineRequests", pair[0], pair[1])
		}
	}
}

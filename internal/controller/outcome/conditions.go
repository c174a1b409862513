package outcome

import (
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// ButlerConditions are the conditions of butler.butlerlabs.dev/v1alpha1's kinds (MachineRequest,
// ImageSync) that every kind reports, as api/v1alpha1/conditions.go declares them.
var ButlerConditions = objstatus.Conditions{
	Ready: v1alpha1.ConditionReady, Progressing: v1alpha1.ConditionProgressing,
	Degraded: v1alpha1.ConditionDegraded, AsExpected: v1alpha1.ReasonAsExpected,
}

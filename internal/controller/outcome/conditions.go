package outcome

import (
	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// ButlerConditions are the conditions of butler.butlerlabs.dev/v1alpha1's kinds (MachineRequest,
// ImageSync) that every kind reports, as api/v1alpha1/conditions.go declares them.
var ButlerConditions = objstatus.Conditions{
	Ready: v1alpha1.ConditionReady, Progressing: v1alpha1.ConditionProgressing,
	Degraded: v1alpha1.ConditionDegraded, AsExpected: v1alpha1.ReasonAsExpected,
}

// DegradingReasons are waits that need the user to act, so they also set Degraded (and give a
// Warning event when they begin). FailureDomainNotFound is a HarvesterMachine's alone.
var DegradingReasons = objstatus.Reasons{
	infrav1.ReasonFailureDomainNotFound:    true,
	infrav1.ReasonPlacementRefused:         true,
	v1alpha1.ReasonProviderConfigNotFound:  true,
	v1alpha1.ReasonInvalidProviderConfig:   true,
	v1alpha1.ReasonCredentialsUnavailable:  true,
	v1alpha1.ReasonPermissionDenied:        true,
	v1alpha1.ReasonDeletionBlocked:         true,
	v1alpha1.ReasonProviderConfigNotReady:  true,
	v1alpha1.ReasonProviderConfigNotShared: true,
	v1alpha1.ReasonProviderConfigMoved:     true,
	v1alpha1.ReasonQuotaExceeded:           true,
	v1alpha1.ReasonDiskInUse:               true,
	v1alpha1.ReasonUntrustedEndpoint:       true,
	v1alpha1.ReasonInsecureCredentials:     true,
}

package outcome

import (
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// apiReasons are the engine's reasons that the front doors' APIs spell differently. Both doors
// report the reasons of api/v1alpha1 (a HarvesterMachine's Ready condition uses them too), so
// the spelling is shared; the advice is each door's own.
var apiReasons = map[string]string{
	harvester.ReasonNameTaken:                           v1alpha1.ReasonNameConflict,
	harvester.ReasonNameTakenByAnotherManagementCluster: v1alpha1.ReasonNameConflict,
	harvester.ReasonInvalidEndpoint:                     v1alpha1.ReasonInvalidProviderConfig,
	harvester.ReasonOwnedElsewhere:                      v1alpha1.ReasonOwnedElsewhere,
	harvester.ReasonOwnerUnknown:                        v1alpha1.ReasonOwnedElsewhere,
}

// APIReason is an engine reason as the front doors' APIs spell it.
func APIReason(engineReason string) string {
	if reason, renamed := apiReasons[engineReason]; renamed {
		return reason
	}
	return engineReason
}

// sameTerms keeps the engine's reasons (a front door that maps them afterwards, such as
// asImageSyncError, or the ProviderConfig's checks, spelled as the engine's).
func sameTerms(engineReason string) (reason, advice string) { return engineReason, "" }

// FromEngine converts the engine's error classes, keeping their reasons.
func FromEngine(err error) error { return FromEngineIn(err, sameTerms) }

// FromEngineIn is the one place where the engine's error classes (harvester.WaitingError,
// harvester.PermanentError) become the front door's, in terms. Everything else (the front door's
// own errors, which the engine hands back from its door's Gate and Record, conflicts, transient
// errors) is returned unchanged. Whatever classifies an error the engine may have returned
// passes it through here first.
func FromEngineIn(err error, terms func(string) (reason, advice string)) error {
	if w, ok := harvester.AsWaiting(err); ok {
		reason, advice := terms(w.Reason)
		return &objstatus.WaitingError{Reason: reason, Message: w.Message + advice, RetryAfter: w.RetryAfter}
	}
	if p, ok := harvester.AsPermanent(err); ok {
		reason, advice := terms(p.Reason)
		return &objstatus.PermanentError{Reason: reason, Message: p.Message + advice}
	}
	return err
}

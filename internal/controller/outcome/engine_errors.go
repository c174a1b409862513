package outcome

import (
	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// apiReasons map the engine's finer words (internal/harvester/reasons.go) onto the provider's
// reasons (api/reasons), which both doors' APIs report as they are; the advice is each door's
// own.
var apiReasons = map[string]string{
	harvester.ReasonNameTaken:                           reasons.NameConflict,
	harvester.ReasonNameTakenByAnotherManagementCluster: reasons.NameConflict,
	harvester.ReasonInvalidEndpoint:                     reasons.InvalidProviderConfig,
	harvester.ReasonOwnerUnknown:                        reasons.OwnedElsewhere,
}

// APIReason is an engine outcome as the front doors' APIs report it: one of the provider's
// reasons as it is, one of the engine's finer words mapped onto the reason it is a case of.
func APIReason(engineReason string) string {
	if reason, renamed := apiReasons[engineReason]; renamed {
		return reason
	}
	return engineReason
}

// sameTerms keeps the engine's reasons (a front door that maps them afterwards, such as
// asImageSyncError, or the ProviderConfig's checks, spelled as the engine's).
func sameTerms(engineReason string) (reason, advice string) { return engineReason, "" }

// FromEngine puts the engine's waits and permanent failures in a door's words, keeping their
// reasons.
func FromEngine(err error) error { return errkind.Translate(err, sameTerms) }

// FromEngineIn is the one place where the engine's waits and permanent failures are put in a
// front door's words (errkind.Translate): its reasons as terms spells them, with the advice terms
// gives. Everything else (the front door's own errors, which the engine hands back from its
// door's steps, conflicts, transient errors) is returned unchanged, and so is what was put in a
// door's words before. Whatever classifies an error the engine may have returned passes it
// through here first.
func FromEngineIn(err error, terms errkind.Terms) error { return errkind.Translate(err, terms) }

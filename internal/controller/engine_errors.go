package controller

import (
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// fromEngine is the one place where the engine's error classes (harvester.WaitingError,
// harvester.PermanentError) become the front door's (objstatus.WaitingError,
// objstatus.PermanentError), with their reasons as they are. Everything else (the front door's own
// errors, which the engine hands back from MachineSpec.Gate and Record, conflicts, transient
// errors) is returned unchanged. Whatever classifies an error the engine may have returned
// passes it through here first.
func fromEngine(err error) error {
	if w, ok := harvester.AsWaiting(err); ok {
		return &objstatus.WaitingError{Reason: w.Reason, Message: w.Message, RetryAfter: w.RetryAfter}
	}
	if p, ok := harvester.AsPermanent(err); ok {
		return &objstatus.PermanentError{Reason: p.Reason, Message: p.Message}
	}
	return err
}

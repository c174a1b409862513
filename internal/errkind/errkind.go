// Package errkind is the one set of error kinds the engine and the front doors report a step's
// outcome in, besides an unexpected error (which is transient: retried with backoff):
//
//   - a wait (WaitingError): not an error; the object cannot progress yet, for the reason its
//     message explains, and is looked at again after RetryAfter;
//   - a permanent failure (PermanentError): retrying will not help until the user changes
//     something.
//
// Each carries a reason: one of the provider's (package api/reasons), or, for the engine's, one
// of the engine's finer words. An error is in the words of whoever made it: the engine's errors
// (Engine*) are translated into a front door's API words and advice exactly once, at the door's
// boundary (Translate), while the door's own errors, which the engine hands back from the door's
// steps, pass that boundary as they are.
package errkind

import (
	"errors"
	"fmt"
	"time"
)

// WaitingError means the object cannot progress yet, for a reason the message explains: it is not
// an error. The conditions say what is waited for, and the object is looked at again after
// RetryAfter.
type WaitingError struct {
	Reason     string
	Message    string
	RetryAfter time.Duration
	// engine says the reason and message are the engine's, still to be put in a door's words.
	engine bool
}

func (e *WaitingError) Error() string { return e.Message }

// PermanentError means the object cannot be served as it is: retrying will not help until the
// user changes something. A MachineRequest is Failed with Reason; a Cluster API kind says so in
// its Ready condition.
type PermanentError struct {
	Reason  string
	Message string
	// engine says the reason and message are the engine's, still to be put in a door's words.
	engine bool
}

func (e *PermanentError) Error() string { return e.Message }

// Waiting returns a WaitingError in a front door's words, with a formatted message.
func Waiting(reason string, after time.Duration, format string, args ...any) error {
	return &WaitingError{Reason: reason, RetryAfter: after, Message: fmt.Sprintf(format, args...)}
}

// Permanent returns a PermanentError in a front door's words, with a formatted message.
func Permanent(reason, format string, args ...any) error {
	return &PermanentError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// EngineWaiting returns a WaitingError in the engine's words, which Translate puts in a door's.
func EngineWaiting(reason string, after time.Duration, format string, args ...any) error {
	return &WaitingError{Reason: reason, RetryAfter: after, Message: fmt.Sprintf(format, args...), engine: true}
}

// EnginePermanent returns a PermanentError in the engine's words, which Translate puts in a
// door's.
func EnginePermanent(reason, format string, args ...any) error {
	return &PermanentError{Reason: reason, Message: fmt.Sprintf(format, args...), engine: true}
}

// AsWaiting finds a WaitingError in err's chain, so that callers can requeue after its RetryAfter
// instead of reporting an error, even after the error has been wrapped with context.
func AsWaiting(err error) (*WaitingError, bool) {
	var w *WaitingError
	return w, errors.As(err, &w)
}

// AsPermanent finds a PermanentError in err's chain, so that callers can tell "fail" from "retry"
// even after the error has been wrapped with context.
func AsPermanent(err error) (*PermanentError, bool) {
	var p *PermanentError
	return p, errors.As(err, &p)
}

// ReasonOf is the reason of the wait or permanent failure in err's chain, "" when there is none
// (a transient error, a conflict, nil).
func ReasonOf(err error) string {
	if w, ok := AsWaiting(err); ok {
		return w.Reason
	}
	if p, ok := AsPermanent(err); ok {
		return p.Reason
	}
	return ""
}

// Terms puts one of the engine's reasons in a front door's words: the reason its API reports, and
// the advice its users can follow, appended to the engine's message ("" for none).
type Terms func(engineReason string) (reason, advice string)

// Translate puts the engine's wait or permanent failure in err's chain in a door's words, once:
// the result is in the door's words, and Translate returns it unchanged if called again. A wait
// or failure made by the door itself, and any other error (a conflict, a transient error), is
// returned as it is.
func Translate(err error, terms Terms) error {
	if w, ok := AsWaiting(err); ok && w.engine {
		reason, advice := terms(w.Reason)
		return &WaitingError{Reason: reason, Message: w.Message + advice, RetryAfter: w.RetryAfter}
	}
	if p, ok := AsPermanent(err); ok && p.engine {
		reason, advice := terms(p.Reason)
		return &PermanentError{Reason: reason, Message: p.Message + advice}
	}
	return err
}

// InEngineWords reports whether err's wait or permanent failure is still in the engine's words.
func InEngineWords(err error) bool {
	if w, ok := AsWaiting(err); ok {
		return w.engine
	}
	if p, ok := AsPermanent(err); ok {
		return p.engine
	}
	return false
}

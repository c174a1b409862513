package objstatus

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
}

func (e *WaitingError) Error() string { return e.Message }

// PermanentError means the object cannot be served as it is: retrying will not help until the
// user changes something. The object is Failed for this generation with Reason.
type PermanentError struct {
	Reason  string
	Message string
}

func (e *PermanentError) Error() string { return e.Message }

// Waiting returns a WaitingError with a formatted message.
func Waiting(reason string, after time.Duration, format string, args ...any) error {
	return &WaitingError{Reason: reason, RetryAfter: after, Message: fmt.Sprintf(format, args...)}
}

// Permanent returns a PermanentError with a formatted message.
func Permanent(reason, format string, args ...any) error {
	return &PermanentError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// AsWaiting finds a WaitingError in err's chain.
func AsWaiting(err error) (*WaitingError, bool) {
	var w *WaitingError
	return w, errors.As(err, &w)
}

// AsPermanent finds a PermanentError in err's chain.
func AsPermanent(err error) (*PermanentError, bool) {
	var p *PermanentError
	return p, errors.As(err, &p)
}

// ErrGone stops a reconcile whose object was deleted meanwhile: a write answered NotFound, so
// nothing more is to be done or written for it.
var ErrGone = errors.New("the object no longer exists")

package objstatus

import "errors"

// ErrGone stops a reconcile whose object was deleted meanwhile: a write answered NotFound, so
// nothing more is to be done or written for it.
var ErrGone = errors.New("the object no longer exists")

// Package objstatus is what the reconcilers of every kind (MachineRequest, ImageSync) share to
// report on the object they reconcile:
//
//   - the front door's error classes: a wait (WaitingError: not an error, the conditions say what
//     is waited for, and the object is looked at again later) and a permanent failure
//     (PermanentError: the object is Failed for this generation);
//   - the status memory (Memory): the status this manager last wrote for each object, so that a
//     cache that lags behind a write does not make the next one look unnecessary;
//   - events whose note fits what the API server accepts (RecordEvent);
//   - a Scope: one reconcile of one object, which builds up the status (SetPhase, SetCondition,
//     Progressing, Degraded, Fail, ...), turns the reconcile's error into status and a result in
//     one place (Outcome), and writes the status once, as a merge patch, when it changed
//     (WriteStatus).
//
// What differs between kinds is given as data: a Kind says where its status keeps the fields every
// kind has, a Policy which waits need the user (Degraded), which fail after a grace period, and
// what the events are called. The engine's errors (package harvester) are not known here: the
// controller converts them at its boundary.
package objstatus

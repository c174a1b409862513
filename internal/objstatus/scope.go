package objstatus

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// ConflictRetry is how soon an object that changed under us is looked at again.
const ConflictRetry = 200 * time.Millisecond

// TimerSlack is added to a requeue meant to find a timer run out, so that it has.
const TimerSlack = 10 * time.Millisecond

// Fields are the status fields of a kind, as pointers into one status. Conditions and
// ObservedGeneration every kind has; Phase, LastUpdated, FailureReason and FailureMessage are nil
// for a kind without them (Cluster API's v1beta2 kinds: a failure is their Ready condition).
type Fields struct {
	Phase              *string
	LastUpdated        **metav1.Time
	Conditions         *[]metav1.Condition
	FailureReason      *string
	FailureMessage     *string
	ObservedGeneration *int64
}

// Kind says how a kind keeps its status: O is the object (a pointer), S its status type.
type Kind[O client.Object, S any] struct {
	// Name names the kind in errors and logs ("MachineRequest").
	Name string
	// Status is the object's status.
	Status func(obj O) *S
	// DeepCopy copies a status: the method expression (*S).DeepCopy.
	DeepCopy func(*S) *S
	// Fields are the fields of a status every kind has.
	Fields func(*S) Fields
	// FailedPhase is the phase of a failed object.
	FailedPhase string
	// Written, if set, is told of each status written: before is what was stored, after the
	// server's answer.
	Written func(obj O, before, after *S)
	// Conditions are the kind's condition types for what every kind reports, as its API package
	// declares and documents them.
	Conditions Conditions
}

// Conditions names, in a kind's API, the conditions every kind reports: its summary (Ready),
// whether it is being worked on (Progressing) and whether it needs attention (Degraded, with the
// reason it gives when it does not). The package writes no condition type of its own.
type Conditions struct {
	Ready, Progressing, Degraded string
	// AsExpected is the reason of Degraded=False.
	AsExpected string
}

// Policy is how one kind judges the outcome of a reconcile. Its data says which waits need the
// user and which end in failure; its hooks (optional) let a kind add what only it knows.
type Policy struct {
	// Action names the reconcile's work in the events of waits ("Provision", "Sync").
	Action string
	// FailAction names it in the event that says the object failed.
	FailAction string
	// Degrading says whether a wait needs the user to act: it sets Degraded (any other wait
	// clears it) and is worth a Warning event when it begins. nil: none does.
	Degrading func(reason string) bool
	// NewWaitCondition is the condition whose reason tells a wait that begins (it differs from
	// the wait's) from one that goes on.
	NewWaitCondition string
	// KeepNotReady keeps a Ready condition that is False as it is while the object progresses,
	// so that it goes on saying what first took the object from Ready; otherwise Ready says what
	// is waited for now.
	KeepNotReady bool
	// Configuration says whether a wait is one only the user can end (configuration,
	// credentials, permissions): once it has lasted Grace (counted from Degraded's transition)
	// the object fails with it, so that a caller waiting for Failed can act. Never during
	// deletion. nil: none is.
	Configuration func(reason string) bool
	// Grace is how long a wait on configuration may last.
	Grace time.Duration
	// GraceExpired formats the failure message of such a wait from its message and Grace.
	GraceExpired string
	// GraceApplies, if set, says whether configuration waits fail after Grace in this reconcile
	// (a MachineRequest with a VM is never failed on configuration).
	GraceApplies func() bool
	// Deadline, if set, fails an object that has waited too long, with why it waits; it reports
	// whether it did, and otherwise how long is left (0: no deadline).
	Deadline func(why string) (failed bool, left time.Duration)
	// TransientReason is the reason Degraded gives an unexpected error; "" leaves Degraded as it
	// is.
	TransientReason string
}

// AnyReason is the predicate of a Policy that holds for every reason.
func AnyReason(string) bool { return true }

// Scope is one reconcile of one object: the object, the status it builds up, and the one place
// where the kinds of error become status and a result. The status is written once, at the end of
// the reconcile, when it differs from what is stored.
type Scope[O client.Object, S any] struct {
	// Obj is the object; its status is the one being built.
	Obj      O
	kind     Kind[O, S]
	policy   Policy
	recorder events.EventRecorder
	memory   *Memory[S]
	// stored is the status as stored: what this manager last wrote, else the cached copy.
	stored S
	// lazy changes need no write of their own: they are stored with the next write there is.
	lazy []func(*S)
	// released is set once the object is gone, or no longer ours: it gets no more status.
	released bool
	// held keeps this reconcile's status unwritten (HoldProgress).
	held bool
}

// New starts a reconcile of obj. Its status starts from what this manager last wrote when the
// cache has not caught up with that write: decisions (events, what is recorded) and the next write
// then build on what is stored, not on an older copy.
func New[O client.Object, S any](obj O, kind Kind[O, S], policy Policy, recorder events.EventRecorder, memory *Memory[S]) *Scope[O, S] {
	status := kind.Status(obj)
	if last, ok := memory.Last(obj); ok {
		*status = *kind.DeepCopy(&last)
	}
	return &Scope[O, S]{Obj: obj, kind: kind, policy: policy, recorder: recorder, memory: memory, stored: *kind.DeepCopy(status)}
}

func (s *Scope[O, S]) fields() Fields { return s.kind.Fields(s.kind.Status(s.Obj)) }

// SetPhase changes the phase and stamps lastUpdated when it really changes.
func (s *Scope[O, S]) SetPhase(p string) {
	f := s.fields()
	if f.Phase == nil || *f.Phase == p {
		return
	}
	*f.Phase = p
	now := metav1.Now()
	*f.LastUpdated = &now
}

// SetCondition sets a condition for the object's generation. The same judgement for a newer
// generation (only its observedGeneration would change) is not worth a write of its own: it rides
// along with the next write there is, as Observed's does during deletion. A generation raised by
// the provider's own spec write (a HarvesterMachine's providerID) or by a deletion starting would
// otherwise cost a status write per machine each.
func (s *Scope[O, S]) SetCondition(condType string, status metav1.ConditionStatus, reason, message string) {
	generation := s.Obj.GetGeneration()
	if c := s.Condition(condType); c != nil && c.Status == status && c.Reason == reason && c.Message == message {
		if c.ObservedGeneration != generation {
			s.SetLazily(func(st *S) {
				if c := meta.FindStatusCondition(*s.kind.Fields(st).Conditions, condType); c != nil {
					c.ObservedGeneration = generation
				}
			})
		}
		return
	}
	meta.SetStatusCondition(s.fields().Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
	})
}

// Condition returns the condition of that type, nil if there is none.
func (s *Scope[O, S]) Condition(condType string) *metav1.Condition {
	return meta.FindStatusCondition(*s.fields().Conditions, condType)
}

// Progressing records that the object is being worked on and what it waits for: Ready is False
// (see Policy.KeepNotReady) and Progressing True.
func (s *Scope[O, S]) Progressing(reason, message string) {
	if c := s.Condition(s.kind.Conditions.Ready); !s.policy.KeepNotReady || c == nil || c.Status != metav1.ConditionFalse {
		s.SetCondition(s.kind.Conditions.Ready, metav1.ConditionFalse, reason, message)
	}
	s.SetCondition(s.kind.Conditions.Progressing, metav1.ConditionTrue, reason, message)
}

// Healthy clears Degraded.
func (s *Scope[O, S]) Healthy() {
	s.SetCondition(s.kind.Conditions.Degraded, metav1.ConditionFalse, s.kind.Conditions.AsExpected, "")
}

// Degraded says what needs attention.
func (s *Scope[O, S]) Degraded(reason, message string) {
	s.SetCondition(s.kind.Conditions.Degraded, metav1.ConditionTrue, reason, message)
}

// Fail makes the object Failed for this generation, with a Warning event the first time.
func (s *Scope[O, S]) Fail(reason, message string) {
	f := s.fields()
	first := s.failedFor() != reason
	s.SetPhase(s.kind.FailedPhase)
	if f.FailureReason != nil {
		*f.FailureReason, *f.FailureMessage = reason, message
	}
	s.SetCondition(s.kind.Conditions.Ready, metav1.ConditionFalse, reason, message)
	s.SetCondition(s.kind.Conditions.Progressing, metav1.ConditionFalse, reason, message)
	s.Degraded(reason, message)
	if first {
		s.Event(corev1.EventTypeWarning, reason, s.policy.FailAction, message)
	}
}

// failedFor is the reason the object failed for, "" if it has not.
func (s *Scope[O, S]) failedFor() string {
	f := s.fields()
	if f.FailureReason != nil {
		if *f.Phase != s.kind.FailedPhase {
			return ""
		}
		return *f.FailureReason
	}
	// A kind without a phase fails in its conditions: Ready and Progressing False for the reason.
	if c := s.Condition(s.kind.Conditions.Progressing); c != nil && c.Status == metav1.ConditionFalse {
		if r := s.Condition(s.kind.Conditions.Ready); r != nil && r.Status == metav1.ConditionFalse && r.Reason == c.Reason {
			return r.Reason
		}
	}
	return ""
}

// Event records an event on the object (see RecordEvent).
func (s *Scope[O, S]) Event(eventType, reason, action, message string) {
	RecordEvent(s.recorder, s.Obj, eventType, reason, action, message)
}

// Deleting reports whether the object is being deleted.
func (s *Scope[O, S]) Deleting() bool { return !s.Obj.GetDeletionTimestamp().IsZero() }

// Observed records that the status describes the current generation. The API server raises the
// generation when a deletion starts: that alone is not worth a write, so during deletion it
// rides along with the next write there is.
func (s *Scope[O, S]) Observed() {
	generation := s.Obj.GetGeneration()
	if s.Deleting() {
		s.SetLazily(func(st *S) { *s.kind.Fields(st).ObservedGeneration = generation })
		return
	}
	*s.fields().ObservedGeneration = generation
}

// SetLazily records a change to the status that is not worth a write of its own: it is stored
// with the next write there is for another reason. It is for what the reconciler finds again
// anyway, such as a new VM's UID (found by name and ownership until recorded).
func (s *Scope[O, S]) SetLazily(change func(*S)) { s.lazy = append(s.lazy, change) }

// HoldProgress keeps this reconcile's status unwritten when all it would add is normal progress
// (Progressing with reason) to a status that says nothing of progress yet, or says that same
// progress: that is not worth a write now, and a later reconcile, which builds the status again
// from the object, writes it. A stored status that says anything else (an earlier wait, a problem
// since passed) is replaced at once: left, it would mislead. It reports whether it held.
func (s *Scope[O, S]) HoldProgress(reason string) bool {
	if c := meta.FindStatusCondition(*s.kind.Fields(&s.stored).Conditions, s.kind.Conditions.Progressing); c != nil && c.Reason != reason {
		return false
	}
	s.held = true
	return true
}

// Release says the object is gone, or no longer ours: no more status is written for it.
func (s *Scope[O, S]) Release() { s.released = true }

// Released reports whether the object was released.
func (s *Scope[O, S]) Released() bool { return s.released }

// Outcome is the one place where the kinds of error become status and a result:
//   - nil: done for now; res says when to look again;
//   - a WaitingError: not an error; the conditions say what is waited for; look again later (a
//     wait on configuration fails after the grace period, see Policy);
//   - a PermanentError: the object is Failed for this generation;
//   - ErrGone: the object went meanwhile; nothing to report;
//   - a conflict: the object changed since it was read; look again soon, nothing to report;
//   - anything else is transient: Degraded says why (Policy.TransientReason) and the error goes
//     back for backoff.
//
// The kinds of error are the front door's (errkind): one still in the engine's words has missed
// the door's translation (outcome.FromEngineIn), which is logged as the bug it is.
//
// A result with RequeueAfter is never returned together with an error.
func (s *Scope[O, S]) Outcome(ctx context.Context, res ctrl.Result, err error) (ctrl.Result, error) {
	if errkind.InEngineWords(err) {
		log.FromContext(ctx).Error(err, "the engine's outcome reached the status without the front door's words and advice: translate it at the door's boundary (outcome.FromEngineIn)", "kind", s.kind.Name)
	}
	if w, ok := errkind.AsWaiting(err); ok {
		return s.wait(w), nil
	}
	if p, ok := errkind.AsPermanent(err); ok {
		s.Fail(p.Reason, p.Message)
		s.Observed()
		return ctrl.Result{}, nil
	}
	switch {
	case err == nil:
		s.Observed()
		return res, nil
	case errors.Is(err, ErrGone):
		return ctrl.Result{}, nil
	case !apierrors.IsConflict(err) && s.policy.TransientReason != "":
		s.Degraded(s.policy.TransientReason, err.Error())
	}
	return ConflictOr(ctx, err)
}

// wait records a wait and says when to look again.
func (s *Scope[O, S]) wait(w *errkind.WaitingError) ctrl.Result {
	p := s.policy
	degrading := p.Degrading != nil && p.Degrading(w.Reason)
	// A wait that needs the user is worth an event when it begins; the deletion path records
	// its own.
	if c := s.Condition(p.NewWaitCondition); degrading && !s.Deleting() && (c == nil || c.Reason != w.Reason) {
		s.Event(corev1.EventTypeWarning, w.Reason, p.Action, w.Message)
	}
	s.Progressing(w.Reason, w.Message)
	if degrading {
		s.Degraded(w.Reason, w.Message)
	} else {
		s.Healthy()
	}
	s.Observed()
	next := w.RetryAfter
	if p.Configuration != nil && p.Configuration(w.Reason) && !s.Deleting() && (p.GraceApplies == nil || p.GraceApplies()) {
		left := graceLeft(*s.fields().Conditions, s.kind.Conditions.Degraded, p.Grace)
		if left <= 0 {
			s.Fail(w.Reason, fmt.Sprintf(p.GraceExpired, w.Message, p.Grace))
			return ctrl.Result{}
		}
		next = min(next, left+TimerSlack)
	}
	if p.Deadline != nil {
		if failed, left := p.Deadline(w.Message); failed {
			return ctrl.Result{}
		} else if left > 0 {
			next = min(next, left+TimerSlack)
		}
	}
	return ctrl.Result{RequeueAfter: next}
}

// graceLeft says how much of grace is left of a problem that Degraded has reported since its
// last transition to True (all of it if Degraded is not True): a problem only the user can fix
// becomes a failure once it has lasted that long, so that a caller waiting for Failed can act,
// while a Secret created just after the object that needs it still works.
func graceLeft(conditions []metav1.Condition, degraded string, grace time.Duration) time.Duration {
	c := meta.FindStatusCondition(conditions, degraded)
	if c == nil || c.Status != metav1.ConditionTrue {
		return grace
	}
	return grace - time.Since(c.LastTransitionTime.Time)
}

// ConflictOr retries a conflict soon and quietly (someone wrote the object since we read it:
// nothing is wrong, read it again), and returns any other error for backoff.
func ConflictOr(ctx context.Context, err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		log.FromContext(ctx).V(1).Info("Conflict; retrying with a fresh copy", "error", err.Error())
		return ctrl.Result{RequeueAfter: ConflictRetry, Priority: ptr.To(0)}, nil
	}
	return ctrl.Result{}, err
}

// WriteStatus stores the status if it differs from what is stored, as a merge patch from what is
// stored: the cached copy may lag behind this manager's last write, so the comparison and the
// patch start from the answer to that write. An object that is gone (released, or the write
// answers NotFound) has no status left to write. It is the last write of a reconcile: nothing is
// created after it.
func (s *Scope[O, S]) WriteStatus(ctx context.Context, c client.Client) error {
	status := s.kind.Status(s.Obj)
	if s.released || s.held || equality.Semantic.DeepEqual(s.stored, *status) {
		return nil
	}
	for _, change := range s.lazy {
		change(status)
	}
	s.lazy = nil
	base, ok := s.Obj.DeepCopyObject().(O)
	if !ok {
		return fmt.Errorf("a copy of a %s is a %T", s.kind.Name, s.Obj.DeepCopyObject())
	}
	*s.kind.Status(base) = s.stored
	err := c.Status().Patch(ctx, s.Obj, client.MergeFrom(base))
	if apierrors.IsNotFound(err) {
		s.released = true
		return nil
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "Patching "+s.kind.Name+" status")
		return errors.Join(errors.New("patch "+s.kind.Name+" status"), err)
	}
	// What is stored now is the server's answer (what the installed schema kept of what was
	// sent), whatever the cache says until it catches up.
	s.memory.Remember(s.Obj, *s.kind.DeepCopy(status))
	if s.kind.Written != nil {
		s.kind.Written(s.Obj, &s.stored, status)
	}
	s.stored = *s.kind.DeepCopy(status) // not shared: the reconcile may go on changing the status
	return nil
}

// PatchMeta patches the object's metadata. The answer carries the status as stored, which may be
// older than this reconcile's: the status being built is kept. An object that is gone (NotFound)
// is released, and ErrGone stops the reconcile.
func (s *Scope[O, S]) PatchMeta(ctx context.Context, c client.Client, patch client.Patch) error {
	building := s.kind.DeepCopy(s.kind.Status(s.Obj))
	err := c.Patch(ctx, s.Obj, patch)
	*s.kind.Status(s.Obj) = *building
	if apierrors.IsNotFound(err) {
		s.released = true
		return ErrGone
	}
	return err
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
)

// machineScope is one reconcile of one MachineRequest: the objects it works on, the status it
// builds up, and the one place where the three kinds of error are turned into status and results.
type machineScope struct {
	mr *v1alpha1.MachineRequest
	// stored is the status as stored: what this manager last wrote, else the cached copy. The
	// status is written when it differs from this.
	stored   v1alpha1.MachineRequestStatus
	pc       *v1alpha1.ProviderConfig // nil when it does not exist
	recorder events.EventRecorder
	// released is set once the finalizer is removed: the MachineRequest is gone, or another
	// provider's, and gets no more status from us.
	released bool
	// limits are how long waiting may last before the machine is Failed.
	limits waitLimits
	// lazy changes need no write of their own: they are stored with the next write there is.
	lazy []func(*v1alpha1.MachineRequestStatus)
}

// waitLimits turn waits a caller cannot tell from progress into failures it can act on: the
// Butler bootstrap acts only on phase Failed, and gives up (deleting its cluster and every
// explanation with it) after 30 minutes.
type waitLimits struct {
	// configGrace is how long a machine without a VM waits on a problem only the user can fix.
	configGrace time.Duration
	// provisioning is how long a machine may take to become Running; 0 waits for ever.
	provisioning time.Duration
}

// newMachineScope starts a reconcile of mr. Its status starts from what this manager last wrote
// when the cache has not caught up with that write: decisions (events, the placement) and the
// next write then build on what is stored, not on an older copy.
func newMachineScope(mr *v1alpha1.MachineRequest, pc *v1alpha1.ProviderConfig, recorder events.EventRecorder, statuses *statusMemory[v1alpha1.MachineRequestStatus], limits waitLimits) *machineScope {
	if last, ok := statuses.last(mr); ok {
		mr.Status = *last.DeepCopy()
	}
	return &machineScope{mr: mr, stored: *mr.Status.DeepCopy(), pc: pc, recorder: recorder, limits: limits}
}

// setPhase changes the phase and stamps lastUpdated when it really changes.
func (s *machineScope) setPhase(p v1alpha1.MachinePhase) {
	if s.mr.Status.Phase == p {
		return
	}
	s.mr.Status.Phase = p
	now := metav1.Now()
	s.mr.Status.LastUpdated = &now
}

func (s *machineScope) setCondition(condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.mr.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: s.mr.Generation,
	})
}

// progressing records that the provider is working towards Running and what it waits for.
func (s *machineScope) progressing(reason, message string) {
	s.setCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
	s.setCondition(v1alpha1.ConditionProgressing, metav1.ConditionTrue, reason, message)
}

// healthy clears Degraded.
func (s *machineScope) healthy() {
	s.setCondition(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected, "")
}

func (s *machineScope) degraded(reason, message string) {
	s.setCondition(v1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, message)
}

// fail makes the MachineRequest Failed for this generation, with a Warning event the first time.
func (s *machineScope) fail(reason, message string) {
	first := s.mr.Status.Phase != v1alpha1.MachinePhaseFailed || s.mr.Status.FailureReason != reason
	s.setPhase(v1alpha1.MachinePhaseFailed)
	s.mr.Status.FailureReason = reason
	s.mr.Status.FailureMessage = message
	s.setCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
	s.setCondition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, reason, message)
	s.degraded(reason, message)
	if first {
		s.event(corev1.EventTypeWarning, reason, "Fail", message)
	}
}

// clearFailure forgets a previous failure before a retry. Ready and Degraded start afresh, so
// that the retry gets its own grace period and provisioning timeout (both count from their
// transitions).
func (s *machineScope) clearFailure() {
	s.mr.Status.FailureReason = ""
	s.mr.Status.FailureMessage = ""
	meta.RemoveStatusCondition(&s.mr.Status.Conditions, v1alpha1.ConditionReady)
	meta.RemoveStatusCondition(&s.mr.Status.Conditions, v1alpha1.ConditionDegraded)
}

// hasVM reports whether a VM was recorded for the machine (its providerID is written as soon as
// the VM exists).
func (s *machineScope) hasVM() bool {
	legacy := s.mr.Status.Placement //nolint:staticcheck // SA1019: recorded by an earlier version, until moved to the annotation
	return s.mr.Status.ProviderID != "" || (legacy != nil && legacy.VMUID != "")
}

// placed reports whether anything records where the machine lives: a place, or a VM.
func (s *machineScope) placed() bool { return placeRecorded(s.mr) }

// placeRecorded reports whether anything records where the machine lives: the placement
// annotation, a status.placement of an earlier version, or a providerID.
func placeRecorded(mr *v1alpha1.MachineRequest) bool {
	_, annotated := mr.Annotations[v1alpha1.AnnotationPlacement]
	legacy := mr.Status.Placement //nolint:staticcheck // SA1019: recorded by an earlier version, until moved to the annotation
	return annotated || legacy != nil || mr.Status.ProviderID != ""
}

// provisioningLeft says how much of the provisioning timeout is left to a machine that has not
// been Running since its attempt began (the transition of its Ready condition to False, reset on
// a retry); ok is false when no timeout applies (it is Running, being deleted, or the timeout is 0).
func (s *machineScope) provisioningLeft() (left time.Duration, ok bool) {
	if s.limits.provisioning <= 0 || s.deleting() || s.mr.Status.Phase == v1alpha1.MachinePhaseRunning || s.mr.Status.Phase == v1alpha1.MachinePhaseFailed {
		return 0, false
	}
	c := meta.FindStatusCondition(s.mr.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionFalse {
		return 0, false
	}
	return s.limits.provisioning - time.Since(c.LastTransitionTime.Time), true
}

// timedOut fails a machine that has not become Running within the provisioning timeout, with what
// it waits for as the message. It reports whether it did, and otherwise when the timeout runs out.
func (s *machineScope) timedOut(why string) (bool, time.Duration) {
	left, ok := s.provisioningLeft()
	switch {
	case !ok:
		return false, 0
	case left > 0:
		return false, left
	}
	s.fail(v1alpha1.ReasonProvisioningTimeout, fmt.Sprintf("not Running within the provisioning timeout (%s, --provisioning-timeout): %s", s.limits.provisioning, why))
	return true, 0
}

func (s *machineScope) event(eventType, reason, action, message string) {
	recordEvent(s.recorder, s.mr, eventType, reason, action, message)
}

// maxEventNote is the longest note, in bytes, the API server accepts in an event.
const maxEventNote = 1024

// recordEvent records an event whose note is message, shortened to what the API server accepts.
// The message is passed as an argument, never as a format: it may contain '%'.
func recordEvent(recorder events.EventRecorder, obj runtime.Object, eventType, reason, action, message string) {
	recorder.Eventf(obj, nil, eventType, reason, action, "%s", truncateNote(message))
}

// truncateNote cuts a note to maxEventNote bytes on a rune boundary: a multibyte character cut in
// half would be replaced by a 3-byte U+FFFD when the event is encoded and push it over the limit.
func truncateNote(message string) string {
	const ellipsis = " [...]"
	if len(message) <= maxEventNote {
		return message
	}
	cut := maxEventNote - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut] + ellipsis
}

// outcome is the one place where the kinds of error become status and a result:
//   - nil: done for now; result says when to look again;
//   - harvester.WaitingError: not an error; the conditions say what we wait for; look again later;
//   - harvester.PermanentError: the MachineRequest is Failed for this generation;
//   - a conflict: the object changed since it was read; look again soon, nothing to report;
//   - anything else is transient: Degraded says why and the error goes back for backoff.
//
// A result with RequeueAfter is never returned together with an error.
func (s *machineScope) outcome(ctx context.Context, res ctrl.Result, err error) (ctrl.Result, error) {
	if w, ok := harvester.AsWaiting(err); ok {
		s.waiting(w)
		s.observed()
		next := w.RetryAfter
		if configReasons[w.Reason] && !s.deleting() && !s.hasVM() {
			left := graceLeft(s.mr.Status.Conditions, s.limits.configGrace)
			if left <= 0 {
				s.fail(w.Reason, fmt.Sprintf("%s (unresolved for %s, --config-grace-period)", w.Message, s.limits.configGrace))
				return ctrl.Result{}, nil
			}
			next = min(next, left+timerSlack)
		}
		if failed, left := s.timedOut(w.Message); failed {
			return ctrl.Result{}, nil
		} else if left > 0 {
			next = min(next, left+timerSlack)
		}
		return ctrl.Result{RequeueAfter: next}, nil
	}
	if p, ok := harvester.AsPermanent(err); ok {
		s.fail(p.Reason, p.Message)
		s.observed()
		return ctrl.Result{}, nil
	}
	if errors.Is(err, errMachineRequestGone) {
		return ctrl.Result{}, nil
	}
	if apierrors.IsConflict(err) {
		// Someone wrote the object since we read it: nothing is wrong, read it again.
		log.FromContext(ctx).V(1).Info("Conflict; retrying with a fresh copy", "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry, Priority: ptr.To(0)}, nil
	}
	if err != nil {
		s.degraded(v1alpha1.ReasonHarvesterUnavailable, err.Error())
		return ctrl.Result{}, err
	}
	s.observed()
	return res, nil
}

// timerSlack is added to a requeue meant to find a timer run out, so that it has.
const timerSlack = 10 * time.Millisecond

// configReasons are waits only the user can end: configuration, credentials, permissions. A
// machine with no VM that waits on one of them is Failed after the grace period (a caller that acts
// on Failed, such as the Butler bootstrap, can then act), and is retried by itself once the
// configuration passes again (see configFixed).
var configReasons = map[string]bool{
	v1alpha1.ReasonProviderConfigNotFound:  true,
	v1alpha1.ReasonInvalidProviderConfig:   true,
	v1alpha1.ReasonCredentialsUnavailable:  true,
	v1alpha1.ReasonUntrustedEndpoint:       true,
	v1alpha1.ReasonInsecureCredentials:     true,
	v1alpha1.ReasonPermissionDenied:        true,
	v1alpha1.ReasonProviderConfigNotShared: true,
	v1alpha1.ReasonProviderConfigNotReady:  true,
}

// degradingReasons are waits that need the user to act, so they also set Degraded.
var degradingReasons = map[string]bool{
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

func (s *machineScope) waiting(w *harvester.WaitingError) {
	// A wait that needs the user is worth an event when it starts (or its reason changes); the
	// deletion path records its own.
	if c := meta.FindStatusCondition(s.mr.Status.Conditions, v1alpha1.ConditionProgressing); degradingReasons[w.Reason] &&
		!s.deleting() && (c == nil || c.Reason != w.Reason) {
		s.event(corev1.EventTypeWarning, w.Reason, "Provision", w.Message)
	}
	if s.deleting() {
		s.setCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, w.Reason, w.Message)
		s.setCondition(v1alpha1.ConditionProgressing, metav1.ConditionTrue, w.Reason, w.Message)
	} else {
		s.progressing(w.Reason, w.Message)
	}
	if degradingReasons[w.Reason] {
		s.degraded(w.Reason, w.Message)
	} else {
		s.healthy()
	}
}

func (s *machineScope) deleting() bool { return !s.mr.DeletionTimestamp.IsZero() }

// observed records that the status describes the current generation. The API server raises the
// generation when a deletion starts: that alone is not worth a write, so during deletion it
// rides along with the next write there is.
func (s *machineScope) observed() {
	generation := s.mr.Generation
	if s.deleting() {
		s.setLazily(func(st *v1alpha1.MachineRequestStatus) { st.ObservedGeneration = generation })
		return
	}
	s.mr.Status.ObservedGeneration = generation
}

// writeStatus stores the status if it differs from what is stored, as a merge patch from what is
// stored: the cached copy may lag behind this manager's last write, so the comparison and the
// patch start from the answer to that write. A MachineRequest that is gone (its finalizer was
// just removed, or the write answers NotFound) has no status left to write. It is the last write
// of a reconcile: nothing is created after it.
func (s *machineScope) writeStatus(ctx context.Context, c client.Client, statuses *statusMemory[v1alpha1.MachineRequestStatus]) error {
	if s.released || equality.Semantic.DeepEqual(s.stored, s.mr.Status) {
		return nil
	}
	for _, change := range s.lazy {
		change(&s.mr.Status)
	}
	s.lazy = nil
	base := s.mr.DeepCopy()
	base.Status = s.stored
	err := c.Status().Patch(ctx, s.mr, client.MergeFrom(base))
	if apierrors.IsNotFound(err) {
		s.released = true
		return nil
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "Patching MachineRequest status")
		return errors.Join(errors.New("patch MachineRequest status"), err)
	}
	// What is stored now is the server's answer (what the installed schema kept of what was
	// sent), whatever the cache says until it catches up.
	status := s.mr.Status
	statuses.remember(s.mr, *status.DeepCopy())
	// Observed only once the status that says Running is stored, so that a failed patch (and
	// its retry) does not count the machine twice.
	if s.stored.Phase != v1alpha1.MachinePhaseRunning && status.Phase == v1alpha1.MachinePhaseRunning {
		metrics.ObserveProvisioned(s.mr.CreationTimestamp.Time, time.Now())
	}
	s.stored = *status.DeepCopy() // not shared: the reconcile goes on changing s.mr.Status
	return nil
}

// patchMeta patches the MachineRequest's metadata. The answer carries the status as stored, which
// may be older than this reconcile's: the status being built is kept. A MachineRequest that is
// gone (NotFound) is released, and errMachineRequestGone stops the reconcile.
func (s *machineScope) patchMeta(ctx context.Context, c client.Client, patch client.Patch) error {
	status := s.mr.Status
	err := c.Patch(ctx, s.mr, patch)
	s.mr.Status = status
	if apierrors.IsNotFound(err) {
		s.released = true
		return errMachineRequestGone
	}
	return err
}

// setLazily records a change to the status that is not worth a write of its own: it is stored
// with the next write there is for another reason. It is for what the provider finds again
// anyway, such as a new VM's UID and providerID (found by name and ownership until recorded).
func (s *machineScope) setLazily(change func(*v1alpha1.MachineRequestStatus)) {
	s.lazy = append(s.lazy, change)
}

// conflictRetry is how soon an object that changed under us is looked at again.
const conflictRetry = 200 * time.Millisecond

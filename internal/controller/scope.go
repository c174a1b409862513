package controller

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
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
	mr       *v1alpha1.MachineRequest
	original *v1alpha1.MachineRequest
	pc       *v1alpha1.ProviderConfig // nil when it does not exist
	recorder events.EventRecorder
	// released is set once the finalizer is removed from a MachineRequest being deleted.
	released bool
}

func newMachineScope(mr *v1alpha1.MachineRequest, pc *v1alpha1.ProviderConfig, recorder events.EventRecorder) *machineScope {
	return &machineScope{mr: mr, original: mr.DeepCopy(), pc: pc, recorder: recorder}
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

// creatingSince is when the machine entered Creating (zero if unknown or not Creating).
func (s *machineScope) creatingSince() time.Time {
	if s.mr.Status.Phase != v1alpha1.MachinePhaseCreating || s.mr.Status.LastUpdated == nil {
		return time.Time{}
	}
	return s.mr.Status.LastUpdated.Time
}

// clearFailure forgets a previous failure before a retry.
func (s *machineScope) clearFailure() {
	s.mr.Status.FailureReason = ""
	s.mr.Status.FailureMessage = ""
}

func (s *machineScope) event(eventType, reason, action, message string) {
	recordEvent(s.recorder, s.mr, eventType, reason, action, message)
}

// maxEventNote is the longest note the API server accepts in an event.
const maxEventNote = 1024

// recordEvent records an event whose note is message, shortened to what the API server accepts.
// The message is passed as an argument, never as a format: it may contain '%'.
func recordEvent(recorder events.EventRecorder, obj runtime.Object, eventType, reason, action, message string) {
	if len(message) > maxEventNote {
		message = message[:maxEventNote-len(" [...]")] + " [...]"
	}
	recorder.Eventf(obj, nil, eventType, reason, action, "%s", message)
}

// outcome is the one place where the kinds of error become status and a result:
//   - nil: done for now; result says when to look again;
//   - harvester.WaitingError: not an error; the conditions say what we wait for; look again later;
//   - harvester.PermanentError: the MachineRequest is Failed for this generation;
//   - anything else is transient: Degraded says why and the error goes back for backoff.
//
// A result with RequeueAfter is never returned together with an error.
func (s *machineScope) outcome(res ctrl.Result, err error) (ctrl.Result, error) {
	if w, ok := harvester.AsWaiting(err); ok {
		s.waiting(w)
		s.observed()
		return ctrl.Result{RequeueAfter: w.RetryAfter}, nil
	}
	if p, ok := harvester.AsPermanent(err); ok {
		s.fail(p.Reason, p.Message)
		s.observed()
		return ctrl.Result{}, nil
	}
	if err != nil {
		s.degraded(v1alpha1.ReasonHarvesterUnavailable, err.Error())
		return ctrl.Result{}, err
	}
	s.observed()
	return res, nil
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

// observed records that the status describes the current generation.
func (s *machineScope) observed() { s.mr.Status.ObservedGeneration = s.mr.Generation }

// patchStatus writes the status once, if it changed. A MachineRequest that is gone (its
// finalizer was just removed) has no status left to write.
func (s *machineScope) patchStatus(ctx context.Context, c client.Client) error {
	if s.released || equality.Semantic.DeepEqual(s.original.Status, s.mr.Status) {
		return nil
	}
	err := c.Status().Patch(ctx, s.mr, client.MergeFrom(s.original))
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "Patching MachineRequest status")
		return errors.Join(errors.New("patch MachineRequest status"), err)
	}
	// Observed only once the status that says Running is stored, so that a failed patch (and
	// its retry) does not count the machine twice.
	if s.original.Status.Phase != v1alpha1.MachinePhaseRunning && s.mr.Status.Phase == v1alpha1.MachinePhaseRunning {
		metrics.ObserveProvisioned(s.mr.CreationTimestamp.Time, time.Now())
	}
	return nil
}

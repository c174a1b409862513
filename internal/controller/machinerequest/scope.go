package machinerequest

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/outcome"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// machineScope is one reconcile of one MachineRequest: the objects it works on, and the status
// it builds up in an objstatus.Scope, which turns the kinds of error into status and a result.
type machineScope struct {
	*objstatus.Scope[*v1alpha1.MachineRequest, v1alpha1.MachineRequestStatus]
	mr *v1alpha1.MachineRequest
	pc *v1alpha1.ProviderConfig // nil when it does not exist
	// limits are how long waiting may last before the machine is Failed.
	limits waitLimits
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

// machineStatus is where a MachineRequest keeps its status.
var machineStatus = objstatus.Kind[*v1alpha1.MachineRequest, v1alpha1.MachineRequestStatus]{
	Name:     "MachineRequest",
	Status:   func(mr *v1alpha1.MachineRequest) *v1alpha1.MachineRequestStatus { return &mr.Status },
	DeepCopy: (*v1alpha1.MachineRequestStatus).DeepCopy,
	Fields: func(st *v1alpha1.MachineRequestStatus) objstatus.Fields {
		return objstatus.Fields{Phase: (*string)(&st.Phase), LastUpdated: &st.LastUpdated, Conditions: &st.Conditions,
			FailureReason: &st.FailureReason, FailureMessage: &st.FailureMessage, ObservedGeneration: &st.ObservedGeneration}
	},
	FailedPhase: string(v1alpha1.MachinePhaseFailed),
	Conditions:  outcome.ButlerConditions,
	// Observed only once the status that says Running is stored, so that a failed patch (and
	// its retry) does not count the machine twice.
	Written: func(mr *v1alpha1.MachineRequest, before, after *v1alpha1.MachineRequestStatus) {
		if before.Phase != v1alpha1.MachinePhaseRunning && after.Phase == v1alpha1.MachinePhaseRunning {
			metrics.ObserveProvisioned(mr.CreationTimestamp.Time, time.Now())
		}
	},
}

// newMachineScope starts a reconcile of mr (see objstatus.New). Its policy is its reasons'
// behaviour (package api/reasons): waits on what only the user can fix (Attention, Configuration)
// say so in Degraded, with a Warning event when they begin; a machine without a VM that waits on
// its configuration (Configuration) is Failed after the grace period, and retried by itself once
// the configuration passes again (see configFixed); any machine is Failed when it is not Running
// within the provisioning timeout; unexpected errors are HarvesterUnavailable.
func newMachineScope(mr *v1alpha1.MachineRequest, pc *v1alpha1.ProviderConfig, recorder events.EventRecorder, statuses *objstatus.Memory[v1alpha1.MachineRequestStatus], limits waitLimits) *machineScope {
	s := &machineScope{mr: mr, pc: pc, limits: limits}
	s.Scope = objstatus.New(mr, machineStatus, objstatus.Policy{
		Action:           "Provision",
		FailAction:       "Fail",
		Degrading:        reasons.Degrading,
		NewWaitCondition: v1alpha1.ConditionProgressing,
		Configuration:    reasons.OnConfiguration,
		Grace:            limits.configGrace,
		GraceExpired:     "%s (unresolved for %s, --config-grace-period)",
		GraceApplies:     func() bool { return !s.hasVM() },
		Deadline:         s.timedOut,
		TransientReason:  v1alpha1.ReasonHarvesterUnavailable,
	}, recorder, statuses)
	return s
}

func (s *machineScope) setPhase(p v1alpha1.MachinePhase) { s.SetPhase(string(p)) }

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
	if s.limits.provisioning <= 0 || s.Deleting() || s.mr.Status.Phase == v1alpha1.MachinePhaseRunning || s.mr.Status.Phase == v1alpha1.MachinePhaseFailed {
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
	s.Fail(v1alpha1.ReasonProvisioningTimeout, fmt.Sprintf("not Running within the provisioning timeout (%s, --provisioning-timeout): %s", s.limits.provisioning, why))
	return true, 0
}

// nothingCreated reports whether the status of a machine without a recorded place shows that
// nothing can have been created for it: it never got past Pending, or failed on its
// configuration (which is checked before anything is created).
func nothingCreated(st v1alpha1.MachineRequestStatus) bool {
	switch st.Phase {
	case "", v1alpha1.MachinePhasePending:
		return true
	case v1alpha1.MachinePhaseFailed:
		return reasons.OnConfiguration(st.FailureReason)
	}
	return false
}

package controller

import (
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// The engine speaks its own words (harvester.Reason*); the MachineRequest's reasons are spelled the
// same except where machineRequestReasons says otherwise, and the advice only a MachineRequest's
// user can follow (which field to change, which annotation to set) is added here.

// machineRequestReasons are the engine's reasons a MachineRequest spells differently.
var machineRequestReasons = map[string]string{
	harvester.ReasonNameTaken:                           v1alpha1.ReasonNameConflict,
	harvester.ReasonNameTakenByAnotherManagementCluster: v1alpha1.ReasonNameConflict,
	harvester.ReasonInvalidEndpoint:                     v1alpha1.ReasonInvalidProviderConfig,
}

// machineRequestAdvice is what a MachineRequest's user can do about an engine reason, added to the
// engine's message.
var machineRequestAdvice = map[string]string{
	harvester.ReasonVMDeleted: ": set annotation " + v1alpha1.AnnotationRetry +
		"=true on the MachineRequest (or change its spec) to create a new VM, or delete the MachineRequest",
	harvester.ReasonNameTaken: "; choose another spec.machineName, or delete that object on Harvester",
	harvester.ReasonNameTakenByAnotherManagementCluster: ". If that cluster is gone (a bootstrap run again), hand the machine over with its VM, disks and cloud-init Secret: set annotation " +
		v1alpha1.AnnotationHandOver + "=true on this MachineRequest",
}

// asMachineRequestError gives an error of the engine the MachineRequest's reason and advice.
// Errors of the MachineRequest's own (spelled as its API) pass unchanged.
func asMachineRequestError(err error) error {
	if w, ok := harvester.AsWaiting(err); ok {
		if reason, advice, changed := machineRequestTerms(w.Reason); changed {
			return &harvester.WaitingError{Reason: reason, RetryAfter: w.RetryAfter, Message: w.Message + advice}
		}
	}
	if p, ok := harvester.AsPermanent(err); ok {
		if reason, advice, changed := machineRequestTerms(p.Reason); changed {
			return &harvester.PermanentError{Reason: reason, Message: p.Message + advice}
		}
	}
	return err
}

func machineRequestTerms(engineReason string) (reason, advice string, changed bool) {
	reason, renamed := machineRequestReasons[engineReason]
	if !renamed {
		reason = engineReason
	}
	advice, advised := machineRequestAdvice[engineReason]
	return reason, advice, renamed || advised
}

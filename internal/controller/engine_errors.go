package controller

import (
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// The engine speaks its own words (harvester.Reason*) and has its own error classes. At the
// boundary they become the front door's (objstatus.WaitingError, objstatus.PermanentError), in
// the reasons of the front door's API and with the advice only its users can follow (which field
// to change, which annotation to set). The MachineRequest's reasons are spelled as the engine's
// except where machineRequestReasons says otherwise.

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
	harvester.ReasonNameTaken: "; choose another spec.machineName. That object may be another machine's live node: find out whose it is (above) before anyone deletes it",
	harvester.ReasonNameTakenByAnotherManagementCluster: ". If that cluster is gone (a bootstrap run again), hand the machine over with its VM, disks and cloud-init Secret: set annotation " +
		v1alpha1.AnnotationHandOver + "=true on this MachineRequest",
}

// machineRequestTerms is an engine reason in the MachineRequest's words, and the advice for it.
func machineRequestTerms(engineReason string) (reason, advice string) {
	reason, renamed := machineRequestReasons[engineReason]
	if !renamed {
		reason = engineReason
	}
	return reason, machineRequestAdvice[engineReason]
}

// harvesterMachineAdvice is what a HarvesterMachine's user can do about an engine reason: the
// same remedies as a MachineRequest's, through Cluster API (a machine is replaced, not retried).
var harvesterMachineAdvice = map[string]string{
	harvester.ReasonVMDeleted: ": delete the Machine that owns this HarvesterMachine (a MachineHealthCheck does so by itself) and Cluster API replaces it with a new one",
	harvester.ReasonNameTaken: ". The VM is named after the HarvesterMachine and may be another cluster's live node: find out whose it is (above) before anyone deletes it; " +
		"to go on without it, delete this Machine so that Cluster API makes one of another name",
	harvester.ReasonNameTakenByAnotherManagementCluster: ". It may be that cluster's live node. If that management cluster is gone for good, the platform operator may allow its machines to be handed over " +
		"(the manager's flag --" + HandOverFlag + "=<its kube-system UID>); then set annotation " + v1alpha1.AnnotationHandOver +
		"=true on this HarvesterMachine to take the VM, disks and cloud-init Secret over",
}

// harvesterMachineTerms is an engine reason in the HarvesterMachine's words (spelled as the
// MachineRequest's), and the advice for it.
func harvesterMachineTerms(engineReason string) (reason, advice string) {
	reason, _ = machineRequestTerms(engineReason)
	return reason, harvesterMachineAdvice[engineReason]
}

// sameTerms keeps the engine's reasons (a front door that maps them afterwards, such as
// asImageSyncError, or the ProviderConfig's checks, spelled as the engine's).
func sameTerms(engineReason string) (reason, advice string) { return engineReason, "" }

// asMachineRequestError is an error as a MachineRequest reports it: the engine's in the
// MachineRequest's reasons, with its advice.
func asMachineRequestError(err error) error { return fromEngineIn(err, machineRequestTerms) }

// fromEngine converts the engine's error classes, keeping their reasons.
func fromEngine(err error) error { return fromEngineIn(err, sameTerms) }

// fromEngineIn is the one place where the engine's error classes (harvester.WaitingError,
// harvester.PermanentError) become the front door's, in terms. Everything else (the front door's
// own errors, which the engine hands back from MachineSpec.Gate and Record, conflicts, transient
// errors) is returned unchanged. Whatever classifies an error the engine may have returned
// passes it through here first.
func fromEngineIn(err error, terms func(string) (reason, advice string)) error {
	if w, ok := harvester.AsWaiting(err); ok {
		reason, advice := terms(w.Reason)
		return &objstatus.WaitingError{Reason: reason, Message: w.Message + advice, RetryAfter: w.RetryAfter}
	}
	if p, ok := harvester.AsPermanent(err); ok {
		reason, advice := terms(p.Reason)
		return &objstatus.PermanentError{Reason: reason, Message: p.Message + advice}
	}
	return err
}

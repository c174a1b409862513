package machinerequest

import (
	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/outcome"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// The engine speaks its own words (harvester.Reason*) and has its own error classes. At the
// boundary they become the front door's (errkind.WaitingError, errkind.PermanentError), in
// the reasons of the front door's API and with the advice only its users can follow (which field
// to change, which annotation to set). The MachineRequest's reasons are spelled as the engine's
// except where outcome.APIReason says otherwise.

// machineRequestAdvice is what a MachineRequest's user can do about an engine reason, added to the
// engine's message.
var machineRequestAdvice = map[string]string{
	reasons.VMDeleted: ": set annotation " + v1alpha1.AnnotationRetry +
		"=true on the MachineRequest (or change its spec) to create a new VM, or delete the MachineRequest",
	harvester.ReasonNameTaken: "; choose another spec.machineName. That object may be another machine's live node: find out whose it is (above) before anyone deletes it",
	reasons.VMUnschedulable:   ". A MachineRequest's CPUs and memory are its spec.cpu and spec.memoryMB",
	reasons.ImageNotFound:     " in the MachineRequest's spec.image (or, when it names none, the ProviderConfig's harvester.imageName)",
	reasons.VolumeMissing:     "; delete and recreate the MachineRequest",
	reasons.ImageImportFailed: ", then set annotation " + v1alpha1.AnnotationRetry + "=true on the MachineRequest to retry it",
	harvester.ReasonNameTakenByAnotherManagementCluster: ". If that cluster is gone (a bootstrap run again), hand the machine over with its VM, disks and cloud-init Secret: set annotation " +
		v1alpha1.AnnotationHandOver + "=true on this MachineRequest",
}

// machineRequestTerms is an engine reason in the MachineRequest's words, and the advice for it.
func machineRequestTerms(engineReason string) (reason, advice string) {
	return outcome.APIReason(engineReason), machineRequestAdvice[engineReason]
}

// asMachineRequestError is an error as a MachineRequest reports it: the engine's in the
// MachineRequest's reasons, with its advice.
func asMachineRequestError(err error) error { return outcome.FromEngineIn(err, machineRequestTerms) }

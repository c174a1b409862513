package clusterapi

import (
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/frontdoor"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// harvesterMachineAdvice is what a HarvesterMachine's user can do about an engine reason: the
// same remedies as a MachineRequest's, through Cluster API (a machine is replaced, not retried).
var harvesterMachineAdvice = map[string]string{
	harvester.ReasonVMDeleted:         ": delete the Machine that owns this HarvesterMachine (a MachineHealthCheck does so by itself) and Cluster API replaces it with a new one",
	harvester.ReasonNameTaken:         "; the VM is named after the HarvesterMachine: delete that object on Harvester, or delete the Machine so that Cluster API makes one of another name",
	harvester.ReasonVMUnschedulable:   ". A HarvesterMachine's CPUs and memory are its spec.cpu and spec.memory, set in the HarvesterMachineTemplate: give the MachineDeployment or control plane a new template",
	harvester.ReasonImageNotFound:     " in the HarvesterMachineTemplate's spec.template.spec.image (or, when it names none, the ProviderConfig's harvester.imageName)",
	harvester.ReasonVolumeMissing:     ": delete the Machine that owns this HarvesterMachine and Cluster API replaces it",
	harvester.ReasonImageImportFailed: ", then delete the Machine that owns this HarvesterMachine and Cluster API replaces it",
	harvester.ReasonNameTakenByAnotherManagementCluster: ". If that cluster is gone, hand the machine over with its VM, disks and cloud-init Secret: set annotation " +
		v1alpha1.AnnotationHandOver + "=true on this HarvesterMachine",
}

// harvesterMachineTerms is an engine reason in the HarvesterMachine's words, and the advice for it.
func harvesterMachineTerms(engineReason string) (reason, advice string) {
	return frontdoor.APIReason(engineReason), harvesterMachineAdvice[engineReason]
}

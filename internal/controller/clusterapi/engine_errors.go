package clusterapi

import (
	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/outcome"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// harvesterMachineAdvice is what a HarvesterMachine's user can do about an engine reason: the
// same remedies as a MachineRequest's, through Cluster API (a machine is replaced, not retried).
var harvesterMachineAdvice = map[string]string{
	reasons.VMDeleted: ": delete the Machine that owns this HarvesterMachine (a MachineHealthCheck does so by itself) and Cluster API replaces it with a new one",
	harvester.ReasonNameTaken: ". The VM is named after the HarvesterMachine and may be another cluster's live node: find out whose it is (above) before anyone deletes it; " +
		"to go on without it, delete this Machine so that Cluster API makes one of another name",
	reasons.VMUnschedulable:   ". A HarvesterMachine's CPUs and memory are its spec.cpu and spec.memory, set in the HarvesterMachineTemplate: give the MachineDeployment or control plane a new template",
	reasons.ImageNotFound:     " in the HarvesterMachineTemplate's spec.template.spec.image (or, when it names none, the ProviderConfig's harvester.imageName)",
	reasons.VolumeMissing:     ": delete the Machine that owns this HarvesterMachine and Cluster API replaces it",
	reasons.ImageImportFailed: ", then delete the Machine that owns this HarvesterMachine and Cluster API replaces it",
	harvester.ReasonNameTakenByAnotherManagementCluster: ". It may be that cluster's live node. If that management cluster is gone for good, the platform operator may allow its machines to be handed over " +
		"(the manager's flag --" + options.HandOverFlag + "=<its kube-system UID>); then set annotation " + infrav1.AnnotationHandOver +
		"=true on this HarvesterMachine to take the VM, disks and cloud-init Secret over",
}

// harvesterMachineTerms is an engine reason in the HarvesterMachine's words, and the advice for it.
func harvesterMachineTerms(engineReason string) (reason, advice string) {
	return outcome.APIReason(engineReason), harvesterMachineAdvice[engineReason]
}

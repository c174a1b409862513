package v1alpha1

// Annotations of HarvesterClusters and HarvesterMachines. Each key is the one a MachineRequest
// carries for the same meaning (api/v1alpha1), so that a user meets one vocabulary for both kinds
// of machine; the provider's objects on Harvester are labelled the same way for both.
const (
	// AnnotationSkipHarvesterCleanup, set to "true" on a HarvesterCluster or HarvesterMachine
	// being deleted, releases it without deleting anything on Harvester when its deletion is
	// blocked (its ProviderConfig, credentials or Harvester gone for good; the DeletionBlocked
	// message says so). Where the deletion is not blocked it counts only if the platform operator
	// allows it (the manager's flag --cluster-api-skip-cleanup-anytime): a tenant who writes these objects
	// cannot leave VMs or credentials that nothing manages.
	AnnotationSkipHarvesterCleanup = "harvester.butler.butlerlabs.dev/skip-cleanup"
	// AnnotationPlacement records where on Harvester a HarvesterMachine's VM lives, as JSON
	// ({"clusterID":...,"server":...,"namespace":...,"name":...}). The provider writes it before
	// it creates anything, reads it back from the API server's answer, and never changes it; a
	// record the provider did not write is refused (PlacementRefused). Do not edit it.
	AnnotationPlacement = "harvester.butler.butlerlabs.dev/placement"
	// AnnotationHandOver, set to "true" on a HarvesterMachine, asks to take over the VM (with its
	// disks and cloud-init Secret) that a HarvesterMachine of the same namespace and name made
	// from another management cluster. It counts only for the management clusters the platform
	// operator names with the manager's flag --harvestermachine-hand-over-from.
	AnnotationHandOver = "harvester.butler.butlerlabs.dev/hand-over"
)

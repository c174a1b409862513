package v1alpha1

import "github.com/butlerdotdev/butler-provider-harvester/api/reasons"

// Reasons of the HarvesterMachine about its ownership of the machine on Harvester (see
// docs/architecture.md, "Ownership and clusterctl move").
const (
	// ReasonVMTakenOver: the machine's VM, disks and cloud-init Secret on Harvester were
	// labelled for this HarvesterMachine: it is the same machine re-created by clusterctl move or
	// a restore (its bootstrap data proves it), an earlier HarvesterMachine of the same name, or
	// one the platform operator allowed to be handed over. Nothing is created or deleted.
	ReasonVMTakenOver = reasons.VMTakenOver
	// ReasonCleanupSkipped: a deleted HarvesterCluster or HarvesterMachine was released
	// without deleting anything on Harvester, because of annotation
	// harvester.butler.butlerlabs.dev/skip-cleanup: its deletion was blocked, or the platform
	// operator lets the annotation count at any time.
	ReasonCleanupSkipped = reasons.CleanupSkipped
	// ReasonCleanupNotSkipped: a deleted HarvesterCluster or HarvesterMachine asked to be
	// released without deleting anything on Harvester (annotation
	// harvester.butler.butlerlabs.dev/skip-cleanup), but its deletion was not blocked, so what it
	// made on Harvester was deleted: the annotation releases only a blocked deletion, unless the
	// platform operator lets it count at any time (manager flag
	// --cluster-api-skip-cleanup-anytime).
	ReasonCleanupNotSkipped = reasons.CleanupNotSkipped
)

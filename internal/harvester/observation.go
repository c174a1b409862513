package harvester

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Deletion is where the deletion of a machine stands.
type Deletion struct {
	// Done is true once nothing of ours is left.
	Done bool
	// Remaining names what is left: the VM, or once it is gone its disks and cloud-init Secret.
	Remaining string
	// ShutdownGrace is how long what is left may take to go by itself: while the VM is left, its
	// terminationGracePeriodSeconds as the API server answered (Harvester defaults it to 120 s,
	// KubeVirt to 30 s), the time KubeVirt gives its guest to shut down before it stops it. A
	// deletion waiting that long is not held up. 0 once the VM is gone.
	ShutdownGrace time.Duration
	// Watched is true when the machine's objects are watched (see Observation.Watched).
	Watched bool
	// unwatched says that what remains includes objects no watch follows (a VM's state claim):
	// the deletion is polled as if nothing were watched.
	unwatched bool
}

// Observation is the state of a machine on Harvester.
type Observation struct {
	// Namespace and Name are the VM's (empty when there is no VM).
	Namespace, Name string
	// VMExists is true when a VM of ours with the machine's name exists.
	VMExists bool
	// VMCreated is true when this call created the VM.
	VMCreated bool
	// VMUID is the VM's UID (empty when there is no VM).
	VMUID types.UID
	// TookOverFrom is set when this call took the VM over from an earlier MachineRequest of the
	// same namespace and name: that MachineRequest's UID.
	TookOverFrom types.UID
	// Predecessor is whom the VM was taken over from by this call (see TookOverFrom), and how.
	Predecessor Predecessor
	// FailureDomain is the failure domain the VM was placed in when created
	// (AnnotationFailureDomain), "" if none was recorded.
	FailureDomain string
	// ProviderID is "harvester://<VM uid>".
	ProviderID string
	// PrintableStatus is KubeVirt's one-word VM status (Starting, Running, Stopped, ...).
	PrintableStatus string
	// VMIPhase is the VirtualMachineInstance's phase; empty when there is no VMI.
	VMIPhase string
	// Running is true when the VMI is in phase Running.
	Running bool
	// RunningSince is when the VMI entered phase Running, if KubeVirt reported it.
	RunningSince time.Time
	Addresses    Addresses
	// VMCreatedAt is when the VM was created: how long its start has taken.
	VMCreatedAt time.Time
	// Diagnosis explains, when the VM is not running, what Harvester reports is wrong; nil while
	// it is simply starting (see diagnose).
	Diagnosis *Diagnosis
	// Starting describes, when the VM is not running, where its start stands (KubeVirt's status,
	// the VMI's phase and the condition holding it up, disks not bound yet), for a caller to
	// report once the start takes longer than it should.
	Starting string
	// DiagnoseAgainAt, if set, is when a diagnosis may have appeared with no change on Harvester
	// to announce it (see schedulingGrace): the caller looks again then.
	DiagnoseAgainAt time.Time
	// Notice, set with VMCreated, is what the caller should tell its user about how the VM was
	// made, though nothing is wrong (a check that could not run).
	Notice string
	// Watched is true when the machine's objects are watched: every change of its VM, VMI,
	// disks and cloud-init Secret that matters reaches the Notifier, so a caller waiting on them
	// need only poll in case an event was missed. False when the cluster's credentials do not
	// allow watching them (they are read live, and only polling finds a change).
	Watched bool
}

// ProviderIDPrefix starts every providerID this provider writes.
const ProviderIDPrefix = "harvester://"

// UIDOfProviderID returns the VM UID of a providerID ("harvester://<uid>", or the bare UID the
// published provider wrote).
func UIDOfProviderID(id string) string {
	return strings.TrimPrefix(id, ProviderIDPrefix)
}

// deletionRetry is how soon to look again at objects that are being deleted.
const deletionRetry = 5 * time.Second

// Predecessor is the owner a machine's objects were made for before they were taken over.
type Predecessor struct {
	UID types.UID
	// Cluster is the management cluster it was in ("" if none was recorded).
	Cluster string
	// Succession is true when the objects were taken over as the same machine re-created
	// (clusterctl move, a restore), false for an earlier owner of the same name (see
	// takeOverSuperseded).
	Succession bool
}

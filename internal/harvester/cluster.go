package harvester

import (
	"context"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
)

// Machines creates, observes and deletes machines on one Harvester cluster.
type Machines interface {
	// Identity names the cluster; machines record it where they are created.
	Identity(ctx context.Context) (ClusterIdentity, error)
	// Ensure creates whatever of the machine does not exist yet (cloud-init Secret, disks, VM) and
	// returns what it observes. It is idempotent and resumes an interrupted create. It never
	// changes an object that is not ours. When spec.VMUID is set, that VM must still exist: it is
	// never replaced by a new one (a PermanentError with reasons.VMDeleted says so).
	Ensure(ctx context.Context, spec *MachineSpec) (Observation, error)
	// Observe reads the machine's VM and VMI without changing anything.
	Observe(ctx context.Context, ref MachineRef) (Observation, error)
	// Delete removes our VM, disks and cloud-init Secret, and says where that stands: done once
	// all are gone (deleting what is gone is success).
	Delete(ctx context.Context, ref MachineRef) (Deletion, error)
}

// Cluster is one Harvester cluster: its machines, its images, and the preflight checks of a
// ProviderConfig.
type Cluster interface {
	Machines
	Images
	// Preflight checks what a ProviderConfig needs on Harvester and returns the API server's
	// version ("" if it did not answer) and one Check per ProviderConfig condition.
	Preflight(ctx context.Context, spec PreflightSpec) (version string, checks []Check)
}

// engine implements Cluster by its three parts.
type engine struct {
	*machines
	*images
	*preflight
	remote *remote
}

// NewCluster returns the engine of one Harvester cluster, working through the client (and cache)
// of rc, whose scheme must know the kinds of RemoteScheme.
func NewCluster(rc *clustercache.Cluster) Cluster {
	r := &remote{cluster: rc, c: rc.Client()}
	return &engine{machines: &machines{remote: r}, images: &images{r}, preflight: &preflight{r}, remote: r}
}

// Identity names the cluster; machines record it where they are created.
func (c *engine) Identity(ctx context.Context) (ClusterIdentity, error) {
	return c.remote.Identity(ctx)
}

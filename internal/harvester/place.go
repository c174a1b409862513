package harvester

import (
	"context"
)

// A machine lives where it was created: its Place (the Harvester cluster, by identity, and the
// namespace and name of its VM) is recorded by its front door before anything is created (see
// PlaceRecorder), and from then on the machine is observed and deleted there, never where
// fields edited since would put it: credentials pointed at another namespace or cluster must not
// make a running machine look deleted, let its deletion skip the VM, or make a retry create a
// second VM.

// Place is where a machine lives.
type Place struct {
	// ClusterID is the cluster's identity (ClusterIdentity.ID); Server its URL when recorded, for
	// messages.
	ClusterID, Server string
	Namespace, Name   string
}

// Home is a machine's place, reached with the credentials its front door has now.
type Home struct {
	Place Place
	// Cluster is the engine of the machine's cluster, working in the machine's namespace; nil
	// when the credentials reach another cluster (Elsewhere).
	Cluster Cluster
	// Elsewhere, when set, is the cluster the credentials reach, which is not the machine's: the
	// machine can be neither observed nor deleted with them.
	Elsewhere *ClusterIdentity
	// NamespaceMoved is set when the credentials now put new machines in another namespace than
	// the machine's.
	NamespaceMoved bool
}

// Locate reaches a machine's place with creds (whose Namespace is where new machines go now). A
// nil place is a machine whose place nothing recorded but which has a VM (recorded by an earlier
// version, or by the published provider): it lives where the credentials point now, under name.
func Locate(ctx context.Context, conn Connector, creds Credentials, place *Place, name string) (*Home, error) {
	cluster, err := conn.ClusterFor(ctx, creds)
	if err != nil {
		return nil, err
	}
	id, err := cluster.Identity(ctx)
	if err != nil {
		return nil, err
	}
	if place == nil {
		place = &Place{ClusterID: id.ID, Server: id.Server, Namespace: creds.Namespace, Name: name}
	}
	home := &Home{Place: *place}
	if place.ClusterID != id.ID {
		home.Elsewhere = &id
		return home, nil
	}
	if place.Namespace != creds.Namespace {
		home.NamespaceMoved = true
		// The same credentials, working in the namespace the machine lives in.
		creds.Namespace = place.Namespace
		if cluster, err = conn.ClusterFor(ctx, creds); err != nil {
			return nil, err
		}
	}
	home.Cluster = cluster
	return home, nil
}

// PlaceOf is the place of a machine created as spec says on the cluster id.
func PlaceOf(spec *MachineSpec, id ClusterIdentity) Place {
	return Place{ClusterID: id.ID, Server: id.Server, Namespace: spec.Namespace, Name: spec.Name}
}

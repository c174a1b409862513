package clusterapi

import (
	"context"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// harvesterMachineDoor is a HarvesterMachine's door for one reconcile (MachineSpec.Door): a
// harvester.UserDataLoader (the Machine's bootstrap data Secret) and a harvester.CreationGate.
// A machine with nothing recorded gets an unrecordedHarvesterMachine instead, which records its
// place too.
//
// The Machine's spec (its bootstrap data Secret, its failure domain) matters only to make the
// machine: it is read live, once, when the engine makes it (Machines are watched by their
// metadata alone). So is the bootstrap data Secret, only when the engine needs the data: to create
// the machine, or to prove it is the machine a VM was made for. A machine whose VM exists costs no
// read.
type harvesterMachineDoor struct {
	r       *HarvesterMachineReconciler
	hm      *infrav1.HarvesterMachine
	machine *capiMachine
	t       *clusterTarget
	spec    *harvester.MachineSpec
	// home is where the machine is recorded to live (nil: nothing recorded), and own where a new
	// machine of its own is made: see placeOfItsOwn.
	home *harvester.Home
	own  harvester.Place
	// specRead says the Machine's spec has been read (see readSpec).
	specRead bool
}

// readSpec reads the Machine's spec live, once.
func (d *harvesterMachineDoor) readSpec(ctx context.Context) error {
	if !d.specRead {
		if err := readCAPIMachineSpec(ctx, d.r.LiveReader, d.hm.Namespace, d.machine); err != nil {
			return err
		}
		d.specRead = true
	}
	return nil
}

// LoadUserData reads the Machine's bootstrap data, waiting for the bootstrap provider to name it.
func (d *harvesterMachineDoor) LoadUserData(ctx context.Context) (string, error) {
	if err := d.readSpec(ctx); err != nil {
		return "", err
	}
	if d.machine.DataSecretName == "" {
		return "", errkind.Waiting(infrav1.ReasonWaitingForBootstrapData, capiWaitingRetry,
			"waiting for the bootstrap provider to set spec.bootstrap.dataSecretName of Machine %s/%s", d.hm.Namespace, d.machine.Name)
	}
	return d.r.readBootstrapData(ctx, d.hm.Namespace, d.machine)
}

// Gate refuses to make a machine at a recorded place not its own (placeOfItsOwn), then places it
// in its failure domain and checks what its namespace and ProviderConfig must allow
// (mayMakeMachines).
//
// The failure domain places the VM when it is created, and only then: a machine whose VM exists
// stays where it runs, and keeps the status.failureDomain it was created with, whatever its
// Machine or the HarvesterCluster's failure domains say since (the engine never moves or rewrites
// a VM, and the gate judges only a machine without one, before the VM is built). Cluster API
// copies status.failureDomain to the Machine. The VM records the failure domain it was placed in
// (spec.FailureDomain): a status lost (clusterctl move does not carry status) is rebuilt from it,
// never guessed from fields that may have changed since the VM was placed.
func (d *harvesterMachineDoor) Gate(ctx context.Context) error {
	if d.home != nil {
		if err := placeOfItsOwn(d.hm, d.home.Place, d.own); err != nil {
			return err
		}
	}
	if err := d.readSpec(ctx); err != nil {
		return err
	}
	nodes, err := failureDomainNodes(d.hm.Namespace, *d.machine, d.t.hc)
	if err != nil {
		return err
	}
	d.spec.NodeSelector, d.spec.FailureDomain = nodes, d.machine.FailureDomain
	if err := mayMakeMachines(ctx, d.r.LiveReader, d.hm, d.t.Target); err != nil {
		return err
	}
	d.hm.Status.FailureDomain = d.machine.FailureDomain
	return nil
}

// unrecordedHarvesterMachine is the door of a HarvesterMachine with nothing recorded: a
// harvesterMachineDoor that is a harvester.PlaceRecorder too. Only such a machine's spec has it
// for Door: the engine records nothing for one whose place is recorded already.
type unrecordedHarvesterMachine struct {
	*harvesterMachineDoor
	s *harvesterMachineScope
}

// Record records where the machine lives: the cluster the engine reached and the namespace and
// name of the spec.
func (d unrecordedHarvesterMachine) Record(ctx context.Context, id harvester.ClusterIdentity) error {
	return d.r.recordPlace(ctx, d.s, harvester.PlaceOf(d.spec, id))
}

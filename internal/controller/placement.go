package controller

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// A machine lives where it was created. Its place (Harvester cluster, namespace, name and VM UID)
// is recorded in status.placement before anything is created for it, and from then on the machine
// is observed and deleted there, never where fields edited since would put it: a ProviderConfig
// pointed at another namespace or cluster must not make a running machine look deleted, let its
// deletion skip the VM, or make a retry create a second VM.

// machineHome is where a machine lives and the client that reaches it.
type machineHome struct {
	cluster harvester.Cluster
	ref     harvester.MachineRef
	// moved, when set, says how the ProviderConfig now points elsewhere than where the machine
	// lives (and what to do about it).
	moved string
}

// reach returns the client of the Harvester cluster the credentials reach and its identity.
func (r *MachineRequestReconciler) reach(ctx context.Context, creds harvester.Credentials) (harvester.Cluster, harvester.ClusterIdentity, error) {
	cluster, err := r.Harvester.ClusterFor(ctx, creds)
	if err != nil {
		return nil, harvester.ClusterIdentity{}, err
	}
	id, err := cluster.Identity(ctx)
	return cluster, id, err
}

// homeOf finds where the machine lives, reached with the ProviderConfig's current credentials
// when they reach the cluster it was created on. It returns nil, and no error, when nothing has
// been recorded: nothing was ever created for the machine.
//
// A MachineRequest of the published provider, or of a version of this one before placements were
// recorded, has a providerID but no placement: its VM is where the ProviderConfig points now,
// which is recorded (with this reconcile's status) from then on.
func (r *MachineRequestReconciler) homeOf(ctx context.Context, s *machineScope) (*machineHome, error) {
	p := s.mr.Status.Placement
	legacyUID := uidOfProviderID(s.mr.Status.ProviderID)
	if p == nil && legacyUID == "" {
		return nil, nil
	}
	creds, err := credentialsFor(s.mr, s.pc)
	if err != nil {
		return nil, err
	}
	cluster, id, err := r.reach(ctx, creds)
	if err != nil {
		return nil, err
	}
	if p == nil {
		p = &v1alpha1.Placement{ClusterID: id.ID, Server: id.Server, Namespace: creds.Namespace, Name: s.mr.Spec.MachineName, VMUID: legacyUID}
		s.mr.Status.Placement = p
	}
	if p.ClusterID != id.ID {
		return nil, harvester.Waiting(v1alpha1.ReasonProviderConfigMoved, providerConfigRetry,
			"ProviderConfig %s's credentials now reach another Harvester cluster (%s, cluster ID %s) than the one VM %s/%s lives on (%s, cluster ID %s): "+
				"restore credentials for that cluster to manage the machine; to give it up, delete the MachineRequest with annotation %s=true",
			providerConfigRef(s.mr), id.Server, id.ID, p.Namespace, p.Name, p.Server, p.ClusterID, v1alpha1.AnnotationSkipHarvesterCleanup)
	}
	home := &machineHome{cluster: cluster, ref: harvester.MachineRef{
		Owner: ownerOf(s.mr), Namespace: p.Namespace, Name: p.Name, VMUID: types.UID(p.VMUID),
	}}
	var moved []string
	if s.pc.Spec.Provider != v1alpha1.ProviderTypeHarvester {
		moved = append(moved, fmt.Sprintf("now says provider %q", s.pc.Spec.Provider))
	}
	if p.Namespace != creds.Namespace {
		moved = append(moved, fmt.Sprintf("now points at Harvester namespace %q", creds.Namespace))
		// The same credentials, working in the namespace the machine lives in.
		creds.Namespace = p.Namespace
		if home.cluster, err = r.Harvester.ClusterFor(ctx, creds); err != nil {
			return nil, err
		}
	}
	if len(moved) > 0 {
		home.moved = fmt.Sprintf("ProviderConfig %s %s, but VM %s/%s lives where it was created and is managed there: new machines go where the ProviderConfig points; to move this one, delete and recreate the MachineRequest",
			providerConfigRef(s.mr), strings.Join(moved, " and "), p.Namespace, p.Name)
	}
	return home, nil
}

// recordVM records the UID of the machine's VM once it is known.
func recordVM(st *v1alpha1.MachineRequestStatus, obs harvester.Observation) {
	if p := st.Placement; p != nil && p.VMUID == "" && obs.VMUID != "" {
		p.VMUID = string(obs.VMUID)
	}
}

// uidOfProviderID returns the VM UID of a providerID ("harvester://<uid>", or the bare UID the
// published provider wrote).
func uidOfProviderID(id string) string {
	return strings.TrimPrefix(id, harvester.ProviderIDPrefix)
}

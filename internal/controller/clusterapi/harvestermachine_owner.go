package clusterapi

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// harvesterMachineOwner is the owner of a HarvesterMachine's objects on Harvester. A
// HarvesterMachine may be a re-creation of an earlier one (clusterctl move, a restore from
// `clusterctl move --to-directory`): it carries on with the machine it proves to be (see
// harvester.Succession; the proof is its bootstrap data). The hand-over of another management
// cluster's objects is never on here: only the platform operator turns it on (withHandOver).
func harvesterMachineOwner(hm *infrav1.HarvesterMachine, managementCluster string) harvester.Owner {
	return harvester.Owner{Kind: OwnerKindHarvesterMachine, Namespace: hm.Namespace, Name: hm.Name, UID: hm.UID,
		Cluster: managementCluster, Succession: &harvester.Succession{Created: hm.CreationTimestamp.Time,
			Tenant: types.NamespacedName{Namespace: hm.Namespace, Name: hm.Labels[capiClusterNameLabel]}}}
}

// withHandOver lets the owner take over the objects another management cluster made for a
// HarvesterMachine of the same namespace and name when the HarvesterMachine asks for it (the
// hand-over annotation) and the platform operator allowed that management cluster's (the
// manager's options.HandOverFlag, in from). A tenant who can annotate a
// HarvesterMachine cannot do it alone: the annotation on its own is refused, with a message
// that says who must allow it.
func withHandOver(o harvester.Owner, hm *infrav1.HarvesterMachine, from []string) harvester.Owner {
	if hm.Annotations[infrav1.AnnotationHandOver] == "true" && len(from) > 0 {
		o.HandOver, o.HandOverFrom = true, from
	}
	return o
}

// reportTakeOver records, in the log and a Warning event, that the machine's objects on Harvester
// were relabelled for this HarvesterMachine: who had them, and why they are its own.
func reportTakeOver(ctx context.Context, s *harvesterMachineScope, vm string, p harvester.Predecessor) {
	if p.UID == "" {
		return
	}
	why := "an earlier HarvesterMachine of this namespace and name that no longer exists (same management cluster)"
	switch {
	case p.Succession:
		why = "this machine before it was re-created (clusterctl move or a restore): its bootstrap data is the data the machine was made with"
	case s.hm.Annotations[infrav1.AnnotationHandOver] == "true":
		why = "a HarvesterMachine of this namespace and name of another management cluster, handed over (annotation " + infrav1.AnnotationHandOver + ", allowed by the platform operator)"
	}
	from := "UID " + string(p.UID)
	if p.Cluster != "" {
		from += ", management cluster " + p.Cluster
	}
	log.FromContext(ctx).Info("Took over the machine's objects on Harvester", "vm", vm, "earlierUID", p.UID, "earlierManagementCluster", p.Cluster, "succession", p.Succession)
	s.Event(corev1.EventTypeWarning, infrav1.ReasonVMTakenOver, "Provision", fmt.Sprintf(
		"%s, its disks and cloud-init Secret were labelled for HarvesterMachine %s/%s (%s) and are this HarvesterMachine's now: they were made for %s. Nothing was created or deleted",
		vm, s.hm.Namespace, s.hm.Name, from, why))
}

// rebuildFailureDomain sets status.failureDomain from the VM when it records one (the VM is placed
// when created and never moved): a status lost with clusterctl move is rebuilt from Harvester.
func rebuildFailureDomain(hm *infrav1.HarvesterMachine, obs harvester.Observation) {
	if obs.FailureDomain != "" {
		hm.Status.FailureDomain = obs.FailureDomain
	}
}

// OwnerKindHarvesterMachine is the owner kind of the objects a HarvesterMachine has on Harvester.
const OwnerKindHarvesterMachine = "HarvesterMachine"

package clusterapi

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/outcome"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// Deletion of a HarvesterMachine always ends: when what it needs to reach Harvester is gone (its
// Cluster, HarvesterCluster, ProviderConfig or credentials, or Harvester itself for good), it
// says so in a DeletionBlocked condition, and the user releases it with annotation
// harvester.butler.butlerlabs.dev/skip-cleanup=true, as a MachineRequest is released (see
// release.go for when the annotation counts).

// reportCleanupSkipped records that the HarvesterMachine is released without cleaning up, and what
// may be left on Harvester.
func reportCleanupSkipped(ctx context.Context, s *harvesterMachineScope, keptClaims []string) {
	left := "nothing was recorded as created"
	if p, err := v1alpha1.DecodePlacement(s.hm.Annotations); err == nil && p != nil {
		left = fmt.Sprintf("VM %s/%s on %s, its disks and cloud-init Secret (labelled %s=%s) may remain there", p.Namespace, p.Name, p.Server, harvester.LabelMachineRequestUID, s.hm.UID)
	}
	if len(keptClaims) > 0 {
		left += fmt.Sprintf("; its IPAddressClaims %s stay, so that their addresses stay claimed for it: delete them once the VM is gone", strings.Join(keptClaims, ", "))
	}
	log.FromContext(ctx).Info("Released without deleting anything on Harvester (skip-cleanup annotation)")
	s.Event(corev1.EventTypeWarning, infrav1.ReasonCleanupSkipped, "Delete",
		"Released without deleting anything on Harvester because of annotation "+infrav1.AnnotationSkipHarvesterCleanup+"=true: "+left)
}

// reportReleaseNotNeeded says, when the HarvesterMachine asked to be released without cleaning
// up, that its machine was deleted on Harvester all the same, and why.
func reportReleaseNotNeeded(s *harvesterMachineScope) {
	if releaseAsked(s.hm) {
		s.Event(corev1.EventTypeNormal, infrav1.ReasonCleanupNotSkipped, "Delete", releaseNotNeeded("the machine's VM, disks and cloud-init Secret"))
	}
}

// harvesterMachineDeletionBlocked turns what keeps a deleted HarvesterMachine from reaching its
// machine on Harvester into a DeletionBlocked wait that says how to get out of it. Transient
// errors stay transient, and a disk a VM uses is Harvester's own rule, said as is.
func harvesterMachineDeletionBlocked(s *harvesterMachineScope, err error) error {
	err = outcome.FromEngineIn(err, harvesterMachineTerms)
	var msg string
	if w, ok := errkind.AsWaiting(err); ok {
		if w.Reason == infrav1.ReasonDiskInUse {
			return err
		}
		msg = w.Message
	} else if p, ok := errkind.AsPermanent(err); ok {
		msg = p.Message
	} else {
		return err
	}
	msg = fmt.Sprintf("Cannot delete the machine on Harvester: %s. Restore what is missing (a ProviderConfig and its credentials Secret are installed on each management cluster, see docs/cluster-api.md), "+
		"or release the HarvesterMachine without deleting anything on Harvester: kubectl annotate harvestermachine -n %s %s %s=true",
		msg, s.hm.Namespace, s.hm.Name, infrav1.AnnotationSkipHarvesterCleanup)
	return errkind.Waiting(infrav1.ReasonDeletionBlocked, requeue.BlockedDeletionRetry, "%s", msg)
}

// providerConfigNotInstalled is the wait of a HarvesterCluster whose ProviderConfig does not exist
// on this management cluster. A ProviderConfig and its credentials Secret are platform
// configuration: `clusterctl move` does not move them (they may serve MachineRequests and other
// clusters, which stay), so a cluster moved here finds them only if they were installed here.
func providerConfigNotInstalled(namespace, name string) error {
	return errkind.Waiting(infrav1.ReasonProviderConfigNotFound, requeue.ProviderConfigRetry,
		"ProviderConfig %s/%s (spec.providerConfigRef) does not exist on this management cluster. ProviderConfigs and their credentials Secrets are platform configuration that clusterctl move does not move: "+
			"install it here as on the management cluster the cluster came from (for example `kubectl get providerconfig -n %s %s -o yaml` there, and its spec.credentialsRef Secret, then kubectl apply them here), or correct spec.providerConfigRef",
		namespace, name, namespace, name)
}

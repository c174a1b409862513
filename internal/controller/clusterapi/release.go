package clusterapi

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// A tenant writes its HarvesterClusters and HarvesterMachines, annotations included. Were
// skip-cleanup enough to release them, a tenant could leave VMs running, and Harvester
// credentials alive, that nothing manages any more and no quota of its clusters counts. So the
// annotation releases an object only when its deletion is blocked (what it needs to reach
// Harvester is gone: its ProviderConfig, the credentials, the Harvester namespace or cluster),
// which is what the annotation is for, and the record of where the machine lives is intact; else
// the provider deletes what the object made, and says that the annotation was not needed. The
// platform operator may let the annotation count at any time (options.SkipCleanupFlag).
// MachineRequests are the platform's: their annotation always counts.

// releaseAsked reports whether the object carries annotation skip-cleanup=true.
func releaseAsked(o metav1.Object) bool {
	return o.GetAnnotations()[infrav1.AnnotationSkipHarvesterCleanup] == "true"
}

// deletionBlocked reports whether err is a DeletionBlocked wait: what the deletion needs to reach
// Harvester is gone.
func deletionBlocked(err error) bool {
	w, ok := errkind.AsWaiting(err)
	return ok && w.Reason == infrav1.ReasonDeletionBlocked
}

// releasedWhenBlocked reports whether annotation skip-cleanup releases the HarvesterMachine whose
// deletion on Harvester returned err.
func releasedWhenBlocked(hm *infrav1.HarvesterMachine, err error) bool {
	return releaseAsked(hm) && deletionBlocked(err) && placementReadable(hm)
}

// placementReadable reports whether the HarvesterMachine's record of where its machine lives can
// be read. A record made unreadable blocks the deletion too, but releasing the machine then would
// let whoever broke the record leave its VM behind: the fix is to restore the record.
func placementReadable(hm *infrav1.HarvesterMachine) bool {
	_, err := v1alpha1.DecodePlacement(hm.Annotations)
	return err == nil
}

// releaseNotNeeded is the message of a deletion that went ahead although the object asked to be
// released without cleaning up: what was deleted, and who decides otherwise.
func releaseNotNeeded(what string) string {
	return fmt.Sprintf("Deleted %s on Harvester although annotation %s=true asks to keep them: the annotation releases an object only when its deletion is blocked "+
		"(its ProviderConfig, credentials or Harvester gone); the platform operator may let it count at any time (manager flag --%s)",
		what, infrav1.AnnotationSkipHarvesterCleanup, options.SkipCleanupFlag)
}

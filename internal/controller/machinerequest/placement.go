package machinerequest

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/objmeta"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// A machine lives where it was created. Its place (Harvester cluster, namespace and name) is
// recorded in annotation v1alpha1.AnnotationPlacement, with the finalizer and in the same write,
// before anything is created for it, and read back from the API server's answer; its VM's UID is
// status.providerID, written as soon as the VM exists. Both are kept by every MachineRequest
// schema, Butler's own included (it prunes status fields it does not know, such as the
// status.placement where earlier versions recorded the place). From then on the machine is
// observed and deleted there, never where fields edited since would put it: a ProviderConfig
// pointed at another namespace or cluster must not make a running machine look deleted, let its
// deletion skip the VM, or make a retry create a second VM.

// machineHome is where a machine lives (harvester.Home) and how the MachineRequest names it there.
type machineHome struct {
	*harvester.Home
	ref harvester.MachineRef
	// moved, when set, says how the ProviderConfig now points elsewhere than where the machine
	// lives (and what to do about it).
	moved string
}

// unreachable says why a machine whose credentials now reach another cluster cannot be managed.
func (h *machineHome) unreachable(s *machineScope) error {
	p, id := h.Place, h.Elsewhere
	return errkind.Waiting(v1alpha1.ReasonProviderConfigMoved, requeue.ProviderConfigRetry,
		"ProviderConfig %s's credentials now reach another Harvester cluster (%s, cluster ID %s) than the one VM %s/%s lives on (%s, cluster ID %s): "+
			"restore credentials for that cluster to manage the machine; to give it up, delete the MachineRequest with annotation %s=true",
		providerConfigRef(s.mr), id.Server, id.ID, p.Namespace, p.Name, p.Server, p.ClusterID, v1alpha1.AnnotationSkipHarvesterCleanup)
}

// homeOf finds where the machine lives, reached with the ProviderConfig's current credentials.
// It returns nil, and no error, when nothing has been recorded: nothing was ever created for the
// machine. When the credentials reach another cluster, the home has Elsewhere set and no client.
//
// A MachineRequest of the published provider, or of a version of this one before the place was
// recorded in the annotation, has a providerID or a status.placement but no annotation: its
// place (the one in status.placement, else where the ProviderConfig points now) is recorded in
// the annotation from then on.
func (r *Reconciler) homeOf(ctx context.Context, s *machineScope) (*machineHome, error) {
	p, err := s.mr.RecordedPlacement()
	if err != nil {
		return nil, errkind.Waiting(v1alpha1.ReasonPlacementNotRecorded, requeue.ProviderConfigRetry,
			"%v: the provider cannot tell where the machine lives; restore the annotation the provider wrote, or delete the MachineRequest with annotation %s=true and remove what is left on Harvester yourself",
			err, v1alpha1.AnnotationSkipHarvesterCleanup)
	}
	vmUID := harvester.UIDOfProviderID(s.mr.Status.ProviderID)
	if p != nil && vmUID == "" && p.VMUID != "" {
		// Only in the deprecated status.placement: the VM's UID moves to providerID.
		vmUID = p.VMUID
		s.mr.Status.ProviderID = harvester.ProviderIDPrefix + vmUID
	}
	if p == nil && vmUID == "" {
		return nil, nil
	}
	t, err := machineTarget(s.mr, s.pc)
	if err != nil {
		return nil, err
	}
	creds := t.Credentials
	var place *harvester.Place
	if p != nil {
		place = &harvester.Place{ClusterID: p.ClusterID, Server: p.Server, Namespace: p.Namespace, Name: p.Name}
	}
	found, err := harvester.Locate(ctx, r.Harvester, creds, place, s.mr.Spec.MachineName)
	if err != nil {
		return nil, err
	}
	if _, annotated := s.mr.Annotations[v1alpha1.AnnotationPlacement]; !annotated {
		if err := r.recordPlacement(ctx, s, found.Place); err != nil {
			return nil, err
		}
		s.mr.Status.Placement = nil //nolint:staticcheck // SA1019: moved to the annotation, the deprecated field is cleared
	}
	home := &machineHome{Home: found, ref: harvester.MachineRef{
		Owner: ownerOf(s.mr, r.managementCluster), Namespace: found.Place.Namespace, Name: found.Place.Name, VMUID: types.UID(vmUID),
	}}
	if home.Elsewhere != nil {
		return home, nil
	}
	var moved []string
	if s.pc.Spec.Provider != v1alpha1.ProviderTypeHarvester {
		moved = append(moved, fmt.Sprintf("now says provider %q", s.pc.Spec.Provider))
	}
	if home.NamespaceMoved {
		moved = append(moved, fmt.Sprintf("now points at Harvester namespace %q", creds.Namespace))
	}
	if len(moved) > 0 {
		home.moved = fmt.Sprintf("ProviderConfig %s %s, but VM %s/%s lives where it was created and is managed there: new machines go where the ProviderConfig points; to move this one, delete and recreate the MachineRequest",
			providerConfigRef(s.mr), strings.Join(moved, " and "), found.Place.Namespace, found.Place.Name)
	}
	return home, nil
}

// reachableHome is homeOf for a machine that must be reached where it lives: observed while
// Running, or deleted.
func (r *Reconciler) reachableHome(ctx context.Context, s *machineScope) (*machineHome, error) {
	home, err := r.homeOf(ctx, s)
	if err == nil && home != nil && home.Elsewhere != nil {
		return nil, home.unreachable(s)
	}
	return home, err
}

// recordPlacement stores where the machine lives, with the finalizer, in one write locked on the
// resourceVersion (a merge patch replaces the whole list of finalizers), and checks the API
// server's answer: if the annotation did not persist as sent (a webhook or policy dropped or
// changed it), nothing may be created, since nothing would find it again.
func (r *Reconciler) recordPlacement(ctx context.Context, s *machineScope, place harvester.Place) error {
	return objmeta.RecordPlace(ctx, r.Client, s.Scope, s.mr, "MachineRequest", v1alpha1.MachineRequestFinalizer, place)
}

// forgetPlacement removes the recorded place of a machine without a VM that starts afresh
// elsewhere (locked like recordPlacement), so that a machine that then waits, before its new
// place is recorded, does not leave the old one again on every reconcile.
func (r *Reconciler) forgetPlacement(ctx context.Context, s *machineScope) error {
	patch := client.MergeFromWithOptions(s.mr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	delete(s.mr.Annotations, v1alpha1.AnnotationPlacement)
	s.mr.Status.Placement = nil //nolint:staticcheck // SA1019: an earlier version's record goes too
	return s.PatchMeta(ctx, r.Client, patch)
}

// unrecordedRequest is the door of a MachineRequest with nothing recorded: its gate, and a
// harvester.PlaceRecorder that records its place. Only such a machine's spec has it for Door:
// the engine records nothing for one whose place is recorded already.
type unrecordedRequest struct {
	requestGate
	r    *Reconciler
	s    *machineScope
	spec *harvester.MachineSpec
}

// Record stores the machine's place: the cluster the engine reached and the namespace and name of
// the spec.
func (d unrecordedRequest) Record(ctx context.Context, id harvester.ClusterIdentity) error {
	return d.r.recordPlacement(ctx, d.s, harvester.PlaceOf(d.spec, id))
}

// leaveEmptyHome gives up the place of a machine without a VM whose credentials now reach
// another cluster: the machine starts afresh where they point, as after a namespace move. What
// an interrupted earlier attempt may have left on the first cluster cannot be reached from here:
// a Warning event names where to look.
func leaveEmptyHome(ctx context.Context, s *machineScope, home *machineHome) {
	p := home.Place
	log.FromContext(ctx).Info("Forgetting a placement without a VM: the credentials reach another cluster now", "cluster", p.Server, "namespace", p.Namespace)
	s.Event(corev1.EventTypeWarning, v1alpha1.ReasonProviderConfigMoved, "Provision", fmt.Sprintf(
		"ProviderConfig %s's credentials now reach another Harvester cluster (%s) than the one the machine was to live on (%s, namespace %s), where no VM was recorded: the machine starts afresh where they point. An interrupted earlier attempt may have left disks or the cloud-init Secret named after %s (labelled with this MachineRequest's UID %s) on %s",
		providerConfigRef(s.mr), home.Elsewhere.Server, p.Server, p.Namespace, p.Name, s.mr.UID, p.Server))
}

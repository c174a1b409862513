package machinerequest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/objmeta"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

func hasFinalizer(mr *v1alpha1.MachineRequest) bool {
	return slices.Contains(mr.Finalizers, v1alpha1.MachineRequestFinalizer)
}

// ensureFinalizer adds our finalizer to a machine that waits before its place is recorded. The patch carries
// the resourceVersion: a merge patch replaces the whole list, and must not drop a finalizer
// another controller added since our copy was read (a conflict is retried).
func (r *Reconciler) ensureFinalizer(ctx context.Context, s *machineScope) error {
	if s.Released() || hasFinalizer(s.mr) {
		return nil
	}
	patch := client.MergeFromWithOptions(s.mr.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(s.mr, v1alpha1.MachineRequestFinalizer)
	return s.PatchMeta(ctx, r.Client, patch)
}

// reconcileNormal runs the phase the MachineRequest is in.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *machineScope) (reconcile.Result, error) {
	if s.pc != nil && s.pc.Spec.Provider != v1alpha1.ProviderTypeHarvester && !s.placed() {
		// Its ProviderConfig now names another provider and nothing was ever created here:
		// hand it over instead of holding it with a finalizer nobody will remove.
		return reconcile.Result{}, r.handOver(ctx, s)
	}
	switch s.mr.Status.Phase {
	case v1alpha1.MachinePhaseFailed:
		why := ""
		switch {
		case s.mr.Annotations[v1alpha1.AnnotationRetry] == "true":
			if err := r.consumeRetryAnnotation(ctx, s); err != nil {
				return reconcile.Result{}, err
			}
			why = "annotation " + v1alpha1.AnnotationRetry
		case s.mr.Annotations[v1alpha1.AnnotationHandOver] == "true" && s.mr.Status.FailureReason == v1alpha1.ReasonNameConflict &&
			strings.Contains(s.mr.Status.FailureMessage, v1alpha1.AnnotationHandOver):
			// The conflict offered the hand-over, and the user took it.
			why = "annotation " + v1alpha1.AnnotationHandOver
		case s.mr.Status.ObservedGeneration != s.mr.Generation:
			why = "the spec changed"
		default:
			// Terminal for this generation, unless it failed on configuration that passes now.
			if why = r.configFixed(ctx, s); why == "" {
				return reconcile.Result{}, nil
			}
		}
		log.FromContext(ctx).Info("Retrying failed MachineRequest", "generation", s.mr.Generation, "because", why)
		s.Event(corev1.EventTypeNormal, "Retrying", "Provision", "Retrying after "+s.mr.Status.FailureReason+": "+why)
		if s.mr.Status.FailureReason == v1alpha1.ReasonVMDeleted {
			// The recorded VM is gone: the retry creates a new one where the machine lives. Any
			// other failure keeps the VM it has, which is never judged as a machine without one.
			s.mr.Status.ProviderID = ""
		}
		s.clearFailure()
		s.setPhase(v1alpha1.MachinePhasePending)
		return r.reconcileProvisioning(ctx, s)
	case v1alpha1.MachinePhaseRunning:
		return r.reconcileRunning(ctx, s)
	case "":
		s.setPhase(v1alpha1.MachinePhasePending)
		s.Progressing(v1alpha1.ReasonPending, "Accepted; preparing the VM on Harvester")
		fallthrough
	default:
		return r.reconcileProvisioning(ctx, s)
	}
}

// configFixed says why a machine that failed on its configuration (see reasons.Configuration) can be
// retried: the ProviderConfig now exists and passes its checks, is shared with it, and its
// credentials work; for a permission Harvester refused, the ProviderConfig's permission check has
// passed since. "" if not (or the failure was not about configuration). It runs when the
// ProviderConfig changes (its watch), which is also how a fixed credentials Secret shows: the
// ProviderConfig's checks notice it.
func (r *Reconciler) configFixed(ctx context.Context, s *machineScope) string {
	if !reasons.OnConfiguration(s.mr.Status.FailureReason) {
		return ""
	}
	spec, creds, err := r.specFor(ctx, s)
	if err != nil || spec.Door.(harvester.CreationGate).Gate(ctx) != nil {
		return ""
	}
	if _, err := r.Harvester.ClusterFor(ctx, creds); err != nil {
		return ""
	}
	if s.mr.Status.FailureReason == v1alpha1.ReasonPermissionDenied {
		c := meta.FindStatusCondition(s.pc.Status.Conditions, v1alpha1.ConditionPermissionsReady)
		failedAt := s.mr.Status.LastUpdated
		if c == nil || c.Status != metav1.ConditionTrue || failedAt == nil || !c.LastTransitionTime.After(failedAt.Time) {
			return ""
		}
	}
	return "ProviderConfig " + providerConfigRef(s.mr) + " and its credentials pass now"
}

// reconcileProvisioning creates what is missing on Harvester (Pending -> Creating) and waits for
// the VM to report an IP address (Creating -> Running).
func (r *Reconciler) reconcileProvisioning(ctx context.Context, s *machineScope) (reconcile.Result, error) {
	spec, creds, err := r.specFor(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	home, err := r.homeOf(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if home != nil && home.ref.VMUID == "" {
		// No VM is recorded where the machine was to live, and the ProviderConfig now points
		// elsewhere: if none of ours is there, the machine starts afresh where it points now.
		switch {
		case home.Elsewhere != nil:
			if err := r.forgetPlacement(ctx, s); err != nil {
				return reconcile.Result{}, err
			}
			leaveEmptyHome(ctx, s, home)
			home = nil
		case home.moved != "":
			if home, err = r.abandonEmptyHome(ctx, s, home); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	if home != nil && home.Elsewhere != nil {
		return reconcile.Result{}, home.unreachable(s)
	}
	if home == nil {
		// Nothing recorded: the engine records the place (unrecordedRequest.Record) once the
		// gates and the image pass, before it creates anything.
		cluster, err := r.Harvester.ClusterFor(ctx, creds)
		if err != nil {
			return reconcile.Result{}, err
		}
		home = &machineHome{Home: &harvester.Home{Cluster: cluster}, ref: spec.Ref()}
		spec.Door = unrecordedRequest{requestGate: spec.Door.(requestGate), r: r, s: s, spec: spec}
	}
	spec.Namespace, spec.Name, spec.VMUID = home.ref.Namespace, home.ref.Name, home.ref.VMUID
	obs, err := home.Cluster.Ensure(ctx, spec)
	if err != nil {
		return reconcile.Result{}, err
	}
	// The VM's UID is recorded as soon as the VM exists (status.providerID, kept by every
	// schema): from then on the machine is judged as one that has a VM.
	if obs.ProviderID != "" {
		s.mr.Status.ProviderID = obs.ProviderID
	}
	vm := vmName(spec.Namespace, spec.Name)
	if obs.TookOverFrom != "" {
		log.FromContext(ctx).Info("Took over a VM of an earlier MachineRequest of the same name", "vm", vm, "earlierUID", obs.TookOverFrom)
		s.Event(corev1.EventTypeWarning, v1alpha1.ReasonVMTakenOver, "Create", fmt.Sprintf(
			"%s was created for an earlier MachineRequest %s/%s (UID %s) that no longer exists: it is taken over as it is, with its disks and cloud-init Secret (its size and image are not changed). Delete this MachineRequest and the VM to start afresh",
			vm, s.mr.Namespace, s.mr.Name, obs.TookOverFrom))
	}
	if obs.VMCreated {
		log.FromContext(ctx).Info("Created VM on Harvester", "vm", vm, "providerID", obs.ProviderID)
		s.Event(corev1.EventTypeNormal, "Created", "Create", "Created "+vm+" on Harvester")
	}
	s.setPhase(v1alpha1.MachinePhaseCreating)
	if obs.Running && obs.Addresses.Primary != "" {
		r.markRunning(ctx, s, vm, obs)
		s.reportMoved(home)
		return reconcile.Result{RequeueAfter: requeue.PollInterval(obs.Watched, r.HealthCheckInterval, r.WatchedHealthCheck)}, nil
	}
	next := r.reportCreating(s, vm, obs)
	s.reportMoved(home)
	return reconcile.Result{RequeueAfter: next}, nil
}

// abandonEmptyHome removes what an interrupted earlier attempt left where a machine without a VM
// was to live, and forgets that place once nothing of ours is left there (the next record
// replaces it). It keeps the home if a VM of ours is there after all (created just before its
// UID could be recorded).
func (r *Reconciler) abandonEmptyHome(ctx context.Context, s *machineScope, home *machineHome) (*machineHome, error) {
	obs, err := home.Cluster.Observe(ctx, home.ref)
	if err != nil || obs.VMExists {
		return home, err
	}
	deletion, err := home.Cluster.Delete(ctx, home.ref)
	if err != nil {
		return nil, err
	}
	if !deletion.Done {
		return nil, errkind.Waiting(v1alpha1.ReasonDeleting, requeue.PollInterval(deletion.Watched, r.DeletionPollInterval, r.WatchedPollInterval),
			"%s; removing what an earlier attempt left in Harvester namespace %s before creating the machine where the ProviderConfig points now: waiting for %s",
			home.moved, home.ref.Namespace, deletion.Remaining)
	}
	log.FromContext(ctx).Info("Forgetting an empty placement: the ProviderConfig points elsewhere now", "namespace", home.ref.Namespace)
	return nil, r.forgetPlacement(ctx, s)
}

// reportMoved says, in Degraded, that the ProviderConfig no longer points where the machine lives.
func (s *machineScope) reportMoved(home *machineHome) {
	if home.moved != "" {
		s.Degraded(v1alpha1.ReasonProviderConfigMoved, home.moved)
	}
}

// reportCreating says why a Creating machine is not Running yet: what Harvester reports if
// something is wrong, or where the start stands once it takes longer than the start grace period
// (with a Warning event when that changes). Once the provisioning timeout has passed the machine
// is Failed with that diagnosis. It returns when to look again: at the next poll, or when a
// timeout runs out if that is sooner (no event from Harvester marks the passing of time).
func (r *Reconciler) reportCreating(s *machineScope, vm string, obs harvester.Observation) time.Duration {
	next := requeue.PollInterval(obs.Watched, r.CreatingPollInterval, r.WatchedPollInterval)
	until := func(deadline time.Time) {
		if d := time.Until(deadline); d > 0 && d < next {
			next = d
		}
	}
	reason, message := v1alpha1.ReasonVMCreating, creatingMessage(vm)
	assessment := harvester.Assess(obs, harvester.StartLimits{StartGrace: r.StartGracePeriod, IPReport: r.IPReportTimeout}, time.Now())
	if !assessment.LookAgainAt.IsZero() {
		until(assessment.LookAgainAt)
	}
	if p := assessment.Problem; p != nil {
		var advice string
		reason, advice = machineRequestTerms(p.Reason)
		message = p.Message + advice
		if c := meta.FindStatusCondition(s.mr.Status.Conditions, v1alpha1.ConditionProgressing); c == nil || c.Reason != reason {
			s.Event(corev1.EventTypeWarning, reason, "Provision", message)
		}
	}
	s.Progressing(reason, message)
	if reasons.Degrading(reason) {
		s.Degraded(reason, message)
	} else {
		s.Healthy()
	}
	if failed, left := s.timedOut(message); failed {
		return 0
	} else if left > 0 {
		until(time.Now().Add(left + objstatus.TimerSlack))
	}
	return next
}

// creatingMessage says what a Creating machine waits for, from before its VM is created until it
// is Running. It does not follow the start (the disk cloned, WaitingForVolumeBinding, Starting,
// the VM running without an address yet): each change would cost a status write and say nothing
// the user can act on. What is wrong, or a start that takes too long, is the diagnosis.
func creatingMessage(vm string) string {
	return "Creating " + vm + " on Harvester; waiting for it to run and report an IPv4 address on " + harvester.NICName
}

// notRunningMessage says what is wrong with the VM of a Running machine that is not running.
func notRunningMessage(vm string, obs harvester.Observation) string {
	status := obs.PrintableStatus
	if status == "" {
		status = "unknown"
	}
	return fmt.Sprintf("%s is not running (status %s)", vm, status)
}

func (r *Reconciler) markRunning(ctx context.Context, s *machineScope, vm string, obs harvester.Observation) {
	s.mr.Status.IPAddress = obs.Addresses.Primary
	s.mr.Status.IPAddresses = obs.Addresses.All
	s.mr.Status.MACAddress = obs.Addresses.MAC
	msg := fmt.Sprintf("%s is running at %s", vm, obs.Addresses.Primary)
	s.SetCondition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonVMRunning, msg)
	s.SetCondition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonVMRunning, msg)
	s.Healthy()
	if s.mr.Status.Phase != v1alpha1.MachinePhaseRunning {
		log.FromContext(ctx).Info("VM is running", "vm", vm, "ip", obs.Addresses.Primary)
		s.Event(corev1.EventTypeNormal, "Running", "Provision", msg)
	}
	s.setPhase(v1alpha1.MachinePhaseRunning)
}

// vmName names a VirtualMachine in messages and events.
func vmName(namespace, name string) string { return "VirtualMachine " + namespace + "/" + name }

// reconcileRunning is the periodic health check of a Running machine: the VM must still exist
// (else Failed VMDeleted), and the status follows its addresses.
func (r *Reconciler) reconcileRunning(ctx context.Context, s *machineScope) (reconcile.Result, error) {
	home, err := r.reachableHome(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if home == nil {
		// Running without any record of a VM: nobody but a person editing the status writes
		// that. Provisioning finds the VM by name, or reports what is missing.
		return r.reconcileProvisioning(ctx, s)
	}
	obs, err := home.Cluster.Observe(ctx, home.ref)
	if err != nil {
		return reconcile.Result{}, err
	}
	vm := vmName(home.ref.Namespace, home.ref.Name)
	if !obs.VMExists {
		s.mr.Status.IPAddress, s.mr.Status.IPAddresses, s.mr.Status.MACAddress = "", nil, ""
		return reconcile.Result{}, harvester.Permanent(reasons.VMDeleted, "%s was deleted outside the provider", vm)
	}
	s.mr.Status.ProviderID = obs.ProviderID
	if !obs.Running || obs.Addresses.Primary == "" {
		msg := notRunningMessage(vm, obs)
		if obs.Running {
			msg = vm + " is running but reports no IPv4 address on " + harvester.NICName
		}
		s.SetCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonVMNotReady, msg)
		s.Degraded(v1alpha1.ReasonVMNotReady, msg)
		return reconcile.Result{RequeueAfter: requeue.PollInterval(obs.Watched, r.CreatingPollInterval, r.WatchedPollInterval)}, nil
	}
	r.markRunning(ctx, s, vm, obs)
	s.reportMoved(home)
	return reconcile.Result{RequeueAfter: requeue.PollInterval(obs.Watched, r.HealthCheckInterval, r.WatchedHealthCheck)}, nil
}

// reconcileDelete removes the machine from Harvester, where it lives, and then releases the
// finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *machineScope) (reconcile.Result, error) {
	if !hasFinalizer(s.mr) {
		return reconcile.Result{}, nil
	}
	if s.mr.Annotations[v1alpha1.AnnotationSkipHarvesterCleanup] == "true" {
		s.Event(corev1.EventTypeWarning, "CleanupSkipped", "Delete",
			"Released without deleting anything on Harvester because of annotation "+v1alpha1.AnnotationSkipHarvesterCleanup+"; "+describeHome(s)+" may remain there")
		return reconcile.Result{}, r.removeFinalizer(ctx, s)
	}
	home, err := r.reachableHome(ctx, s)
	if err == nil && home == nil {
		home, err = r.unrecordedHome(ctx, s)
	}
	if err != nil {
		s.setPhase(v1alpha1.MachinePhaseDeleting)
		return reconcile.Result{}, blockedDeletion(s, err)
	}
	if home == nil {
		log.FromContext(ctx).Info("Nothing was created on Harvester; releasing")
		return reconcile.Result{}, r.removeFinalizer(ctx, s)
	}
	deletion, err := home.Cluster.Delete(ctx, home.ref)
	if err != nil {
		s.setPhase(v1alpha1.MachinePhaseDeleting)
		return reconcile.Result{}, blockedDeletion(s, err)
	}
	if !deletion.Done {
		// Reported only once the same thing has held the deletion up for DeletionReportDelay
		// past the time it may take by itself (a VM's shutdown grace period; see
		// requeue.DeletionStalls); what is left is named, so that the report says by what.
		poll := requeue.PollInterval(deletion.Watched, r.DeletionPollInterval, r.WatchedPollInterval)
		if next, quiet := r.stalls.Unreported(s.mr, deletion, r.DeletionReportDelay, poll, time.Now()); quiet {
			return reconcile.Result{RequeueAfter: next}, nil
		}
		msg := "Deleting on Harvester; waiting for " + deletion.Remaining
		s.setPhase(v1alpha1.MachinePhaseDeleting)
		s.SetCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting, msg)
		s.SetCondition(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonDeleting, msg)
		s.Healthy()
		return reconcile.Result{RequeueAfter: poll}, nil
	}
	log.FromContext(ctx).Info("Deleted VM and disks on Harvester")
	s.Event(corev1.EventTypeNormal, "Deleted", "Delete",
		"Deleted "+vmName(home.ref.Namespace, home.ref.Name)+", its disks and cloud-init Secret on Harvester")
	return reconcile.Result{}, r.removeFinalizer(ctx, s)
}

// unrecordedHome is where a machine without a recorded place may have left something. This
// version records the place before it creates anything, so a machine that never left Pending
// (or failed on its configuration before anything was created) has nothing on Harvester. A
// machine that went further was served by the published provider or a version of this one that
// recorded nothing before it created: what it left is where its ProviderConfig points, and the
// deletion must reach it there (else it is blocked, and says how to get out of it).
func (r *Reconciler) unrecordedHome(ctx context.Context, s *machineScope) (*machineHome, error) {
	if nothingCreated(s.mr.Status) {
		return nil, nil
	}
	t, err := machineTarget(s.mr, s.pc)
	if err != nil {
		return nil, err
	}
	creds := t.Credentials
	cluster, err := r.Harvester.ClusterFor(ctx, creds)
	if err != nil {
		return nil, err
	}
	return &machineHome{Home: &harvester.Home{Cluster: cluster}, ref: harvester.MachineRef{Owner: ownerOf(s.mr, r.managementCluster), Namespace: creds.Namespace, Name: s.mr.Spec.MachineName}}, nil
}

// describeHome names the machine's VM for messages: where it lives if recorded.
func describeHome(s *machineScope) string {
	if p, _ := s.mr.RecordedPlacement(); p != nil {
		return fmt.Sprintf("VM %s/%s (cluster %s)", p.Namespace, p.Name, p.Server)
	}
	return "VM " + s.mr.Spec.MachineName
}

// blockedDeletion turns "cannot reach Harvester" during deletion into a DeletionBlocked wait that
// says how to get out of it. Transient errors stay transient.
func blockedDeletion(s *machineScope, err error) error {
	err = asMachineRequestError(err)
	if w, ok := errkind.AsWaiting(err); ok && w.Reason == v1alpha1.ReasonDiskInUse {
		// Not blocked: waiting for someone to detach a disk; Harvester's own rule, said as is.
		if !sameCondition(s, w.Reason, w.Message) {
			s.Event(corev1.EventTypeWarning, w.Reason, "Delete", w.Message)
		}
		return err
	}
	var msg string
	if w, ok := errkind.AsWaiting(err); ok {
		msg = w.Message
	} else if p, ok := errkind.AsPermanent(err); ok {
		msg = p.Message
	} else {
		return err
	}
	msg = fmt.Sprintf("Cannot delete %s on Harvester: %s. Fix that, or set annotation %s=true on this MachineRequest to release it without cleaning up on Harvester",
		describeHome(s), msg, v1alpha1.AnnotationSkipHarvesterCleanup)
	if s.mr.Status.Conditions == nil || !sameCondition(s, v1alpha1.ReasonDeletionBlocked, msg) {
		s.Event(corev1.EventTypeWarning, v1alpha1.ReasonDeletionBlocked, "Delete", msg)
	}
	return errkind.Waiting(v1alpha1.ReasonDeletionBlocked, requeue.BlockedDeletionRetry, "%s", msg)
}

func sameCondition(s *machineScope, reason, msg string) bool {
	for _, c := range s.mr.Status.Conditions {
		if c.Type == v1alpha1.ConditionProgressing {
			return c.Reason == reason && c.Message == msg
		}
	}
	return false
}

// consumeRetryAnnotation removes the retry annotation, so that one annotation is one retry.
func (r *Reconciler) consumeRetryAnnotation(ctx context.Context, s *machineScope) error {
	patch := client.MergeFrom(s.mr.DeepCopy())
	delete(s.mr.Annotations, v1alpha1.AnnotationRetry)
	return s.PatchMeta(ctx, r.Client, patch)
}

// handOver removes our finalizer from a MachineRequest that another provider serves now and for
// which nothing was ever created on Harvester.
func (r *Reconciler) handOver(ctx context.Context, s *machineScope) error {
	log.FromContext(ctx).Info("ProviderConfig names another provider and nothing was created on Harvester: releasing the MachineRequest", "provider", s.pc.Spec.Provider)
	s.Event(corev1.EventTypeNormal, "Released", "Release",
		fmt.Sprintf("ProviderConfig %s now says provider %q and nothing was created on Harvester: the Harvester provider lets go of this MachineRequest", providerConfigRef(s.mr), s.pc.Spec.Provider))
	return r.removeFinalizer(ctx, s)
}

// removeFinalizer removes our finalizer, locked on the finalizers so that those other controllers
// added meanwhile stay (objmeta.RemoveFinalizer).
func (r *Reconciler) removeFinalizer(ctx context.Context, s *machineScope) error {
	if err := objmeta.RemoveFinalizer(ctx, r.Client, s.Scope, s.mr, v1alpha1.MachineRequestFinalizer); err != nil {
		return err // objstatus.ErrGone when it went meanwhile: nothing left to do
	}
	s.Release() // gone with its last finalizer, or another provider's now: no status from us
	r.statuses.Forget(s.mr)
	if s.Deleting() {
		metrics.ObserveDeleted(s.mr.DeletionTimestamp.Time, time.Now())
	}
	return nil
}

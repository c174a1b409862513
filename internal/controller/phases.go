package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
)

func hasFinalizer(mr *v1alpha1.MachineRequest) bool {
	return slices.Contains(mr.Finalizers, v1alpha1.MachineRequestFinalizer)
}

// ensureFinalizer adds our finalizer before anything is created on Harvester.
func (r *MachineRequestReconciler) ensureFinalizer(ctx context.Context, s *machineScope) error {
	if hasFinalizer(s.mr) {
		return nil
	}
	patch := client.MergeFrom(s.mr.DeepCopy())
	controllerutil.AddFinalizer(s.mr, v1alpha1.MachineRequestFinalizer)
	return r.Patch(ctx, s.mr, patch)
}

// reconcileNormal runs the phase the MachineRequest is in.
func (r *MachineRequestReconciler) reconcileNormal(ctx context.Context, s *machineScope) (reconcile.Result, error) {
	switch s.mr.Status.Phase {
	case v1alpha1.MachinePhaseFailed:
		retry := s.mr.Annotations[v1alpha1.AnnotationRetry] == "true"
		if s.mr.Status.ObservedGeneration == s.mr.Generation && !retry {
			return reconcile.Result{}, nil // terminal for this generation; a spec change or the retry annotation retries
		}
		if retry {
			if err := r.consumeRetryAnnotation(ctx, s); err != nil {
				return reconcile.Result{}, err
			}
		}
		log.FromContext(ctx).Info("Retrying failed MachineRequest", "generation", s.mr.Generation, "annotation", retry)
		s.event(corev1.EventTypeNormal, "Retrying", "Provision", "Retrying after "+s.mr.Status.FailureReason)
		s.clearFailure()
		s.setPhase(v1alpha1.MachinePhasePending)
		return r.reconcileProvisioning(ctx, s)
	case v1alpha1.MachinePhaseRunning:
		return r.reconcileRunning(ctx, s)
	case "":
		s.setPhase(v1alpha1.MachinePhasePending)
		s.progressing(v1alpha1.ReasonPending, "Accepted; preparing the VM on Harvester")
		fallthrough
	default:
		return r.reconcileProvisioning(ctx, s)
	}
}

// reconcileProvisioning creates what is missing on Harvester (Pending -> Creating) and waits for
// the VM to report an IP address (Creating -> Running).
func (r *MachineRequestReconciler) reconcileProvisioning(ctx context.Context, s *machineScope) (reconcile.Result, error) {
	spec, creds, err := machineSpecFor(s.mr, s.pc)
	if err != nil {
		return reconcile.Result{}, err
	}
	machines, err := r.Harvester.ClusterFor(ctx, creds)
	if err != nil {
		return reconcile.Result{}, err
	}
	obs, err := machines.Ensure(ctx, spec)
	if err != nil {
		return reconcile.Result{}, err
	}
	vm := vmName(spec.Namespace, spec.Name)
	if obs.VMCreated {
		log.FromContext(ctx).Info("Created VM on Harvester", "vm", vm, "providerID", obs.ProviderID)
		s.event(corev1.EventTypeNormal, "Created", "Create", "Created "+vm+" on Harvester")
	}
	s.mr.Status.ProviderID = obs.ProviderID
	s.setPhase(v1alpha1.MachinePhaseCreating)
	if obs.Running && obs.Addresses.Primary != "" {
		r.markRunning(ctx, s, vm, obs)
		return reconcile.Result{RequeueAfter: r.HealthCheckInterval}, nil
	}
	return reconcile.Result{RequeueAfter: r.reportCreating(s, vm, obs)}, nil
}

// reportCreating says why a Creating machine is not Running yet: what Harvester reports if
// something is wrong (with a Warning event when that changes), and Degraded once the provisioning
// timeout has passed. The machine keeps waiting either way: only permanent errors make it Failed.
// It returns when to look again: at the next poll, or when a timeout runs out if that is sooner
// (no event from Harvester marks the passing of time).
func (r *MachineRequestReconciler) reportCreating(s *machineScope, vm string, obs harvester.Observation) time.Duration {
	next := r.CreatingPollInterval
	until := func(deadline time.Time) {
		if d := time.Until(deadline); d > 0 && d < next {
			next = d + 10*time.Millisecond
		}
	}
	reason, message := v1alpha1.ReasonVMCreating, creatingMessage(vm, obs)
	diagnosis := obs.Diagnosis
	if obs.Running && !obs.RunningSince.IsZero() && time.Since(obs.RunningSince) > r.IPReportTimeout {
		diagnosis = &harvester.Diagnosis{Reason: v1alpha1.ReasonNoIPAddress, Message: fmt.Sprintf(
			"%s has run for more than %s without reporting an IPv4 address on %s: check that the image runs the QEMU guest agent (for Talos, the qemu-guest-agent system extension) and that the VM network has DHCP with free leases",
			vm, r.IPReportTimeout, harvester.NICName)}
	} else if obs.Running {
		reason = v1alpha1.ReasonWaitingForIPAddress
		if !obs.RunningSince.IsZero() {
			until(obs.RunningSince.Add(r.IPReportTimeout))
		}
	}
	if diagnosis != nil {
		reason, message = diagnosis.Reason, diagnosis.Message
		if c := meta.FindStatusCondition(s.mr.Status.Conditions, v1alpha1.ConditionProgressing); c == nil || c.Reason != reason {
			s.event(corev1.EventTypeWarning, reason, "Provision", message)
		}
	}
	s.progressing(reason, message)
	since := s.creatingSince()
	if !since.IsZero() && time.Since(since) > r.ProvisioningTimeout {
		// The message names the timeout, not the time elapsed: a status that changes on every
		// poll would be written on every poll.
		s.degraded(v1alpha1.ReasonProvisioningTimeout, fmt.Sprintf("not Running within the provisioning timeout (%s) after the VM was created: %s",
			r.ProvisioningTimeout, message))
		return next
	}
	if !since.IsZero() {
		until(since.Add(r.ProvisioningTimeout))
	}
	s.healthy()
	return next
}

func creatingMessage(vm string, obs harvester.Observation) string {
	if obs.Running {
		return vm + " is running; waiting for the guest agent to report an IPv4 address on " + harvester.NICName
	}
	// KubeVirt's one-word status only: a message that followed every VMI phase would cost a status
	// write per phase (the diagnosis reports the VMI when something is wrong).
	status := obs.PrintableStatus
	if status == "" {
		status = "Provisioning"
	}
	return fmt.Sprintf("%s is starting (status %s)", vm, status)
}

func (r *MachineRequestReconciler) markRunning(ctx context.Context, s *machineScope, vm string, obs harvester.Observation) {
	s.mr.Status.IPAddress = obs.Addresses.Primary
	s.mr.Status.IPAddresses = obs.Addresses.All
	s.mr.Status.MACAddress = obs.Addresses.MAC
	msg := fmt.Sprintf("%s is running at %s", vm, obs.Addresses.Primary)
	s.setCondition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonVMRunning, msg)
	s.setCondition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonVMRunning, msg)
	s.healthy()
	if s.mr.Status.Phase != v1alpha1.MachinePhaseRunning {
		log.FromContext(ctx).Info("VM is running", "vm", vm, "ip", obs.Addresses.Primary)
		s.event(corev1.EventTypeNormal, "Running", "Provision", msg)
	}
	s.setPhase(v1alpha1.MachinePhaseRunning)
}

// clusterOf finds the machine's VM on Harvester and the client of that Harvester cluster.
func (r *MachineRequestReconciler) clusterOf(ctx context.Context, s *machineScope) (harvester.MachineRef, harvester.Cluster, error) {
	ref, creds, err := target(s.mr, s.pc)
	if err != nil {
		return ref, nil, err
	}
	machines, err := r.Harvester.ClusterFor(ctx, creds)
	return ref, machines, err
}

// vmName names a VirtualMachine in messages and events.
func vmName(namespace, name string) string { return "VirtualMachine " + namespace + "/" + name }

// reconcileRunning is the periodic health check of a Running machine: the VM must still exist
// (else Failed VMDeleted), and the status follows its addresses.
func (r *MachineRequestReconciler) reconcileRunning(ctx context.Context, s *machineScope) (reconcile.Result, error) {
	ref, machines, err := r.clusterOf(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	obs, err := machines.Observe(ctx, ref)
	if err != nil {
		return reconcile.Result{}, err
	}
	vm := vmName(ref.Namespace, ref.Name)
	if !obs.VMExists {
		s.mr.Status.IPAddress, s.mr.Status.IPAddresses, s.mr.Status.MACAddress = "", nil, ""
		return reconcile.Result{}, harvester.Permanent(v1alpha1.ReasonVMDeleted,
			"%s was deleted outside the provider: change the MachineRequest's spec (or delete and recreate it) to create a new VM", vm)
	}
	if !obs.Running || obs.Addresses.Primary == "" {
		msg := creatingMessage(vm, obs)
		s.setCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonVMNotReady, msg)
		s.degraded(v1alpha1.ReasonVMNotReady, msg)
		return reconcile.Result{RequeueAfter: r.CreatingPollInterval}, nil
	}
	r.markRunning(ctx, s, vm, obs)
	return reconcile.Result{RequeueAfter: r.HealthCheckInterval}, nil
}

// reconcileDelete removes the machine from Harvester and then releases the finalizer.
func (r *MachineRequestReconciler) reconcileDelete(ctx context.Context, s *machineScope) (reconcile.Result, error) {
	if !hasFinalizer(s.mr) {
		return reconcile.Result{}, nil
	}
	if s.mr.Annotations[v1alpha1.AnnotationSkipHarvesterCleanup] == "true" {
		s.event(corev1.EventTypeWarning, "CleanupSkipped", "Delete",
			"Released without deleting anything on Harvester because of annotation "+v1alpha1.AnnotationSkipHarvesterCleanup+"; VM "+s.mr.Spec.MachineName+" may remain there")
		return reconcile.Result{}, r.removeFinalizer(ctx, s)
	}
	s.setPhase(v1alpha1.MachinePhaseDeleting)
	ref, machines, err := r.clusterOf(ctx, s)
	if err != nil {
		return reconcile.Result{}, blockedDeletion(s, err)
	}
	done, remaining, err := machines.Delete(ctx, ref)
	if err != nil {
		return reconcile.Result{}, blockedDeletion(s, err)
	}
	if !done {
		s.setCondition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonDeleting, "Deleting on Harvester; waiting for "+remaining)
		s.setCondition(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonDeleting, "Deleting on Harvester; waiting for "+remaining)
		s.healthy()
		return reconcile.Result{RequeueAfter: r.DeletionPollInterval}, nil
	}
	s.setPhase(v1alpha1.MachinePhaseDeleted)
	log.FromContext(ctx).Info("Deleted VM and disks on Harvester")
	s.event(corev1.EventTypeNormal, "Deleted", "Delete",
		"Deleted "+vmName(ref.Namespace, ref.Name)+", its disks and cloud-init Secret on Harvester")
	return reconcile.Result{}, r.removeFinalizer(ctx, s)
}

// blockedDeletion turns "cannot reach Harvester" during deletion into a DeletionBlocked wait that
// says how to get out of it. Transient errors stay transient.
func blockedDeletion(s *machineScope, err error) error {
	var msg string
	if w, ok := harvester.AsWaiting(err); ok {
		msg = w.Message
	} else if p, ok := harvester.AsPermanent(err); ok {
		msg = p.Message
	} else {
		return err
	}
	msg = fmt.Sprintf("Cannot delete VM %s on Harvester: %s. Fix that, or set annotation %s=true on this MachineRequest to release it without cleaning up on Harvester",
		s.mr.Spec.MachineName, msg, v1alpha1.AnnotationSkipHarvesterCleanup)
	if s.mr.Status.Conditions == nil || !sameCondition(s, v1alpha1.ReasonDeletionBlocked, msg) {
		s.event(corev1.EventTypeWarning, v1alpha1.ReasonDeletionBlocked, "Delete", msg)
	}
	return harvester.Waiting(v1alpha1.ReasonDeletionBlocked, blockedDeletionRetry, "%s", msg)
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
func (r *MachineRequestReconciler) consumeRetryAnnotation(ctx context.Context, s *machineScope) error {
	patch := client.MergeFrom(s.mr.DeepCopy())
	delete(s.mr.Annotations, v1alpha1.AnnotationRetry)
	return r.Patch(ctx, s.mr, patch)
}

func (r *MachineRequestReconciler) removeFinalizer(ctx context.Context, s *machineScope) error {
	patch := client.MergeFrom(s.mr.DeepCopy())
	controllerutil.RemoveFinalizer(s.mr, v1alpha1.MachineRequestFinalizer)
	if err := r.Patch(ctx, s.mr, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	s.released = true // the object is gone with its last finalizer: no status left to write
	metrics.ObserveDeleted(s.mr.DeletionTimestamp.Time, time.Now())
	return nil
}

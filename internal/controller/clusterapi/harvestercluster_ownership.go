package clusterapi

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// The tenant cluster's ownership (harvester.OwnershipLeases): the HarvesterCluster holds its
// cluster's ownership Lease on Harvester while it is there and not paused, and releases it when
// paused, for the target of `clusterctl move` to take. While another management cluster holds it
// (this is a copy restored from a backup while that one runs), this copy takes nothing: its
// HarvesterMachines carry on with no VM made for another (harvester.Succession), and it issues,
// re-issues and revokes no credentials and, deleted, deletes nothing on Harvester.

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// defaultOwnershipLease is how long a renewal of a tenant cluster's ownership Lease counts; it
// is renewed every third of it, a minute, as often as delivered credentials are checked anyway
// (defaultGuestRecheck): holding it costs one read and one write of Harvester a minute, and no
// reconcile of its own. It bounds nothing a move waits for (a paused owner releases its Lease):
// only how long a hand-over waits once the operator asked for it.
const defaultOwnershipLease = 3 * time.Minute

// ownershipRetry: the Lease could not be read or written, or another holds it.
const ownershipRetry = 15 * time.Second

// tenantOf names the HarvesterCluster's tenant Cluster, the key of its ownership Lease.
func tenantOf(hc *infrav1.HarvesterCluster, clusterName string) types.NamespacedName {
	return types.NamespacedName{Namespace: hc.Namespace, Name: clusterName}
}

// ownershipPhase holds the tenant cluster's ownership Lease. held is false while another
// management cluster holds it (then err says so, for Ready) or it cannot be read (Owned Unknown,
// err nil): either way nothing of the cluster's on Harvester is changed. Provider credentials that
// may not keep Leases (granted before they existed) hold nothing and change nothing either: the
// cluster runs on as before, and Owned says what it lacks. res says when to renew.
func (r *HarvesterClusterReconciler) ownershipPhase(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], clusterName string, t *target.Target) (held bool, res reconcile.Result, err error) {
	if r.Harvester == nil {
		return true, reconcile.Result{}, nil
	}
	hc := s.Obj
	unknown := func(format string, args ...any) (bool, reconcile.Result, error) {
		s.SetCondition(infrav1.ConditionOwned, metav1.ConditionUnknown, infrav1.ReasonOwnershipUnknown, fmt.Sprintf(format, args...))
		return false, reconcile.Result{RequeueAfter: ownershipRetry}, nil
	}
	leases, err := r.ownershipLeases(ctx, t)
	if err != nil {
		return unknown("%v", err)
	}
	claim := r.claim(hc, clusterName, t)
	o, err := leases.ClaimOwnership(ctx, claim)
	if isPermissionDenied(err) {
		// Provider credentials from before Leases: the cluster runs on as it did, unguarded, and
		// the condition says so.
		s.SetCondition(infrav1.ConditionOwned, metav1.ConditionUnknown, infrav1.ReasonOwnershipUnknown, fmt.Sprintf(
			"%v. Without its ownership Lease a copy of this cluster restored on another management cluster could take its machines: grant the rule of the current config/harvester/rbac.yaml on Harvester", err))
		return true, reconcile.Result{RequeueAfter: r.ownershipLease() / 3}, nil
	}
	if err != nil {
		return unknown("the tenant cluster's ownership on Harvester (Lease %s/%s) cannot be claimed: %v", claim.Namespace, harvester.OwnershipLeaseName(claim.Tenant), err)
	}
	if !o.Held {
		return false, reconcile.Result{}, r.ownedElsewhere(s, claim, o)
	}
	renew := reconcile.Result{RequeueAfter: r.ownershipLease() / 3}
	if o.TakenFrom != "" {
		r.tookOver(ctx, s, leases, claim, o)
		return true, renew, nil
	}
	if c := s.Condition(infrav1.ConditionOwned); c == nil || c.Status != metav1.ConditionTrue {
		s.SetCondition(infrav1.ConditionOwned, metav1.ConditionTrue, infrav1.ReasonOwnershipHeld, fmt.Sprintf(
			"this management cluster (%s) runs Cluster %s's machines: it holds Lease %s/%s on Harvester", claim.Holder, clusterName, claim.Namespace, harvester.OwnershipLeaseName(claim.Tenant)))
	}
	return true, renew, nil
}

// claim is what the HarvesterCluster asks of its tenant cluster's ownership Lease.
func (r *HarvesterClusterReconciler) claim(hc *infrav1.HarvesterCluster, clusterName string, t *target.Target) harvester.OwnershipClaim {
	return harvester.OwnershipClaim{Namespace: t.Credentials.Namespace, Tenant: tenantOf(hc, clusterName), Holder: r.managementCluster,
		Duration: r.ownershipLease(), HandOverFrom: handOverFrom(t.ProviderConfig), Sightings: &r.sightings}
}

// ownedElsewhere says, in Owned and for Ready, which management cluster runs the cluster, and how
// this copy takes it over when that one is gone for good.
func (r *HarvesterClusterReconciler) ownedElsewhere(s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], claim harvester.OwnershipClaim, o harvester.Ownership) error {
	lease := claim.Namespace + "/" + harvester.OwnershipLeaseName(claim.Tenant)
	pcNamespace, pcName := s.Obj.ProviderConfigKey()
	msg := fmt.Sprintf("management cluster %s runs Cluster %s's machines (it holds Lease %s on Harvester; seen unrenewed here for %s): this copy takes, changes and deletes nothing of them while it does. "+
		"If that management cluster is gone for good, hand its clusters over to this one: kubectl annotate providerconfig -n %s %s %s=%s (taken once the Lease has gone unrenewed for %s as this manager sees it)",
		o.Holder, claim.Tenant, lease, o.Silent.Round(time.Second), pcNamespace, pcName, v1alpha1.AnnotationHandOverFrom, o.Holder, claim.Duration)
	s.SetCondition(infrav1.ConditionOwned, metav1.ConditionFalse, infrav1.ReasonOwnedByAnotherManagementCluster, msg)
	return errkind.Waiting(infrav1.ReasonOwnedByAnotherManagementCluster, ownershipRetry, "%s", msg)
}

// tookOver says that the cluster was just taken from another management cluster, and names the
// VMs that one made for HarvesterMachines this one does not have (made after the backup this copy
// was restored from): they run on, and nothing here manages them.
func (r *HarvesterClusterReconciler) tookOver(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], leases harvester.OwnershipLeases, claim harvester.OwnershipClaim, o harvester.Ownership) {
	hc := s.Obj
	how := "released it (a move)"
	if o.HandedOver {
		how = fmt.Sprintf("was handed over by ProviderConfig annotation %s", v1alpha1.AnnotationHandOverFrom)
	}
	msg := fmt.Sprintf("this management cluster (%s) took Cluster %s's machines over from management cluster %s, which %s", claim.Holder, claim.Tenant.Name, o.TakenFrom, how)
	eventType := corev1.EventTypeNormal
	machines := &infrav1.HarvesterMachineList{}
	err := r.List(ctx, machines, client.InNamespace(hc.Namespace))
	var unknown []string
	if err == nil {
		known := make(map[string]bool, len(machines.Items))
		for i := range machines.Items {
			known[machines.Items[i].Name] = true
		}
		unknown, err = leases.ForeignMachines(ctx, claim.Namespace, OwnerKindHarvesterMachine, hc.Namespace, o.TakenFrom, func(name string) bool { return known[name] })
	}
	switch {
	case err != nil:
		msg += fmt.Sprintf("; whether it made VMs this one does not know could not be read (%v): look for VMs labelled %s=%s in Harvester namespace %s",
			err, harvester.LabelManagementCluster, o.TakenFrom, claim.Namespace)
		eventType = corev1.EventTypeWarning
	case len(unknown) > 0:
		msg += fmt.Sprintf(". It made VMs in Harvester namespace %s for HarvesterMachines this management cluster does not have (made after the backup it was restored from): %s. They run on and nothing manages them: delete them there once their workloads have moved (kubectl delete virtualmachines -n %s %s)",
			claim.Namespace, strings.Join(unknown, ", "), claim.Namespace, strings.Join(unknown, " "))
		eventType = corev1.EventTypeWarning
	}
	ctrl.LoggerFrom(ctx).Info("Took the tenant cluster's ownership over", "from", o.TakenFrom, "handedOver", o.HandedOver, "unknownVMs", unknown)
	s.Event(eventType, infrav1.ReasonOwnershipTakenOver, "TakeOver", msg)
	s.SetCondition(infrav1.ConditionOwned, metav1.ConditionTrue, infrav1.ReasonOwnershipTakenOver, msg)
}

// releaseWhilePaused releases the tenant cluster's ownership Lease while its Cluster is paused
// (`clusterctl move` pauses it before copying it): the target takes it when its copy is resumed.
// A paused cluster changes nothing else; what cannot be released now is tried again.
func (r *HarvesterClusterReconciler) releaseWhilePaused(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], cluster *capiCluster) reconcile.Result {
	hc := s.Obj
	if r.Harvester == nil || cluster == nil || s.Deleting() {
		return reconcile.Result{}
	}
	namespace, name := hc.ProviderConfigKey()
	pc := &v1alpha1.ProviderConfig{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pc); err != nil {
		return reconcile.Result{} // nothing could have been held with it
	}
	t, err := target.ResolveProviderConfig(pc, namespace+"/"+name, "spec.providerConfigRef")
	if err != nil {
		return reconcile.Result{}
	}
	leases, err := r.ownershipLeases(ctx, t)
	if err == nil {
		claim := r.claim(hc, cluster.Name, t)
		claim.Release = true
		_, err = leases.ClaimOwnership(ctx, claim)
	}
	if err != nil {
		s.SetCondition(infrav1.ConditionOwned, metav1.ConditionUnknown, infrav1.ReasonOwnershipUnknown, fmt.Sprintf(
			"the Cluster is paused, and the tenant cluster's ownership on Harvester cannot be released for a move's target to take: %v", err))
		return reconcile.Result{RequeueAfter: ownershipRetry}
	}
	if c := s.Condition(infrav1.ConditionOwned); c != nil && c.Status == metav1.ConditionTrue {
		s.SetCondition(infrav1.ConditionOwned, metav1.ConditionFalse, infrav1.ReasonOwnershipReleased,
			"the Cluster is paused: its ownership on Harvester is released, for the target of a move to take; resumed here, it is taken back unless another management cluster took it")
	}
	return reconcile.Result{}
}

// ownedByAnother reads, before the HarvesterCluster's deletion deletes anything on Harvester,
// whether another management cluster runs its tenant cluster ("" if this one does, or nobody).
func (r *HarvesterClusterReconciler) ownedByAnother(ctx context.Context, hc *infrav1.HarvesterCluster, clusterName string, t *target.Target) (string, error) {
	if r.Harvester == nil || clusterName == "" {
		return "", nil
	}
	leases, err := r.ownershipLeases(ctx, t)
	if err != nil {
		return "", err
	}
	holder, found, err := leases.OwnershipHolder(ctx, t.Credentials.Namespace, tenantOf(hc, clusterName))
	if err != nil || !found || holder == r.managementCluster {
		return "", err
	}
	return holder, nil
}

// dropOwnership deletes the tenant cluster's ownership Lease once nothing of it is left.
func (r *HarvesterClusterReconciler) dropOwnership(ctx context.Context, hc *infrav1.HarvesterCluster, clusterName string, t *target.Target) error {
	if r.Harvester == nil || clusterName == "" {
		return nil
	}
	leases, err := r.ownershipLeases(ctx, t)
	if err != nil {
		return err
	}
	_, err = leases.DropOwnership(ctx, t.Credentials.Namespace, tenantOf(hc, clusterName), r.managementCluster)
	return err
}

// ownershipLeases is the Harvester cluster t reaches, as the keeper of ownership Leases.
func (r *HarvesterClusterReconciler) ownershipLeases(ctx context.Context, t *target.Target) (harvester.OwnershipLeases, error) {
	engine, err := r.Harvester.ClusterFor(ctx, t.Credentials)
	if err != nil {
		return nil, fmt.Errorf("the Harvester cluster of ProviderConfig %s cannot be reached with its credentials: %w", t.Ref, err)
	}
	leases, ok := engine.(harvester.OwnershipLeases)
	if !ok {
		return nil, fmt.Errorf("the Harvester cluster of ProviderConfig %s keeps no ownership Leases", t.Ref)
	}
	return leases, nil
}

// handOverFrom are the management clusters the platform operator hands tenant clusters over from
// (v1alpha1.AnnotationHandOverFrom on the ProviderConfig).
func handOverFrom(pc *v1alpha1.ProviderConfig) []string {
	if pc == nil {
		return nil
	}
	var out []string
	for _, id := range strings.Split(pc.Annotations[v1alpha1.AnnotationHandOverFrom], ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

func (r *HarvesterClusterReconciler) ownershipLease() time.Duration {
	if r.OwnershipLease > 0 {
		return r.OwnershipLease
	}
	return defaultOwnershipLease
}

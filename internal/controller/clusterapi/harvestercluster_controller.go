package clusterapi

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/management"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/objmeta"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/providerconfig"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// HarvesterClusterReconciler is the Cluster API front door's cluster reconciler. A
// HarvesterCluster names the ProviderConfig its machines are made with, and is provisioned (the
// InfraCluster contract, v1beta2) once that resolves and the control plane endpoint is known. On
// Harvester it makes only the tenant's credentials for Harvester's cloud provider and CSI driver
// (spec.guestCredentials, harvestercluster_guest.go), deleted before it goes. It is held (its
// finalizer) until its cluster's HarvesterMachines are gone: their deletion needs its
// ProviderConfig.
type HarvesterClusterReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Preflight, if set, lends the ProviderConfigs' checks it may not write to their status.
	Preflight *providerconfig.Reconciler
	// Harvester, if set, makes the tenant clusters' Harvester credentials (spec.guestCredentials;
	// harvestercluster_guest.go), which LiveReader (live, get only) reads back, with the
	// credentials Secret's tenant server and the namespace's team (target.ConsumerOf).
	Harvester  harvester.Connector
	LiveReader client.Reader
	// GuestRecheckInterval is how often delivered credentials are checked (default a minute).
	GuestRecheckInterval time.Duration
	// GuestTokenOverlap is how long a token replaced by a re-issue keeps working (default ten
	// minutes), for the new one to reach the tenant's pods.
	GuestTokenOverlap time.Duration
	// SkipCleanupAnytime lets annotation skip-cleanup release a HarvesterCluster whose
	// credentials the provider can delete on Harvester: the platform operator's decision (a
	// manager flag, options.SkipCleanupFlag). Off: the annotation releases only a deletion that
	// is blocked.
	SkipCleanupAnytime bool
	// OwnershipLease is how long a renewal of a tenant cluster's ownership Lease on Harvester
	// counts (default three minutes; harvestercluster_ownership.go); it is renewed every third
	// of it.
	OwnershipLease time.Duration
	// Clock, if set, is the clock ownership Leases are written and judged on.
	Clock clock.PassiveClock

	statuses objstatus.Memory[infrav1.HarvesterClusterStatus]
	// managementCluster is this management cluster's identity, the holder of its Leases.
	managementCluster string
	sightings         harvester.LeaseSightings
}

var harvesterClusterStatus = objstatus.Kind[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus]{
	Name:     "HarvesterCluster",
	Status:   func(hc *infrav1.HarvesterCluster) *infrav1.HarvesterClusterStatus { return &hc.Status },
	DeepCopy: (*infrav1.HarvesterClusterStatus).DeepCopy,
	Fields: func(st *infrav1.HarvesterClusterStatus) objstatus.Fields {
		return objstatus.Fields{Conditions: &st.Conditions, ObservedGeneration: &st.ObservedGeneration}
	},
	Conditions: infrastructureConditions,
}

// +kubebuilder:rbac:groups=infrastructure.butlerlabs.dev,resources=harvesterclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.butlerlabs.dev,resources=harvesterclusters/status,verbs=get;update;patch

// Reconcile moves one HarvesterCluster one step towards its desired state.
func (r *HarvesterClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	hc := &infrav1.HarvesterCluster{}
	if err := r.Get(ctx, req.NamespacedName, hc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.statuses.ForgetKey(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := objstatus.New(hc, harvesterClusterStatus, objstatus.Policy{
		Action: "Provision", FailAction: "Fail", Degrading: reasons.Degrading,
		NewWaitCondition: infrav1.ConditionProgressing, TransientReason: infrav1.ReasonHarvesterUnavailable,
	}, r.Recorder, &r.statuses)
	defer func() {
		if err := s.WriteStatus(ctx, r.Client); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()
	res, err := r.reconcile(ctx, s)
	return s.Outcome(ctx, res, err)
}

func (r *HarvesterClusterReconciler) reconcile(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus]) (reconcile.Result, error) {
	hc := s.Obj
	var cluster *capiCluster
	if name := ownerOfKind(hc, capiClusterGVK); name != "" {
		c, err := readCAPICluster(ctx, r.Client, hc.Namespace, name)
		if err != nil {
			return reconcile.Result{}, err
		}
		cluster = c
	}
	if capiPaused(cluster, hc) {
		s.SetCondition(infrav1.ConditionPaused, metav1.ConditionTrue, infrav1.ReasonPaused, "the Cluster or the HarvesterCluster is paused: nothing is changed until it is resumed")
		return r.releaseWhilePaused(ctx, s, cluster), nil
	}
	s.SetCondition(infrav1.ConditionPaused, metav1.ConditionFalse, infrav1.ReasonNotPaused, "")
	if s.Deleting() {
		return r.reconcileDelete(ctx, s)
	}
	if cluster == nil {
		return reconcile.Result{}, waitingForOwner("Cluster")
	}
	if !controllerutil.ContainsFinalizer(hc, infrav1.HarvesterClusterFinalizer) {
		patch := client.MergeFromWithOptions(hc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(hc, infrav1.HarvesterClusterFinalizer)
		if err := s.PatchMeta(ctx, r.Client, patch); err != nil {
			return reconcile.Result{}, err
		}
	}
	namespace, name := hc.ProviderConfigKey()
	pc, err := target.LoadProviderConfig(ctx, r.Client, client.ObjectKey{Namespace: namespace, Name: name}, r.Preflight)
	if err != nil {
		return reconcile.Result{}, err
	}
	if pc == nil {
		return reconcile.Result{}, providerConfigNotInstalled(namespace, name)
	}
	t, err := target.ResolveProviderConfig(pc, namespace+"/"+name, "spec.providerConfigRef")
	if err != nil {
		return reconcile.Result{}, err
	}
	consumer, err := target.ConsumerOf(ctx, r.LiveReader, t.ProviderConfig, hc.Namespace)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := target.SharedWith(t.ProviderConfig, consumer, "HarvesterClusters", "spec.providerConfigRef"); err != nil {
		return reconcile.Result{}, err
	}
	held, renew, err := r.ownershipPhase(ctx, s, cluster.Name, t)
	if err != nil {
		return renew, err
	}
	hc.Status.FailureDomains = hc.Spec.ContractFailureDomains()
	guest := renew
	if held {
		guest = soonest(r.guestPhase(ctx, s, cluster.Name, t), renew)
	}
	if hc.Spec.ControlPlaneEndpoint.Host == "" && cluster.EndpointHost == "" {
		return reconcile.Result{}, errkind.Waiting(infrav1.ReasonWaitingForControlPlaneEndpoint, capiWaitingRetry,
			"neither spec.controlPlaneEndpoint nor Cluster %s/%s's spec.controlPlaneEndpoint is set: set one (for example a kube-vip address on the Harvester network), or use a control plane provider that sets it", cluster.Namespace, cluster.Name)
	}
	hc.Status.Initialization.Provisioned = ptr.To(true)
	msg := fmt.Sprintf("ProviderConfig %s is usable", t.Ref)
	s.SetCondition(infrav1.ConditionReady, metav1.ConditionTrue, infrav1.ReasonReady, msg)
	s.SetCondition(infrav1.ConditionProgressing, metav1.ConditionFalse, infrav1.ReasonReady, msg)
	s.Healthy()
	return guest, nil
}

// reconcileDelete lets the HarvesterCluster go once its cluster has no HarvesterMachine left.
func (r *HarvesterClusterReconciler) reconcileDelete(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus]) (reconcile.Result, error) {
	hc := s.Obj
	if !controllerutil.ContainsFinalizer(hc, infrav1.HarvesterClusterFinalizer) {
		return reconcile.Result{}, nil
	}
	if clusterName := hc.Labels[capiClusterNameLabel]; clusterName != "" {
		machines := &infrav1.HarvesterMachineList{}
		if err := r.List(ctx, machines, client.InNamespace(hc.Namespace), client.MatchingLabels{capiClusterNameLabel: clusterName}); err != nil {
			return reconcile.Result{}, err
		}
		if n := len(machines.Items); n > 0 {
			return reconcile.Result{}, errkind.Waiting(infrav1.ReasonDeleting, capiWaitingRetry,
				"waiting for the %d HarvesterMachines of Cluster %s to be deleted (their deletion needs this HarvesterCluster's ProviderConfig); one that cannot reach Harvester says why in its Ready condition (DeletionBlocked), "+
					"and is released without deleting anything on Harvester by: kubectl annotate harvestermachines -n %s -l %s=%s %s=true", n, clusterName, hc.Namespace, capiClusterNameLabel, clusterName, infrav1.AnnotationSkipHarvesterCleanup)
		}
	}
	// No credential outlives its cluster, unless its deletion is blocked and the user releases it
	// (skip-cleanup; see release.go): then what it made on Harvester stays, as for a
	// HarvesterMachine.
	if err := r.deleteGuestCredentials(ctx, s); err != nil {
		return reconcile.Result{}, err
	}
	if err := objmeta.RemoveFinalizer(ctx, r.Client, s, hc, infrav1.HarvesterClusterFinalizer); err != nil {
		return reconcile.Result{}, err
	}
	s.Release()
	r.statuses.Forget(hc)
	return reconcile.Result{}, nil
}

// deleteGuestCredentials deletes the tenant cluster's Harvester credentials, or releases the
// HarvesterCluster without deleting them where annotation skip-cleanup counts.
func (r *HarvesterClusterReconciler) deleteGuestCredentials(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus]) error {
	hc := s.Obj
	skipped := func() {
		s.Event(corev1.EventTypeWarning, infrav1.ReasonCleanupSkipped, "Delete", fmt.Sprintf(
			"released by annotation %s: the tenant cluster's Harvester credentials, if any, stay on Harvester", infrav1.AnnotationSkipHarvesterCleanup))
	}
	if releaseAsked(hc) && r.SkipCleanupAnytime {
		skipped()
		return nil
	}
	err := r.guestDeleteStep(ctx, hc, clusterNameOf(hc))
	switch {
	case releaseAsked(hc) && deletionBlocked(err):
		skipped()
		return nil
	case err != nil:
		return err
	case releaseAsked(hc):
		s.Event(corev1.EventTypeNormal, infrav1.ReasonCleanupNotSkipped, "Delete", releaseNotNeeded("the tenant cluster's Harvester credentials (if any were made)"))
	}
	return nil
}

// SetupWithManager registers the reconciler and its watches, its controller built with options
// (the reconciliation timeout requeue.ReconcileTimeout unless they set one: a reconcile waits on
// Harvester). It needs the kinds Unavailable checks: register it only where Unavailable says
// nothing.
func (r *HarvesterClusterReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	r.managementCluster = management.IdentifyManagementCluster(ctx, mgr.GetAPIReader(), mgr.GetLogger())
	r.sightings.Clock = r.Clock
	cluster, machine := &unstructured.Unstructured{}, &infrav1.HarvesterMachine{}
	cluster.SetGroupVersionKind(capiClusterGVK)
	return ctrl.NewControllerManagedBy(mgr).Named("harvestercluster").For(&infrav1.HarvesterCluster{}).
		// The Cluster's pause and endpoint, and, while it is deleted, its last HarvesterMachine
		// going, move it on;
		// nothing else of theirs does. Cluster API writes a Cluster's status with every change
		// of its machines, and each HarvesterMachine many times: passing those cost a
		// reconcile, a read of the delivered Secret and one of the token on Harvester, some six
		// times per machine in the bench.
		Watches(cluster, handler.EnqueueRequestsFromMapFunc(infrastructureClusterOf),
			builder.WithPredicates(capiChangesThatMatter(capiClusterOf, infrastructureClusterOf))).
		Watches(machine, handler.EnqueueRequestsFromMapFunc(r.clusterOfMachine), builder.WithPredicates(onlyDeletions)).
		WithOptions(requeue.WithReconcileTimeout(options)).
		WithLogConstructor(func(req *ctrl.Request) logr.Logger {
			l := mgr.GetLogger().WithValues("controller", "harvestercluster")
			if req != nil {
				l = l.WithValues("harvesterCluster", klog.KRef(req.Namespace, req.Name))
			}
			return l
		}).
		Complete(r)
}

// infrastructureClusterOf names the HarvesterCluster of a Cluster (its spec.infrastructureRef).
func infrastructureClusterOf(ctx context.Context, o client.Object) []ctrl.Request {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil
	}
	cl := readCAPIClusterFrom(u)
	if cl.InfrastructureName == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: u.GetNamespace(), Name: cl.InfrastructureName}}}
}

// clusterOfMachine names the HarvesterClusters of a HarvesterMachine's cluster that are being
// deleted: they wait for their machines to go (reconcileDelete); the others have no use for it.
func (r *HarvesterClusterReconciler) clusterOfMachine(ctx context.Context, o client.Object) []ctrl.Request {
	clusterName := o.GetLabels()[capiClusterNameLabel]
	if clusterName == "" {
		return nil
	}
	list := &infrav1.HarvesterClusterList{}
	if err := r.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingLabels{capiClusterNameLabel: clusterName}); err != nil {
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for _, hc := range list.Items {
		if hc.DeletionTimestamp != nil {
			reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&hc)})
		}
	}
	return reqs
}

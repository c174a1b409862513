// Package machinerequest is the MachineRequest front door: a thin Reconcile that loads the request
// and its ProviderConfig, decides whether the request is ours, and hands a machineScope to ordered
// phase functions. Status is computed in the scope and written once per reconcile, by patch.
package machinerequest

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/harvesterevents"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/management"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/objmeta"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/providerconfig"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// Reconciler provisions a VM on Harvester for each MachineRequest whose
// ProviderConfig has provider "harvester".
type Reconciler struct {
	client.Client
	// Harvester hands out the engine of the Harvester cluster of a ProviderConfig.
	Harvester harvester.Connector
	// HarvesterEvents, if set, brings the MachineRequests whose objects on Harvester changed (it
	// is the Notifier of the Harvester caches' watches, harvester.NewWatches): the IP reaches the status as soon as the VMI
	// reports it, ahead of other work.
	HarvesterEvents *harvesterevents.HarvesterEvents
	Recorder        events.EventRecorder
	// Preflight, if set, is the reconciler of the ProviderConfigs' checks: where it may not write
	// them to the ProviderConfig's status (the Butler CLI's RBAC), they are read from it, and
	// their changes wake the MachineRequests, so that the checks still gate new machines.
	Preflight *providerconfig.Reconciler

	// CreatingPollInterval is how often a Creating machine is looked at again when its objects on
	// Harvester are not watched (see WatchedPollInterval).
	CreatingPollInterval time.Duration
	// WatchedPollInterval is how often a Creating or Deleting machine whose objects on Harvester
	// are watched is looked at again anyway: their changes wake it, so this only catches an event
	// that was missed (see pollInterval).
	WatchedPollInterval time.Duration
	// HealthCheckInterval is how often a Running machine's VM is checked when its objects on
	// Harvester are not watched, WatchedHealthCheck when they are (see healthCheck).
	HealthCheckInterval time.Duration
	WatchedHealthCheck  time.Duration
	// DeletionPollInterval is how often a deletion in progress is looked at again when the
	// machine's objects on Harvester are not watched (see WatchedPollInterval).
	DeletionPollInterval time.Duration
	// DeletionReportDelay is how long a deletion may wait for the same thing on Harvester before
	// the status reports it (phase Deleting, and what it waits for; default
	// DefaultDeletionReportDelay), on top of the time that thing may take by itself (a VM's
	// shutdown grace period, harvester.Deletion.ShutdownGrace). A deletion that goes as it
	// should makes progress faster than that, and is over before long: reporting each of its
	// steps would cost a status write per step and machine and tell nobody anything (see
	// requeue.DeletionStalls).
	DeletionReportDelay time.Duration
	// ProvisioningTimeout is how long a machine may take to become Running before it is Failed
	// with reason ProvisioningTimeout and the diagnosis; 0 waits for ever.
	ProvisioningTimeout time.Duration
	// IPReportTimeout is how long a running VM may go without reporting an IP before the
	// diagnosis points at the guest agent and DHCP.
	IPReportTimeout time.Duration
	// StartGracePeriod is how long a VM may take to start (its disks cloned, its pod scheduled
	// and started, the guest running) before the machine reports VMNotStarting with where the
	// start stands (default DefaultStartGracePeriod). Failures Harvester reports are reported
	// at once.
	StartGracePeriod time.Duration
	// ConfigGracePeriod is how long a machine without a VM waits on a problem only the user can
	// fix before it becomes Failed with that reason (default options.DefaultConfigGracePeriod).
	ConfigGracePeriod time.Duration

	// managementCluster identifies the management cluster (the UID of its kube-system namespace,
	// read once at set-up): the objects on Harvester are labelled with it, so that a left-over
	// VM is taken over automatically only by the cluster that made it. "" if it cannot be read.
	managementCluster string
	// live reads namespaces, uncached (target.ConsumerOf).
	live client.Reader

	// statuses remembers the last status written for each MachineRequest.
	statuses objstatus.Memory[v1alpha1.MachineRequestStatus]
	// stalls remembers what each deletion in progress waits for, and since when.
	stalls requeue.DeletionStalls
}

// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=machinerequests,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=machinerequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=machinerequests/finalizers,verbs=update
// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=providerconfigs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one MachineRequest one step towards its desired state.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	mr := &v1alpha1.MachineRequest{}
	if err := r.Get(ctx, req.NamespacedName, mr); err != nil {
		if apierrors.IsNotFound(err) {
			r.statuses.ForgetKey(req.NamespacedName)
			r.stalls.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pc, err := r.providerConfigFor(ctx, mr)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !isOurs(mr, pc) {
		// Another provider's request, or one whose ProviderConfig is missing and that we never
		// touched: we cannot tell whose it is, so we leave it alone.
		log.FromContext(ctx).V(1).Info("Skipping MachineRequest of another provider or without a ProviderConfig")
		return ctrl.Result{}, nil
	}
	scope := newMachineScope(mr, pc, r.Recorder, &r.statuses, waitLimits{configGrace: r.ConfigGracePeriod, provisioning: r.ProvisioningTimeout})
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("machine", mr.Spec.MachineName))
	defer func() {
		if err := scope.WriteStatus(ctx, r.Client); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	if !mr.DeletionTimestamp.IsZero() {
		res, err := r.reconcileDelete(ctx, scope)
		return requeue.AsPoll(scope.Outcome(ctx, res, asMachineRequestError(err)))
	}
	res, err := r.reconcileNormal(ctx, scope)
	// Harvester refusing the machine for a reason the ProviderConfig's checks cover has them run
	// again, so that its status says so and gates the machines still to come.
	r.Preflight.NoticeRefusal(pc, err)
	// The finalizer is written with the machine's place, before anything is created (see
	// recordPlacement). A machine that stopped short of that, waiting or failed, gets it now,
	// before its status: it is ours from its first status on.
	if ferr := r.ensureFinalizer(ctx, scope); ferr != nil && err == nil {
		err = ferr
	}
	return requeue.AsPoll(scope.Outcome(ctx, res, asMachineRequestError(err)))
}

// isOurs decides whether this provider may act on mr: its ProviderConfig says harvester, or our
// finalizer shows we acted on it before (its ProviderConfig is gone, or now names another
// provider: the machine we created is still ours to delete).
func isOurs(mr *v1alpha1.MachineRequest, pc *v1alpha1.ProviderConfig) bool {
	if hasFinalizer(mr) {
		return true
	}
	return pc != nil && pc.Spec.Provider == v1alpha1.ProviderTypeHarvester
}

// providerConfigFor returns the MachineRequest's ProviderConfig, or nil if it does not exist.
func (r *Reconciler) providerConfigFor(ctx context.Context, mr *v1alpha1.MachineRequest) (*v1alpha1.ProviderConfig, error) {
	namespace, name := mr.ProviderConfigKey()
	return target.LoadProviderConfig(ctx, r.Client, client.ObjectKey{Namespace: namespace, Name: name}, r.Preflight)
}

// providerRefIndex indexes MachineRequests by "<namespace>/<name>" of their ProviderConfig.
const providerRefIndex = "spec.providerRef"

// SetupWithManager registers the reconciler and its watches, its controller built with options
// (requeue.ReconcileTimeout where they set no reconciliation timeout).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	r.applyDefaults()
	r.managementCluster = management.IdentifyManagementCluster(ctx, mgr.GetAPIReader(), mgr.GetLogger())
	r.live = mgr.GetAPIReader()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.MachineRequest{}, providerRefIndex, func(o client.Object) []string {
		ns, name := o.(*v1alpha1.MachineRequest).ProviderConfigKey()
		return []string{ns + "/" + name}
	}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("machinerequest")
	if r.HarvesterEvents != nil {
		b = b.WatchesRawSource(r.HarvesterEvents.MachineSource(harvester.OwnerKindMachineRequest))
	}
	if r.Preflight != nil {
		b = b.WatchesRawSource(source.Channel(r.Preflight.UnwrittenChanges(), handler.EnqueueRequestsFromMapFunc(r.requestsForProviderConfig)))
	}
	return b.
		For(&v1alpha1.MachineRequest{}, builder.WithPredicates(objmeta.UpdatesThatMatter(v1alpha1.MachineRequestFinalizer))).
		Watches(&v1alpha1.ProviderConfig{}, handler.EnqueueRequestsFromMapFunc(r.requestsForProviderConfig), builder.WithPredicates(providerconfig.ConditionsChanged())).
		WithOptions(requeue.WithReconcileTimeout(options)).
		WithLogConstructor(func(req *ctrl.Request) logr.Logger {
			l := mgr.GetLogger().WithValues("controller", "machinerequest")
			if req != nil {
				l = l.WithValues("machineRequest", klog.KRef(req.Namespace, req.Name))
			}
			return l
		}).
		Complete(r)
}

func (r *Reconciler) applyDefaults() {
	if r.CreatingPollInterval <= 0 {
		r.CreatingPollInterval = options.DefaultCreatingPollInterval
	}
	if r.HealthCheckInterval <= 0 {
		r.HealthCheckInterval = options.DefaultHealthCheckInterval
	}
	if r.WatchedHealthCheck <= 0 {
		r.WatchedHealthCheck = options.DefaultWatchedHealthCheckInterval
	}
	if r.DeletionPollInterval <= 0 {
		r.DeletionPollInterval = requeue.DefaultDeletionPollInterval
	}
	if r.WatchedPollInterval <= 0 {
		r.WatchedPollInterval = options.DefaultWatchedPollInterval
	}
	if r.ConfigGracePeriod <= 0 {
		r.ConfigGracePeriod = options.DefaultConfigGracePeriod
	}
	if r.IPReportTimeout <= 0 {
		r.IPReportTimeout = options.DefaultIPReportTimeout
	}
	if r.StartGracePeriod <= 0 {
		r.StartGracePeriod = requeue.DefaultStartGracePeriod
	}
	if r.DeletionReportDelay <= 0 {
		r.DeletionReportDelay = requeue.DefaultDeletionReportDelay
	}
}

// requestsForProviderConfig wakes the MachineRequests that use a ProviderConfig when it changes,
// appears or disappears.
func (r *Reconciler) requestsForProviderConfig(ctx context.Context, o client.Object) []ctrl.Request {
	list := &v1alpha1.MachineRequestList{}
	if err := r.List(ctx, list, client.MatchingFields{providerRefIndex: o.GetNamespace() + "/" + o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "Listing MachineRequests of ProviderConfig", "providerConfig", klog.KObj(o))
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for _, mr := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&mr)})
	}
	return reqs
}

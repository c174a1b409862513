// Package controller holds the MachineRequest reconciler: a thin Reconcile that loads the request
// and its ProviderConfig, decides whether the request is ours, and hands a machineScope to ordered
// phase functions. Status is computed in the scope and written once per reconcile, by patch.
package controller

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// Defaults of the reconciler's intervals.
const (
	DefaultCreatingPollInterval = 10 * time.Second
	DefaultHealthCheckInterval  = 5 * time.Minute
	DefaultDeletionPollInterval = 5 * time.Second
	DefaultProvisioningTimeout  = 15 * time.Minute
	DefaultIPReportTimeout      = 3 * time.Minute
)

// MachineRequestReconciler provisions a VM on Harvester for each MachineRequest whose
// ProviderConfig has provider "harvester".
type MachineRequestReconciler struct {
	client.Client
	// Harvester hands out the client for the Harvester cluster of a ProviderConfig.
	Harvester harvester.Factory
	// HarvesterEvents, if set, names MachineRequests whose objects on Harvester changed (see
	// harvester.CachingFactory.Notify): the IP reaches the status as soon as the VMI reports it.
	HarvesterEvents <-chan event.GenericEvent
	Recorder        events.EventRecorder

	// CreatingPollInterval is how often a Creating machine is looked at again.
	CreatingPollInterval time.Duration
	// HealthCheckInterval is how often a Running machine's VM is checked.
	HealthCheckInterval time.Duration
	// DeletionPollInterval is how often a deletion in progress is looked at again.
	DeletionPollInterval time.Duration
	// ProvisioningTimeout is how long a machine may stay Creating before Degraded says so.
	ProvisioningTimeout time.Duration
	// IPReportTimeout is how long a running VM may go without reporting an IP before the
	// diagnosis points at the guest agent and DHCP.
	IPReportTimeout time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=machinerequests,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=machinerequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=machinerequests/finalizers,verbs=update
// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=providerconfigs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one MachineRequest one step towards its desired state.
func (r *MachineRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	mr := &v1alpha1.MachineRequest{}
	if err := r.Get(ctx, req.NamespacedName, mr); err != nil {
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
	scope := newMachineScope(mr, pc, r.Recorder)
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("machine", mr.Spec.MachineName))
	defer func() {
		if err := scope.patchStatus(ctx, r.Client); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	if !mr.DeletionTimestamp.IsZero() {
		return scope.outcome(r.reconcileDelete(ctx, scope))
	}
	if err := r.ensureFinalizer(ctx, scope); err != nil {
		return ctrl.Result{}, err
	}
	return scope.outcome(r.reconcileNormal(ctx, scope))
}

// isOurs decides whether this provider may act on mr: its ProviderConfig says harvester, or the
// ProviderConfig is gone but our finalizer shows we acted on it before.
func isOurs(mr *v1alpha1.MachineRequest, pc *v1alpha1.ProviderConfig) bool {
	if pc == nil {
		return hasFinalizer(mr)
	}
	return pc.Spec.Provider == v1alpha1.ProviderTypeHarvester
}

// providerConfigFor returns the MachineRequest's ProviderConfig, or nil if it does not exist.
func (r *MachineRequestReconciler) providerConfigFor(ctx context.Context, mr *v1alpha1.MachineRequest) (*v1alpha1.ProviderConfig, error) {
	namespace, name := mr.ProviderConfigKey()
	pc := &v1alpha1.ProviderConfig{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pc); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return pc, nil
}

// providerRefIndex indexes MachineRequests by "<namespace>/<name>" of their ProviderConfig.
const providerRefIndex = "spec.providerRef"

// SetupWithManager registers the reconciler and its watches.
func (r *MachineRequestReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.applyDefaults()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.MachineRequest{}, providerRefIndex, func(o client.Object) []string {
		ns, name := o.(*v1alpha1.MachineRequest).ProviderConfigKey()
		return []string{ns + "/" + name}
	}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("machinerequest")
	if r.HarvesterEvents != nil {
		b = b.WatchesRawSource(source.Channel(r.HarvesterEvents, &handler.EnqueueRequestForObject{}))
	}
	return b.
		For(&v1alpha1.MachineRequest{}, builder.WithPredicates(ignoreStatusOnlyUpdates())).
		Watches(&v1alpha1.ProviderConfig{}, handler.EnqueueRequestsFromMapFunc(r.requestsForProviderConfig), builder.WithPredicates(conditionsChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		WithLogConstructor(func(req *ctrl.Request) logr.Logger {
			l := mgr.GetLogger().WithValues("controller", "machinerequest")
			if req != nil {
				l = l.WithValues("machineRequest", klog.KRef(req.Namespace, req.Name))
			}
			return l
		}).
		Complete(r)
}

func (r *MachineRequestReconciler) applyDefaults() {
	if r.CreatingPollInterval <= 0 {
		r.CreatingPollInterval = DefaultCreatingPollInterval
	}
	if r.HealthCheckInterval <= 0 {
		r.HealthCheckInterval = DefaultHealthCheckInterval
	}
	if r.DeletionPollInterval <= 0 {
		r.DeletionPollInterval = DefaultDeletionPollInterval
	}
	if r.ProvisioningTimeout <= 0 {
		r.ProvisioningTimeout = DefaultProvisioningTimeout
	}
	if r.IPReportTimeout <= 0 {
		r.IPReportTimeout = DefaultIPReportTimeout
	}
}

// requestsForProviderConfig wakes the MachineRequests that use a ProviderConfig when it changes,
// appears or disappears.
func (r *MachineRequestReconciler) requestsForProviderConfig(ctx context.Context, o client.Object) []ctrl.Request {
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

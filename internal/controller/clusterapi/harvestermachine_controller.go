package clusterapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/harvesterevents"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/management"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/objmeta"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/outcome"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/providerconfig"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// HarvesterMachineReconciler is the Cluster API front door's machine reconciler: it gives each
// HarvesterMachine (made by Cluster API from a HarvesterMachineTemplate for a Machine) a VM on
// Harvester through the engine, as the MachineRequest reconciler does for MachineRequests, and
// reports it the way the InfraMachine contract (v1beta2) asks: spec.providerID, status.addresses,
// status.initialization.provisioned and the Ready condition.
type HarvesterMachineReconciler struct {
	client.Client
	// LiveReader reads uncached (get only): bootstrap data Secrets (through the cached Client,
	// the first read would start a watch of every Secret of the cluster, which the provider's
	// RBAC does not grant), and a Machine's spec when its machine is made (Machines are watched
	// by their metadata alone).
	LiveReader client.Reader
	// Harvester hands out the engine of a ProviderConfig's Harvester cluster.
	Harvester harvester.Connector
	// HarvesterEvents, if set, brings the HarvesterMachines whose objects on Harvester changed.
	HarvesterEvents *harvesterevents.HarvesterEvents
	Recorder        events.EventRecorder
	// Preflight, if set, lends the ProviderConfigs' checks it may not write to their status.
	Preflight *providerconfig.Reconciler

	// PollInterval is how often a machine that is not running yet, or is being deleted, is looked
	// at again when its objects on Harvester are not watched.
	PollInterval time.Duration
	// WatchedPollInterval is how often it is looked at again when they are watched: their
	// changes wake it, so this only catches an event that was missed (see pollInterval).
	WatchedPollInterval time.Duration
	// HealthCheckInterval is how often a running machine's VM is checked when its objects on
	// Harvester are not watched, WatchedHealthCheck when they are: the watch wakes it when its VM
	// or VMI changes or goes, so this only catches a notification that was missed.
	HealthCheckInterval time.Duration
	WatchedHealthCheck  time.Duration
	// StartLimits say when a slow start is reported (see harvester.Assess).
	StartLimits harvester.StartLimits
	// HandOverFrom are the management clusters (kube-system UIDs) whose HarvesterMachines'
	// objects a HarvesterMachine of the same namespace and name may take over when annotated
	// with the hand-over annotation: the platform operator's decision (a manager flag). Empty:
	// no hand-over.
	HandOverFrom []string
	// SkipCleanupAnytime lets annotation skip-cleanup release a HarvesterMachine whose machine
	// the provider can delete on Harvester: the platform operator's decision (a manager flag,
	// options.SkipCleanupFlag). Off: the annotation releases only a deletion that is blocked.
	SkipCleanupAnytime bool

	// DeletionReportDelay is how long a deletion may wait for the same thing on Harvester, on
	// top of the time that may take by itself, before its Ready condition says so (default
	// requeue.DefaultDeletionReportDelay; see requeue.DeletionStalls).
	DeletionReportDelay time.Duration

	managementCluster string
	statuses          objstatus.Memory[infrav1.HarvesterMachineStatus]
	// stalls remembers what each deletion in progress waits for, and since when.
	stalls requeue.DeletionStalls
	// written remembers when the provider last wrote each HarvesterMachine's metadata or spec.
	written recentWrites
}

// Reconcile moves one HarvesterMachine one step towards its desired state.
func (r *HarvesterMachineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	hm := &infrav1.HarvesterMachine{}
	if err := r.Get(ctx, req.NamespacedName, hm); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.statuses.ForgetKey(req.NamespacedName)
			r.stalls.Forget(req.NamespacedName)
			r.written.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.written.letGoOf(hm) {
		return ctrl.Result{}, nil
	}
	s := &harvesterMachineScope{hm: hm, Scope: objstatus.New(hm, harvesterMachineStatus, objstatus.Policy{
		Action: "Provision", FailAction: "Fail", Degrading: reasons.Degrading,
		NewWaitCondition: infrav1.ConditionProgressing, TransientReason: infrav1.ReasonHarvesterUnavailable,
	}, r.Recorder, &r.statuses)}
	if wait, quiet := notTakenOnYet(hm, time.Now()); quiet {
		r.recordPlaceAhead(ctx, s)
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	defer func() {
		if err := s.WriteStatus(ctx, r.Client); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()
	res, err := r.reconcile(ctx, s)
	if wait, held := holdAddressWait(s, err, time.Now()); held {
		return ctrl.Result{RequeueAfter: wait + objstatus.TimerSlack}, nil
	}
	return requeue.AsPoll(s.Outcome(ctx, res, outcome.FromEngineIn(err, harvesterMachineTerms)))
}

// ownerReportDelay is how long a new HarvesterMachine may go without its Machine (owner) and
// Cluster (label) before its status says it waits for them (WaitingForOwner).
const ownerReportDelay = 30 * time.Second

// notTakenOnYet says whether hm is a new HarvesterMachine that Cluster API has not named its
// Machine and Cluster on yet, and how long until that is worth reporting. Cluster API does so
// right after creating it (a MachineSet's machines), and that update wakes it
// (harvesterMachineUpdatesThatMatter): until then nothing is made, and nothing is worth a status
// write (one per machine in the bench); only the place is recorded (recordPlaceAhead).
func notTakenOnYet(hm *infrav1.HarvesterMachine, now time.Time) (time.Duration, bool) {
	if hm.DeletionTimestamp != nil || (ownerOfKind(hm, capiMachineGVK) != "" && hm.Labels[capiClusterNameLabel] != "") {
		return 0, false
	}
	age := now.Sub(hm.CreationTimestamp.Time)
	if age >= ownerReportDelay {
		return 0, false
	}
	return ownerReportDelay - age + objstatus.TimerSlack, true
}

func (r *HarvesterMachineReconciler) reconcile(ctx context.Context, s *harvesterMachineScope) (reconcile.Result, error) {
	hm := s.hm
	var machine *capiMachine
	if name := ownerOfKind(hm, capiMachineGVK); name != "" {
		m, err := readCAPIMachine(ctx, r.Client, hm.Namespace, name)
		if err != nil {
			return reconcile.Result{}, err
		}
		machine = m
	}
	cluster, err := readCAPICluster(ctx, r.Client, hm.Namespace, hm.Labels[capiClusterNameLabel])
	if err != nil {
		return reconcile.Result{}, err
	}
	if capiPaused(cluster, hm) {
		s.SetCondition(infrav1.ConditionPaused, metav1.ConditionTrue, infrav1.ReasonPaused, "the Cluster or the HarvesterMachine is paused: nothing is changed until it is resumed")
		return reconcile.Result{}, nil
	}
	s.SetCondition(infrav1.ConditionPaused, metav1.ConditionFalse, infrav1.ReasonNotPaused, "")
	if s.Deleting() {
		return r.reconcileDelete(ctx, s, cluster)
	}
	if machine == nil || cluster == nil {
		return reconcile.Result{}, waitingForOwner("Machine (and Cluster)")
	}
	return r.reconcileNormal(ctx, s, machine, cluster)
}

// clusterTarget is where the machines of a Cluster are made: its HarvesterCluster, and the target
// of the ProviderConfig that names.
type clusterTarget struct {
	*target.Target
	hc *infrav1.HarvesterCluster
}

// targetOf resolves the ProviderConfig of the machine's cluster, through its HarvesterCluster.
func (r *HarvesterMachineReconciler) targetOf(ctx context.Context, hm *infrav1.HarvesterMachine, cluster *capiCluster) (*clusterTarget, error) {
	if cluster == nil || cluster.InfrastructureName == "" {
		return nil, errkind.Waiting(infrav1.ReasonWaitingForClusterInfrastructure, capiWaitingRetry,
			"the HarvesterMachine's Cluster %q does not exist or names no HarvesterCluster in spec.infrastructureRef", hm.Labels[capiClusterNameLabel])
	}
	hc := &infrav1.HarvesterCluster{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.InfrastructureName}, hc); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, errkind.Waiting(infrav1.ReasonWaitingForClusterInfrastructure, capiWaitingRetry,
				"HarvesterCluster %s/%s of Cluster %s does not exist", cluster.Namespace, cluster.InfrastructureName, cluster.Name)
		}
		return nil, err
	}
	namespace, name := hc.ProviderConfigKey()
	pc, err := target.LoadProviderConfig(ctx, r.Client, client.ObjectKey{Namespace: namespace, Name: name}, r.Preflight)
	if err != nil {
		return nil, err
	}
	t, err := target.ResolveProviderConfig(pc, namespace+"/"+name,
		fmt.Sprintf("spec.providerConfigRef of HarvesterCluster %s/%s", hc.Namespace, hc.Name))
	if err != nil {
		return nil, err
	}
	return &clusterTarget{Target: t, hc: hc}, nil
}

// reconcileNormal makes or observes the machine: its place reached, Cluster API's order kept, its
// spec and door built, the engine's Ensure, the providerID recorded, and what the engine observed
// reported.
func (r *HarvesterMachineReconciler) reconcileNormal(ctx context.Context, s *harvesterMachineScope, machine *capiMachine, cluster *capiCluster) (_ reconcile.Result, err error) {
	hm := s.hm
	t, home, err := r.reach(ctx, hm, cluster)
	if err != nil {
		return reconcile.Result{}, err
	}
	// Harvester refusing the machine for a reason the ProviderConfig's checks cover has them run
	// again, so that its status says so and gates the machines still to come.
	defer func() { r.Preflight.NoticeRefusal(t.ProviderConfig, err) }()
	if home == nil {
		if err := providerIDOfItsOwn(hm); err != nil {
			return reconcile.Result{}, err
		}
	}
	if hm.Spec.ProviderID == "" && !cluster.InfrastructureProvisioned {
		// No VM recorded yet: Cluster API's order first (the contract's). Not home == nil: the
		// place is recorded before anything is made (recordPlaceAhead).
		return reconcile.Result{}, errkind.Waiting(infrav1.ReasonWaitingForClusterInfrastructure, capiWaitingRetry,
			"waiting for Cluster %s/%s's infrastructure to be provisioned", cluster.Namespace, cluster.Name)
	}
	spec, engine, own, err := r.machineOnHarvester(ctx, s, machine, cluster.Name, t, home)
	if err != nil {
		return reconcile.Result{}, err
	}
	obs, err := engine.Ensure(ctx, spec)
	if err != nil {
		if home != nil {
			err = othersAtRecordedPlace(hm, home.Place, own, err)
		}
		return reconcile.Result{}, err
	}
	if obs.ProviderID != "" && hm.Spec.ProviderID != obs.ProviderID {
		if err := r.setProviderID(ctx, s, obs.ProviderID); err != nil {
			return reconcile.Result{}, err
		}
	}
	return r.reportObservation(ctx, s, spec, obs), nil
}

// machineOnHarvester describes the machine for the engine and picks the Harvester cluster it is
// made or observed on: where its place is recorded (home), or, with nothing recorded, where its
// ProviderConfig's credentials reach, with a door that records the place before anything is made.
// own is the place its ProviderConfig gives it, which a recorded place is judged against.
func (r *HarvesterMachineReconciler) machineOnHarvester(ctx context.Context, s *harvesterMachineScope, machine *capiMachine, clusterName string, t *clusterTarget, home *harvester.Home) (spec *harvester.MachineSpec, engine harvester.Cluster, own harvester.Place, err error) {
	hm := s.hm
	if spec, err = harvesterMachineSpec(hm, *machine, t.Target, r.managementCluster); err != nil {
		return nil, nil, own, err
	}
	own = harvester.Place{Namespace: spec.Namespace, Name: spec.Name}
	// What the engine asks this reconcile's door (see harvesterMachineDoor): the bootstrap data,
	// the creation gate, and, for a machine with nothing recorded, the record of its place.
	door := &harvesterMachineDoor{r: r, hm: hm, machine: machine, t: t, spec: spec}
	spec.Door = door
	spec.Owner = withHandOver(spec.Owner, hm, r.HandOverFrom)
	spec.VMUID = types.UID(harvester.UIDOfProviderID(hm.Spec.ProviderID))
	if home == nil {
		spec.Door = unrecordedHarvesterMachine{harvesterMachineDoor: door, s: s}
		if engine, err = r.Harvester.ClusterFor(ctx, t.Credentials); err != nil {
			return nil, nil, own, err
		}
	} else {
		if home.Elsewhere != nil {
			return nil, nil, own, errkind.Waiting(infrav1.ReasonProviderConfigMoved, capiWaitingRetry,
				"ProviderConfig %s's credentials now reach another Harvester cluster (%s) than the one VM %s/%s lives on (%s)",
				t.Ref, home.Elsewhere.Server, home.Place.Namespace, home.Place.Name, home.Place.Server)
		}
		door.home, door.own = home, own
		spec.Namespace, spec.Name = home.Place.Namespace, home.Place.Name
		engine = home.Cluster
	}
	if s.assigned, err = r.configureNICs(ctx, hm, spec, clusterName); err != nil {
		return nil, nil, own, err
	}
	s.networkMismatch = managementNetworkMismatch(t.hc, spec)
	return spec, engine, own, nil
}

// managementNetworkMismatch says how the machine's first NIC is not on the network its cluster
// names as the one Harvester's cloud provider reads Node addresses from (its
// --management-network): that cloud provider reads only that network's NIC, so the Node would
// get another NIC's address than the machine's, or none. Empty when they agree or no network is
// named.
func managementNetworkMismatch(hc *infrav1.HarvesterCluster, spec *harvester.MachineSpec) string {
	want := hc.Spec.ManagementNetwork
	if want == "" {
		return ""
	}
	if have := spec.PrimaryNetwork().String(); have != want {
		return fmt.Sprintf("the first NIC of VirtualMachine %s/%s is on network %s, but HarvesterCluster %s/%s's spec.managementNetwork, "+
			"the network Harvester's cloud provider reads Node addresses from (--management-network), is %s: its Node gets another NIC's address, or none. "+
			"Put the machine's first NIC on %s (spec.interfaces[0].network, spec.networks[0] or the ProviderConfig's network), or set spec.managementNetwork "+
			"and the cloud provider's --management-network (HARVESTER_MANAGEMENT_NETWORK) to the first NIC's network",
			spec.Namespace, spec.Name, have, hc.Namespace, hc.Name, want, want)
	}
	return ""
}

// reportObservation says what the engine observed of the machine: a take-over, its failure
// domain, its VM made; Running with its addresses, or on its way (with the engine's diagnosis of
// a VM that does not start), and when to look again.
func (r *HarvesterMachineReconciler) reportObservation(ctx context.Context, s *harvesterMachineScope, spec *harvester.MachineSpec, obs harvester.Observation) reconcile.Result {
	hm := s.hm
	vm := fmt.Sprintf("VirtualMachine %s/%s", spec.Namespace, spec.Name)
	reportTakeOver(ctx, s, vm, obs.Predecessor)
	rebuildFailureDomain(hm, obs)
	if obs.VMCreated {
		msg := "Created " + vm + " on Harvester"
		if obs.Notice != "" {
			// Said once per machine, where its user looks: kubectl describe, and the log.
			msg += "; " + obs.Notice
			log.FromContext(ctx).Info("Made a machine without checking what Harvester offers first", "notice", obs.Notice)
		}
		s.Event(corev1.EventTypeNormal, "Created", "Create", msg)
	}
	if obs.Running && obs.Addresses.Primary != "" {
		hm.Status.Addresses = machineAddresses(spec.Name, s.assigned, obs.Addresses)
		hm.Status.Initialization.Provisioned = ptr.To(true)
		msg := fmt.Sprintf("%s is running at %s", vm, obs.Addresses.Primary)
		s.SetCondition(infrav1.ConditionReady, metav1.ConditionTrue, infrav1.ReasonVMRunning, msg)
		s.SetCondition(infrav1.ConditionProgressing, metav1.ConditionFalse, infrav1.ReasonVMRunning, msg)
		if want := primaryAssigned(s.assigned); want != "" && !slices.Contains(obs.Addresses.All, want) {
			s.Degraded(infrav1.ReasonGuestAddressMismatch, fmt.Sprintf(
				"the guest agent reports %s on the primary NIC of %s, not the address its pool assigned, %s (IPAddress %s): the image may ignore cloud-init's network configuration, or a DHCP server gave it another",
				strings.Join(obs.Addresses.All, ", "), vm, want, s.assigned[0][0].Address))
		} else if s.networkMismatch != "" {
			s.Degraded(infrav1.ReasonManagementNetworkMismatch, s.networkMismatch)
		} else {
			s.Healthy()
		}
		return reconcile.Result{RequeueAfter: requeue.PollInterval(obs.Watched, r.HealthCheckInterval, r.WatchedHealthCheck)}
	}
	if len(s.assigned) > 0 {
		// Known before the guest says anything: the addresses its pools assigned.
		hm.Status.Addresses = machineAddresses(spec.Name, s.assigned, harvester.Addresses{})
	}
	reason, message := infrav1.ReasonVMProvisioning, "Creating "+vm+" on Harvester; waiting for it to run and report an IPv4 address"
	assessment := harvester.Assess(obs, r.StartLimits, time.Now())
	if p := assessment.Problem; p != nil {
		var advice string
		reason, advice = harvesterMachineTerms(p.Reason)
		message = p.Message + advice
	}
	s.Progressing(reason, message)
	next := requeue.PollInterval(obs.Watched, r.PollInterval, r.WatchedPollInterval)
	if d := time.Until(assessment.LookAgainAt); !assessment.LookAgainAt.IsZero() && d < next {
		next = max(d, objstatus.TimerSlack)
	}
	if settling, ok := r.written.settling(hm, time.Now()); ok && assessment.Problem == nil && s.HoldProgress(reason) {
		// Normal progress of a VM just made is not worth a write yet (see progressReportDelay);
		// a problem is said at once.
		next = min(next, settling+objstatus.TimerSlack)
	}
	return reconcile.Result{RequeueAfter: next}
}

// othersAtRecordedPlace says of a name taken at a recorded place that is not the machine's own
// that the record is what is wrong: it names a VM that is another's (by the owner labels the
// provider wrote on it), which is never changed.
func othersAtRecordedPlace(hm *infrav1.HarvesterMachine, recorded, own harvester.Place, err error) error {
	if p, ok := errkind.AsPermanent(err); !ok || p.Reason != harvester.ReasonNameTaken || recorded.Namespace == own.Namespace && recorded.Name == own.Name {
		return err
	}
	return errkind.Waiting(infrav1.ReasonPlacementRefused, capiWaitingRetry,
		"annotation %s of HarvesterMachine %s/%s records VM %s/%s, which is not this machine's: it is left untouched, and a new machine is made only in %s/%s (its ProviderConfig's Harvester namespace, its own name). "+
			"Remove the annotation (kubectl annotate harvestermachine -n %s %s %s-) and the provider records the machine's own place",
		infrav1.AnnotationPlacement, hm.Namespace, hm.Name, recorded.Namespace, recorded.Name, own.Namespace, own.Name, hm.Namespace, hm.Name, infrav1.AnnotationPlacement)
}

// providerIDOfItsOwn refuses a spec.providerID that the provider did not write: it writes one only
// after it recorded the machine's place, so one without a record was written by someone else (a
// copy of another machine's, say). Nothing is made or looked for with it.
func providerIDOfItsOwn(hm *infrav1.HarvesterMachine) error {
	if hm.Spec.ProviderID == "" {
		return nil
	}
	return errkind.Waiting(infrav1.ReasonPlacementRefused, capiWaitingRetry,
		"spec.providerID of HarvesterMachine %s/%s is %s, but the provider recorded no place for it (annotation %s), so it did not write it: nothing is made or changed on Harvester. "+
			"Delete the Machine that owns this HarvesterMachine and let Cluster API make one without a providerID",
		hm.Namespace, hm.Name, hm.Spec.ProviderID, infrav1.AnnotationPlacement)
}

// placeOfItsOwn refuses to make a machine at a recorded place that is not where it belongs (own:
// the namespace its ProviderConfig names now, its own name). The record is an annotation, which
// whoever writes HarvesterMachines can write too: it must not make the provider create a VM in
// another Harvester namespace or under another machine's name. Only creation is refused: a VM
// that exists at the recorded place (made there before the ProviderConfig's namespace was
// edited, say) is carried on with where the engine finds it to be this machine's.
func placeOfItsOwn(hm *infrav1.HarvesterMachine, recorded, own harvester.Place) error {
	if recorded.Namespace == own.Namespace && recorded.Name == own.Name {
		return nil
	}
	return errkind.Waiting(infrav1.ReasonPlacementRefused, capiWaitingRetry,
		"annotation %s of HarvesterMachine %s/%s records VM %s/%s, which does not exist, and a new machine is made only in %s/%s (its ProviderConfig's Harvester namespace, its own name): "+
			"nothing is made or changed on Harvester. Remove the annotation (kubectl annotate harvestermachine -n %s %s %s-) and the provider records the machine's own place",
		infrav1.AnnotationPlacement, hm.Namespace, hm.Name, recorded.Namespace, recorded.Name, own.Namespace, own.Name, hm.Namespace, hm.Name, infrav1.AnnotationPlacement)
}

// mayMakeMachines checks what a HarvesterMachine's namespace and its ProviderConfig must allow
// before anything is recorded or made for it: the ProviderConfig is shared with the namespace,
// and its preflight checks pass.
func mayMakeMachines(ctx context.Context, live client.Reader, hm *infrav1.HarvesterMachine, t *target.Target) error {
	consumer, err := target.ConsumerOf(ctx, live, t.ProviderConfig, hm.Namespace)
	if err != nil {
		return err
	}
	if err := target.SharedWith(t.ProviderConfig, consumer, "HarvesterMachines", "spec.providerConfigRef of their HarvesterCluster"); err != nil {
		return err
	}
	return providerconfig.PreflightGate(t.ProviderConfig, hm.Spec.Image == "")
}

// recordPlace records where the machine lives (objmeta.RecordPlace).
func (r *HarvesterMachineReconciler) recordPlace(ctx context.Context, s *harvesterMachineScope, place harvester.Place) error {
	if err := objmeta.RecordPlace(ctx, r.Client, s.Scope, s.hm, "HarvesterMachine", infrav1.HarvesterMachineFinalizer, place); err != nil {
		return err
	}
	r.written.wrote(s.hm, time.Now())
	return nil
}

// recordPlaceAhead records where a new HarvesterMachine's VM will live as soon as its Cluster
// leads to a ProviderConfig its namespace may use, before Cluster API names its Machine. The
// place depends on the Cluster alone: the Harvester cluster and namespace of the ProviderConfig
// its HarvesterCluster names (which cannot change), and the HarvesterMachine's name; the same
// checks come first, of the namespace, the ProviderConfig and the spec. Recorded once the
// Machine is named, the write would sit in every machine's create reconcile, and those run 16 at
// once when Cluster API names a MachineSet's Machines in a burst; recorded here, it happens while
// the HarvesterMachines appear one by one (docs/proposals/20261127-place-recorded-ahead.md
// measures both). Nothing is made before the Machine is named; whatever keeps the place from
// being recorded here is reported then, by the reconcile that records it.
func (r *HarvesterMachineReconciler) recordPlaceAhead(ctx context.Context, s *harvesterMachineScope) {
	hm := s.hm
	if _, recorded := hm.Annotations[infrav1.AnnotationPlacement]; recorded || hm.Labels[capiClusterNameLabel] == "" {
		return
	}
	if err := r.placeAhead(ctx, s); err != nil {
		log.FromContext(ctx).V(1).Info("The place is recorded once Cluster API names the Machine", "reason", err.Error())
	}
}

func (r *HarvesterMachineReconciler) placeAhead(ctx context.Context, s *harvesterMachineScope) error {
	hm := s.hm
	cluster, err := readCAPICluster(ctx, r.Client, hm.Namespace, hm.Labels[capiClusterNameLabel])
	if err != nil {
		return err
	}
	if capiPaused(cluster, hm) {
		return errors.New("the Cluster or the HarvesterMachine is paused")
	}
	t, err := r.targetOf(ctx, hm, cluster)
	if err != nil {
		return err
	}
	if err := mayMakeMachines(ctx, r.LiveReader, hm, t.Target); err != nil {
		return err
	}
	// The spec is built, and so checked, as the reconcile that makes the machine builds it; the
	// Machine only says its role there, which the place does not depend on.
	spec, err := harvesterMachineSpec(hm, capiMachine{}, t.Target, r.managementCluster)
	if err != nil {
		return err
	}
	engine, err := r.Harvester.ClusterFor(ctx, t.Credentials)
	if err != nil {
		return err
	}
	id, err := engine.Identity(ctx)
	if err != nil {
		return err
	}
	return r.recordPlace(ctx, s, harvester.PlaceOf(spec, id))
}

// readBootstrapData reads the Machine's bootstrap data from the Secret its bootstrap provider wrote.
func (r *HarvesterMachineReconciler) readBootstrapData(ctx context.Context, namespace string, machine *capiMachine) (string, error) {
	secret := &corev1.Secret{}
	if err := r.LiveReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: machine.DataSecretName}, secret); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return "", errkind.Waiting(infrav1.ReasonWaitingForBootstrapData, capiWaitingRetry,
				"bootstrap data Secret %s/%s (spec.bootstrap.dataSecretName of Machine %s) does not exist yet", namespace, machine.DataSecretName, machine.Name)
		}
		return "", err
	}
	return bootstrapUserData(secret)
}

// reach resolves the machine's ProviderConfig and reaches its recorded place (home is nil when
// nothing is recorded).
func (r *HarvesterMachineReconciler) reach(ctx context.Context, hm *infrav1.HarvesterMachine, cluster *capiCluster) (*clusterTarget, *harvester.Home, error) {
	t, err := r.targetOf(ctx, hm, cluster)
	if err != nil {
		return nil, nil, err
	}
	home, err := r.homeOf(ctx, hm, t.Target)
	return t, home, err
}

// homeOf reaches the recorded place of the machine; nil when nothing is recorded (nothing was
// created for it; a recorded place does not say the VM exists, see recordPlaceAhead).
func (r *HarvesterMachineReconciler) homeOf(ctx context.Context, hm *infrav1.HarvesterMachine, t *target.Target) (*harvester.Home, error) {
	p, err := v1alpha1.DecodePlacement(hm.Annotations)
	if err != nil {
		return nil, errkind.Waiting(infrav1.ReasonPlacementNotRecorded, capiWaitingRetry,
			"%v: the provider cannot tell where the machine lives; restore the annotation the provider wrote", err)
	}
	if p == nil {
		return nil, nil
	}
	return harvester.Locate(ctx, r.Harvester, t.Credentials, &harvester.Place{ClusterID: p.ClusterID, Server: p.Server, Namespace: p.Namespace, Name: p.Name}, hm.Name)
}

// setProviderID writes spec.providerID (the contract's, immutable once set) as soon as the VM
// exists: the tenant's Node is matched to its Machine by it.
func (r *HarvesterMachineReconciler) setProviderID(ctx context.Context, s *harvesterMachineScope, id string) error {
	patch := client.MergeFrom(s.hm.DeepCopy())
	s.hm.Spec.ProviderID = id
	if err := s.PatchMeta(ctx, r.Client, patch); err != nil {
		return err
	}
	r.written.wrote(s.hm, time.Now())
	return nil
}

func (r *HarvesterMachineReconciler) reconcileDelete(ctx context.Context, s *harvesterMachineScope, cluster *capiCluster) (reconcile.Result, error) {
	hm := s.hm
	if !controllerutil.ContainsFinalizer(hm, infrav1.HarvesterMachineFinalizer) {
		return reconcile.Result{}, nil
	}
	skipped := false
	switch _, recorded := hm.Annotations[infrav1.AnnotationPlacement]; {
	case releaseAsked(hm) && r.SkipCleanupAnytime:
		skipped = true
	case recorded || hm.Spec.ProviderID != "":
		result, err := r.deleteOnHarvester(ctx, s, cluster)
		if releasedWhenBlocked(hm, err) {
			skipped = true
			break
		}
		if err != nil || !result.IsZero() {
			return result, err
		}
		reportReleaseNotNeeded(s)
	}
	// The addresses from pools go back once the VM is gone, never before; a VM left on Harvester
	// keeps them claimed.
	if skipped {
		kept, err := r.keepAddressClaims(ctx, hm)
		if err != nil {
			return reconcile.Result{}, err
		}
		reportCleanupSkipped(ctx, s, kept)
	} else if err := r.releaseAddressClaims(ctx, hm); err != nil {
		return reconcile.Result{}, err
	}
	if err := objmeta.RemoveFinalizer(ctx, r.Client, s.Scope, hm, infrav1.HarvesterMachineFinalizer); err != nil {
		return reconcile.Result{}, err
	}
	s.Release()
	r.statuses.Forget(hm)
	r.stalls.Forget(client.ObjectKeyFromObject(hm))
	r.written.releasedFinalizer(hm)
	return reconcile.Result{}, nil
}

// deleteOnHarvester deletes the machine's objects on Harvester, where its place is recorded. A
// zero result and no error: nothing of the machine is left there. A deletion that cannot reach
// them returns a DeletionBlocked wait that says why and how to get out of it.
func (r *HarvesterMachineReconciler) deleteOnHarvester(ctx context.Context, s *harvesterMachineScope, cluster *capiCluster) (reconcile.Result, error) {
	hm := s.hm
	t, home, err := r.reach(ctx, hm, cluster)
	if err != nil {
		return reconcile.Result{}, harvesterMachineDeletionBlocked(s, err)
	}
	if home == nil {
		return reconcile.Result{}, nil
	}
	if home.Elsewhere != nil {
		return reconcile.Result{}, harvesterMachineDeletionBlocked(s, errkind.Waiting(infrav1.ReasonDeletionBlocked, capiWaitingRetry,
			"the credentials of ProviderConfig %s now reach another Harvester cluster than the one the VM lives on (%s): restore them to delete it", t.Ref, home.Place.Server))
	}
	ref := harvester.MachineRef{Owner: harvester.Owner{Kind: OwnerKindHarvesterMachine, Namespace: hm.Namespace, Name: hm.Name, UID: hm.UID, Cluster: r.managementCluster},
		Namespace: home.Place.Namespace, Name: home.Place.Name, VMUID: types.UID(harvester.UIDOfProviderID(hm.Spec.ProviderID)),
		PersistentState: machineFirmware(hm.Spec.Firmware).PersistentState()}
	deletion, err := home.Cluster.Delete(ctx, ref)
	if err != nil {
		return reconcile.Result{}, harvesterMachineDeletionBlocked(s, err)
	}
	if deletion.Done {
		return reconcile.Result{}, nil
	}
	// Said in the status only once the same thing has held the deletion up past the time it may
	// take (requeue.DeletionStalls), as for MachineRequests.
	poll := requeue.PollInterval(deletion.Watched, r.PollInterval, r.WatchedPollInterval)
	if next, quiet := r.stalls.Unreported(hm, deletion, r.DeletionReportDelay, poll, time.Now()); quiet {
		return reconcile.Result{RequeueAfter: next}, nil
	}
	return reconcile.Result{}, errkind.Waiting(infrav1.ReasonDeleting, poll, "deleting the machine on Harvester: waiting for %s", deletion.Remaining)
}

// harvesterMachinesByMachine indexes HarvesterMachines by the Machine that owns them: a Machine,
// watched by its metadata alone, names its HarvesterMachine only in its spec.
const harvesterMachinesByMachine = "infrastructure.butlerlabs.dev/owner-machine"

// machineOwnerOf is the index value of harvesterMachinesByMachine.
func machineOwnerOf(o client.Object) []string {
	if name := ownerOfKind(o, capiMachineGVK); name != "" {
		return []string{name}
	}
	return nil
}

// machinesOfMachine names the HarvesterMachines a Machine owns.
func (r *HarvesterMachineReconciler) machinesOfMachine(ctx context.Context, o client.Object) []ctrl.Request {
	return r.harvesterMachines(ctx, o.GetNamespace(), client.MatchingFields{harvesterMachinesByMachine: o.GetName()})
}

// machinesOfCluster names the HarvesterMachines of a Cluster.
func (r *HarvesterMachineReconciler) machinesOfCluster(ctx context.Context, o client.Object) []ctrl.Request {
	return r.machinesOfClusterNamed(ctx, o.GetNamespace(), o.GetName())
}

// machineOfClaim names the HarvesterMachine that owns an IPAddressClaim (its controller), unless
// the claim is going while its machine is going or gone: the machine released it once its VM was
// gone and waits for nothing of it, and a reconcile of the machine's cached copy would patch an
// object deleted already.
func (r *HarvesterMachineReconciler) machineOfClaim(ctx context.Context, claim client.Object) []ctrl.Request {
	// By group and kind: an owner reference written under another version of the API names
	// the same HarvesterMachine.
	ref := controllerOfOurs(claim, "HarvesterMachine")
	if ref == nil {
		return nil
	}
	key := client.ObjectKey{Namespace: claim.GetNamespace(), Name: ref.Name}
	if claim.GetDeletionTimestamp() != nil {
		hm := &infrav1.HarvesterMachine{}
		err := r.Get(ctx, key, hm)
		if apierrors.IsNotFound(err) || (err == nil && (hm.UID != ref.UID || hm.DeletionTimestamp != nil)) {
			return nil
		}
	}
	return []ctrl.Request{{NamespacedName: key}}
}

// machinesOfHarvesterCluster names the HarvesterMachines of a HarvesterCluster's Cluster (Cluster
// API labels the HarvesterCluster with its name): a failure domain added or changed there moves
// on the machines that wait for it.
func (r *HarvesterMachineReconciler) machinesOfHarvesterCluster(ctx context.Context, o client.Object) []ctrl.Request {
	name := o.GetLabels()[capiClusterNameLabel]
	if name == "" {
		return nil
	}
	return r.machinesOfClusterNamed(ctx, o.GetNamespace(), name)
}

// machinesOfClusterNamed names the HarvesterMachines of the Cluster of that name (by Cluster API's
// cluster-name label).
func (r *HarvesterMachineReconciler) machinesOfClusterNamed(ctx context.Context, namespace, cluster string) []ctrl.Request {
	return r.harvesterMachines(ctx, namespace, client.MatchingLabels{capiClusterNameLabel: cluster})
}

// harvesterMachines names the HarvesterMachines of namespace that match (from the cache; none if
// it cannot be read).
func (r *HarvesterMachineReconciler) harvesterMachines(ctx context.Context, namespace string, match client.ListOption) []ctrl.Request {
	list := &infrav1.HarvesterMachineList{}
	if err := r.List(ctx, list, client.InNamespace(namespace), match); err != nil {
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for _, hm := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&hm)})
	}
	return reqs
}

// SetupWithManager registers the reconciler and its watches, its controller built with options
// (requeue.ReconcileTimeout where they set no reconciliation timeout). It needs the kinds
// Unavailable checks: register it only where Unavailable says nothing.
func (r *HarvesterMachineReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	r.applyDefaults()
	r.managementCluster = management.IdentifyManagementCluster(ctx, mgr.GetAPIReader(), mgr.GetLogger())
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.HarvesterMachine{}, harvesterMachinesByMachine, machineOwnerOf); err != nil {
		return err
	}
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(capiClusterGVK)
	claim := &unstructured.Unstructured{}
	claim.SetGroupVersionKind(ipAddressClaimGVK)
	b := ctrl.NewControllerManagedBy(mgr).Named("harvestermachine").
		For(&infrav1.HarvesterMachine{}, builder.WithPredicates(harvesterMachineUpdatesThatMatter(infrav1.HarvesterMachineFinalizer))).
		// A Machine's spec changing (its bootstrap data arriving, its failure domain), a
		// Cluster's infrastructure or pause changing, and a HarvesterCluster's spec (its failure
		// domains) changing move their HarvesterMachines on.
		Watches(capiMachineMetadata(), handler.EnqueueRequestsFromMapFunc(r.machinesOfMachine),
			builder.OnlyMetadata, builder.WithPredicates(capiMachineChangesThatMatter)).
		Watches(cluster, handler.EnqueueRequestsFromMapFunc(r.machinesOfCluster),
			builder.WithPredicates(capiChangesThatMatter(capiClusterOf, nil))).
		Watches(&infrav1.HarvesterCluster{}, handler.EnqueueRequestsFromMapFunc(r.machinesOfHarvesterCluster),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// An IPAM provider answering a machine's IPAddressClaim moves it on.
		Watches(claim, handler.EnqueueRequestsFromMapFunc(r.machineOfClaim), builder.WithPredicates(claimChangesThatMatter))
	if r.HarvesterEvents != nil {
		b = b.WatchesRawSource(r.HarvesterEvents.MachineSource(OwnerKindHarvesterMachine))
	}
	return b.WithOptions(requeue.WithReconcileTimeout(options)).
		WithLogConstructor(func(req *ctrl.Request) logr.Logger {
			l := mgr.GetLogger().WithValues("controller", "harvestermachine")
			if req != nil {
				l = l.WithValues("harvesterMachine", klog.KRef(req.Namespace, req.Name))
			}
			return l
		}).
		Complete(r)
}

func (r *HarvesterMachineReconciler) applyDefaults() {
	if r.PollInterval <= 0 {
		r.PollInterval = options.DefaultCreatingPollInterval
	}
	if r.WatchedPollInterval <= 0 {
		r.WatchedPollInterval = options.DefaultWatchedPollInterval
	}
	if r.HealthCheckInterval <= 0 {
		r.HealthCheckInterval = options.DefaultHealthCheckInterval
	}
	if r.WatchedHealthCheck <= 0 {
		r.WatchedHealthCheck = options.DefaultWatchedHealthCheckInterval
	}
	if r.DeletionReportDelay <= 0 {
		r.DeletionReportDelay = requeue.DefaultDeletionReportDelay
	}
	if r.StartLimits.StartGrace <= 0 {
		r.StartLimits.StartGrace = requeue.DefaultStartGracePeriod
	}
	if r.StartLimits.IPReport <= 0 {
		r.StartLimits.IPReport = options.DefaultIPReportTimeout
	}
}

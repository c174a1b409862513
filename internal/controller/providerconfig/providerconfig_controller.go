package providerconfig

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/outcome"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// Defaults of the ProviderConfig checks; the recheck interval's is the flag's,
// options.DefaultRecheckInterval.
const (
	DefaultCredentialsPoll     = 30 * time.Second
	DefaultNotReadyRetryPeriod = 30 * time.Second
	// DefaultRefusalRecheckGap is how long after its last check a ProviderConfig that passed is
	// checked again for a machine's refusal (see NoticeRefusal).
	DefaultRefusalRecheckGap = 5 * time.Minute
)

// preflightChecks are the ProviderConfig's check conditions, in the order they are reported.
// Permissions come right after credentials: missing permissions make the later checks fail too,
// and are the cause to report.
var preflightChecks = []string{
	v1alpha1.ConditionCredentialsValid, v1alpha1.ConditionPermissionsReady, v1alpha1.ConditionNetworkReady,
	v1alpha1.ConditionImageReady, v1alpha1.ConditionStorageReady,
}

// Reconciler validates harvester ProviderConfigs before and while MachineRequests
// use them: credentials, default image, network, storage classes and permissions, each a
// condition, and Ready when all pass. It re-checks when a machine meets a refusal a check covers
// (NoticeRefusal), every RecheckInterval, and within
// CredentialsPoll of a change to the credentials Secret (which it reads, but never watches: the
// manager has no list or watch permission on Secrets).
type Reconciler struct {
	client.Client
	// SecretReader reads credentials Secrets uncached (get only).
	SecretReader client.Reader
	Harvester    harvester.Connector
	Recorder     events.EventRecorder

	RecheckInterval time.Duration
	CredentialsPoll time.Duration
	// NotReadyRetry is how often a ProviderConfig that failed a check is checked again.
	NotReadyRetry time.Duration
	// RefusalRecheckGap is the least time between a passed check and one a machine's refusal
	// asks for (see NoticeRefusal).
	RefusalRecheckGap time.Duration

	mu   sync.Mutex
	seen map[types.NamespacedName]lastValidation // last full validation per ProviderConfig

	// When the manager may not write ProviderConfig status: see providerconfig_unwritten.go.
	statusForbidden atomic.Bool             // said once
	unwrittenWake   chan event.GenericEvent // guarded by mu

	recheckWake chan event.GenericEvent // guarded by mu; see NoticeRefusal
}

type lastValidation struct {
	uid             types.UID // a recreated ProviderConfig of the same name is validated afresh
	generation      int64
	secretVersion   string
	at              time.Time
	ready           bool
	reportedFailure string
	// recheckAsked: a machine met a refusal a check covers since (NoticeRefusal).
	recheckAsked bool
	// unwritten is the status the checks gave when the manager may not write it (see
	// statusNotWritten), nil when it was written.
	unwritten *v1alpha1.ProviderConfigStatus
}

// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=providerconfigs/status,verbs=get;update;patch

// Reconcile validates one ProviderConfig, when it is due.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pc := &v1alpha1.ProviderConfig{}
	if err := r.Get(ctx, req.NamespacedName, pc); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pc.Spec.Provider != v1alpha1.ProviderTypeHarvester || !pc.DeletionTimestamp.IsZero() {
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	creds, spec, specErr := PreflightTarget(pc)
	secretVersion := r.secretVersion(ctx, creds)
	last, due := r.due(pc, secretVersion)
	if last.secretVersion != secretVersion {
		// The Secret changed (or went): clients read it again now rather than when their
		// last read of it grows old.
		r.Harvester.Invalidate(creds)
	}
	if !due {
		return ctrl.Result{RequeueAfter: r.CredentialsPoll}, nil
	}

	original := pc.DeepCopy()
	version, checks := r.validate(ctx, creds, spec, specErr)
	ready := setPreflightStatus(pc, version, checks)
	var unwritten *v1alpha1.ProviderConfigStatus
	if err := r.Status().Patch(ctx, pc, client.MergeFrom(original)); err != nil {
		if !apierrors.IsForbidden(err) {
			return ctrl.Result{}, err
		}
		unwritten = r.statusNotWritten(ctx, pc, err)
	}
	failure := failedChecks(pc)
	switch {
	case ready && !last.ready:
		objstatus.RecordEvent(r.Recorder, pc, corev1.EventTypeNormal, "PreflightPassed", "Validate", "All checks passed: the Harvester cluster is ready for machines")
	case !ready && failure != last.reportedFailure:
		objstatus.RecordEvent(r.Recorder, pc, corev1.EventTypeWarning, "PreflightFailed", "Validate", failure)
	}
	r.remember(pc, lastValidation{generation: pc.Generation, secretVersion: secretVersion, at: time.Now(), ready: ready, reportedFailure: failure, unwritten: unwritten})
	if unwritten != nil && (ready != last.ready || failure != last.reportedFailure) {
		r.wakeMachineRequests(pc)
	}
	if !ready {
		log.FromContext(ctx).Info("ProviderConfig is not ready", "failed", failure)
		return ctrl.Result{RequeueAfter: r.NotReadyRetry}, nil
	}
	return ctrl.Result{RequeueAfter: r.CredentialsPoll}, nil
}

// due reports whether a full validation should run now: never done, the spec or the Secret
// changed, a machine met a refusal a check covers, the last one failed and its retry period
// passed, or the recheck interval passed.
func (r *Reconciler) due(pc *v1alpha1.ProviderConfig, secretVersion string) (lastValidation, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.seen[client.ObjectKeyFromObject(pc)]
	if !ok || last.uid != pc.UID || last.generation != pc.Generation || last.secretVersion != secretVersion || last.recheckAsked {
		return last, true
	}
	period := r.RecheckInterval
	if !last.ready {
		period = r.NotReadyRetry
	}
	return last, time.Since(last.at) >= period-time.Second
}

func (r *Reconciler) remember(pc *v1alpha1.ProviderConfig, v lastValidation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[types.NamespacedName]lastValidation{}
	}
	v.uid = pc.UID
	r.seen[client.ObjectKeyFromObject(pc)] = v
}

// forget drops what is remembered of a ProviderConfig that is gone or no longer harvester's.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, key)
}

// secretVersion is the credentials Secret's resourceVersion ("" if it cannot be read).
func (r *Reconciler) secretVersion(ctx context.Context, creds harvester.Credentials) string {
	s := &metav1.PartialObjectMetadata{}
	s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if creds.SecretName == "" || r.SecretReader.Get(ctx, client.ObjectKey{Namespace: creds.SecretNamespace, Name: creds.SecretName}, s) != nil {
		return ""
	}
	return s.ResourceVersion
}

// validate runs the checks; a ProviderConfig that cannot even name its credentials fails them all.
func (r *Reconciler) validate(ctx context.Context, creds harvester.Credentials, spec harvester.PreflightSpec, specErr error) (string, []harvester.Check) {
	if specErr == nil {
		cluster, err := r.Harvester.ClusterFor(ctx, creds)
		if err == nil {
			return cluster.Preflight(ctx, spec)
		}
		specErr = err
	}
	reason := v1alpha1.ReasonHarvesterUnreachable
	if w, ok := errkind.AsWaiting(outcome.FromEngine(specErr)); ok {
		reason = w.Reason
	}
	checks := []harvester.Check{{Type: v1alpha1.ConditionCredentialsValid, Reason: reason, Message: specErr.Error()}}
	for _, t := range preflightChecks[1:] {
		checks = append(checks, harvester.Check{Type: t, Unknown: true, Reason: v1alpha1.ReasonNotChecked, Message: "not checked: the credentials do not work"})
	}
	return "", checks
}

// PreflightTarget derives what to check from the ProviderConfig. The credentials are returned
// whenever they can be located, even if the rest is invalid: their Secret is still watched.
func PreflightTarget(pc *v1alpha1.ProviderConfig) (harvester.Credentials, harvester.PreflightSpec, error) {
	t, err := target.ResolveProviderConfig(pc, pc.Namespace+"/"+pc.Name, "")
	if err != nil {
		return harvester.Credentials{}, harvester.PreflightSpec{}, err
	}
	spec := harvester.PreflightSpec{Namespace: t.Credentials.Namespace, StorageClass: t.StorageClass}
	if spec.Network, err = t.Network(); err != nil {
		return t.Credentials, spec, err
	}
	spec.Image, err = t.DefaultImage()
	return t.Credentials, spec, err
}

// setPreflightStatus writes the checks into the ProviderConfig's status and reports Ready. A check
// that could not complete because Harvester's API failed transiently is Unknown, never False:
// MachineRequests wait only for checks that really failed, and retry their own requests otherwise.
func setPreflightStatus(pc *v1alpha1.ProviderConfig, version string, checks []harvester.Check) bool {
	now := metav1.Now()
	var failed, incomplete []string
	for _, c := range checks {
		status := metav1.ConditionTrue
		switch {
		case c.OK:
		case c.Unknown || c.Reason == v1alpha1.ReasonHarvesterUnreachable:
			status = metav1.ConditionUnknown
			incomplete = append(incomplete, c.Type)
		default:
			status = metav1.ConditionFalse
			failed = append(failed, c.Type)
		}
		meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{Type: c.Type, Status: status, Reason: c.Reason, Message: c.Message, ObservedGeneration: pc.Generation})
	}
	readyCond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllChecksPassed,
		Message: "the Harvester cluster is ready for machines", ObservedGeneration: pc.Generation}
	switch {
	case len(failed) > 0:
		readyCond.Status, readyCond.Reason = metav1.ConditionFalse, v1alpha1.ReasonChecksFailed
		readyCond.Message = "failed checks: " + strings.Join(failed, ", ")
	case len(incomplete) > 0:
		readyCond.Status, readyCond.Reason = metav1.ConditionUnknown, v1alpha1.ReasonChecksIncomplete
		readyCond.Message = "checks not completed (Harvester's API failed; retrying): " + strings.Join(incomplete, ", ")
	}
	meta.SetStatusCondition(&pc.Status.Conditions, readyCond)
	ready := readyCond.Status == metav1.ConditionTrue
	pc.Status.Ready = ready
	pc.Status.Validated = true
	pc.Status.LastValidationTime = &now
	if version != "" {
		pc.Status.ProviderVersion = version
		pc.Status.LastProbeTime = &now
	}
	return ready
}

// failedChecks describes the failed checks, for events and for the MachineRequests that wait.
func failedChecks(pc *v1alpha1.ProviderConfig) string {
	var parts []string
	for _, t := range preflightChecks {
		if c := meta.FindStatusCondition(pc.Status.Conditions, t); c != nil && c.Status == metav1.ConditionFalse {
			parts = append(parts, fmt.Sprintf("%s: %s", c.Type, c.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// PreflightGate makes a MachineRequest wait while a check it depends on fails. Checks of the
// default image only matter to requests that use it. A ProviderConfig whose checks are stale
// (older than its spec) or not run yet does not hold anything up.
func PreflightGate(pc *v1alpha1.ProviderConfig, usesDefaultImage bool) error {
	for _, t := range preflightChecks {
		c := meta.FindStatusCondition(pc.Status.Conditions, t)
		if c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration != pc.Generation {
			continue
		}
		if !usesDefaultImage && (t == v1alpha1.ConditionImageReady || t == v1alpha1.ConditionStorageReady) {
			continue
		}
		// Credentials problems keep their own reason (CredentialsUnavailable, UntrustedEndpoint,
		// ...): it says what to fix, and the same reason shows whichever reconcile sees it first.
		reason := v1alpha1.ReasonProviderConfigNotReady
		if t == v1alpha1.ConditionCredentialsValid {
			reason = c.Reason
		}
		return errkind.Waiting(reason, DefaultNotReadyRetryPeriod,
			"ProviderConfig %s/%s is not ready: %s=False (%s): %s", pc.Namespace, pc.Name, c.Type, c.Reason, c.Message)
	}
	return nil
}

// SetupWithManager registers the reconciler, its controller built with options
// (requeue.ReconcileTimeout where they set no reconciliation timeout).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	r.applyDefaults()
	return ctrl.NewControllerManagedBy(mgr).
		Named("providerconfig").
		For(&v1alpha1.ProviderConfig{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.recheckRequests(), &handler.EnqueueRequestForObject{})).
		WithOptions(requeue.WithReconcileTimeout(options)).
		Complete(r)
}

func (r *Reconciler) applyDefaults() {
	if r.RecheckInterval <= 0 {
		r.RecheckInterval = options.DefaultRecheckInterval
	}
	if r.CredentialsPoll <= 0 {
		r.CredentialsPoll = DefaultCredentialsPoll
	}
	if r.NotReadyRetry <= 0 {
		r.NotReadyRetry = DefaultNotReadyRetryPeriod
	}
	if r.RefusalRecheckGap <= 0 {
		r.RefusalRecheckGap = DefaultRefusalRecheckGap
	}
}

// ConditionsChanged passes ProviderConfig updates that change the spec or a condition, so that
// MachineRequests wake when checks pass or fail but not when only timestamps move.
func ConditionsChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*v1alpha1.ProviderConfig), e.ObjectNew.(*v1alpha1.ProviderConfig)
		if o.Generation != n.Generation || len(o.Status.Conditions) != len(n.Status.Conditions) {
			return true
		}
		for _, c := range n.Status.Conditions {
			old := meta.FindStatusCondition(o.Status.Conditions, c.Type)
			if old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message {
				return true
			}
		}
		return !equality.Semantic.DeepEqual(o.Annotations, n.Annotations)
	}}
}

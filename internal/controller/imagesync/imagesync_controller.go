package imagesync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	platformv1alpha1 "github.com/butlerdotdev/butler-provider-harvester/api/platform/v1alpha1"
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
	"github.com/butlerdotdev/butler-provider-harvester/internal/imagefactory"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// imageSafetyPoll looks again at an image being downloaded when no informer reports its changes
// (credentials without list and watch): Harvester's image events normally wake the ImageSync.
const imageSafetyPoll = time.Minute

// Reconciler puts the image an ImageSync names on Harvester: it creates a
// VirtualMachineImage that Harvester downloads from the Butler Image Factory (the URL comes from
// the ButlerConfig "butler"), and reports it Ready with status.providerImageRef, which the Butler
// bootstrap gives every MachineRequest as spec.image. Only ImageSyncs whose ProviderConfig says
// provider "harvester" are touched, by the same rule as MachineRequests. It never deletes an image:
// VM disks are cloned from it, and other ImageSyncs may share it.
type Reconciler struct {
	client.Client
	Harvester harvester.Connector
	// HarvesterEvents, if set, brings the ImageSyncs whose image changed on Harvester (it is the
	// Notifier of the Harvester caches' watches).
	HarvesterEvents *harvesterevents.HarvesterEvents
	Recorder        events.EventRecorder
	// ConfigGracePeriod is how long a problem only the user can fix (ButlerConfig, credentials,
	// permissions) is waited on before the ImageSync becomes Failed with its reason.
	ConfigGracePeriod time.Duration

	statuses objstatus.Memory[v1alpha1.ImageSyncStatus]
	// live reads namespaces, uncached.
	live client.Reader
}

// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=imagesyncs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=imagesyncs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=imagesyncs/finalizers,verbs=update
// +kubebuilder:rbac:groups=butler.butlerlabs.dev,resources=butlerconfigs,verbs=get;list;watch

// Reconcile moves one ImageSync towards Ready.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	is := &v1alpha1.ImageSync{}
	if err := r.Get(ctx, req.NamespacedName, is); err != nil {
		if apierrors.IsNotFound(err) {
			r.statuses.ForgetKey(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	namespace, name := is.ProviderConfigKey()
	// ImageSyncs judge no preflight checks (they create no machine), so none are lent.
	pc, err := target.LoadProviderConfig(ctx, r.Client, client.ObjectKey{Namespace: namespace, Name: name}, nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	held := controllerutil.ContainsFinalizer(is, v1alpha1.ImageSyncFinalizer)
	harvesterPC := pc != nil && pc.Spec.Provider == v1alpha1.ProviderTypeHarvester
	switch {
	case !held && !harvesterPC:
		// Another provider's, or we cannot tell yet (its ProviderConfig is missing; it is
		// watched): never written to.
		log.FromContext(ctx).V(1).Info("Skipping ImageSync of another provider or without a ProviderConfig")
		return ctrl.Result{}, nil
	case !is.DeletionTimestamp.IsZero(), held && pc != nil && !harvesterPC:
		// Nothing on Harvester is ever deleted for an ImageSync, so letting go needs neither the
		// ProviderConfig nor its credentials: deletion never hangs, and an ImageSync handed to
		// another provider keeps no finalizer of ours.
		r.statuses.Forget(is)
		return ctrl.Result{}, r.patchFinalizer(ctx, is, controllerutil.RemoveFinalizer)
	}
	if !held {
		if err := r.patchFinalizer(ctx, is, controllerutil.AddFinalizer); err != nil {
			return objstatus.ConflictOr(ctx, err)
		}
	}
	s := r.newScope(is)
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("image", imagefactory.ImageName(is.Spec)))
	defer func() {
		if err := s.WriteStatus(ctx, r.Client); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()
	res, err := r.reconcilePhase(ctx, s, pc)
	return requeue.AsPoll(s.Outcome(ctx, res, outcome.FromEngine(err)))
}

// patchFinalizer adds or removes our finalizer, locked so that finalizers other controllers
// added meanwhile stay (a merge patch replaces the whole list).
func (r *Reconciler) patchFinalizer(ctx context.Context, is *v1alpha1.ImageSync, change func(client.Object, string) bool) error {
	patch := client.MergeFromWithOptions(is.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if !change(is, v1alpha1.ImageSyncFinalizer) {
		return nil
	}
	return client.IgnoreNotFound(r.Patch(ctx, is, patch))
}

func (r *Reconciler) reconcilePhase(ctx context.Context, s *imageSyncScope, pc *v1alpha1.ProviderConfig) (reconcile.Result, error) {
	switch s.is.Status.Phase {
	case v1alpha1.ImageSyncPhaseFailed:
		why, retry, err := r.retryable(ctx, s, pc)
		if err != nil || !retry {
			return reconcile.Result{}, err
		}
		log.FromContext(ctx).Info("Retrying failed ImageSync", "because", why)
		s.Event(corev1.EventTypeNormal, "Retrying", "Sync", "Retrying after "+s.is.Status.FailureReason+": "+why)
		s.is.Status.FailureReason, s.is.Status.FailureMessage = "", ""
		meta.RemoveStatusCondition(&s.is.Status.Conditions, v1alpha1.ConditionDegraded)
		s.setPhase(v1alpha1.ImageSyncPhasePending)
	case v1alpha1.ImageSyncPhaseReady:
		return r.checkReady(ctx, s, pc)
	case "":
		s.setPhase(v1alpha1.ImageSyncPhasePending)
	}
	return r.sync(ctx, s, pc)
}

// target is where the ImageSync's image goes: the client of the ProviderConfig's Harvester
// cluster, and the image's name in its harvester.namespace.
func (r *Reconciler) target(ctx context.Context, s *imageSyncScope, pc *v1alpha1.ProviderConfig) (harvester.Cluster, harvester.ObjectRef, error) {
	// pc is nil when it was deleted after we took the ImageSync on (we hold its finalizer).
	namespace, name := s.is.ProviderConfigKey()
	t, err := target.ResolveProviderConfig(pc, namespace+"/"+name, "spec.providerConfigRef")
	if err != nil {
		return nil, harvester.ObjectRef{}, err
	}
	consumer, err := target.ConsumerOf(ctx, r.live, t.ProviderConfig, s.is.Namespace)
	if err != nil {
		return nil, harvester.ObjectRef{}, err
	}
	if err := target.SharedWith(t.ProviderConfig, consumer, "ImageSyncs", "spec.providerConfigRef"); err != nil {
		return nil, harvester.ObjectRef{}, err
	}
	image := imagefactory.ImageName(s.is.Spec)
	if errs := validation.IsDNS1123Subdomain(image); len(errs) > 0 {
		return nil, harvester.ObjectRef{}, errkind.Permanent(v1alpha1.ReasonCreateImageFailed,
			"the image name derived from spec.displayName %q is %q, which is not a valid name (%s): choose a display name with letters or digits",
			s.is.Spec.DisplayName, image, strings.Join(errs, "; "))
	}
	cluster, err := r.Harvester.ClusterFor(ctx, t.Credentials)
	return cluster, harvester.ObjectRef{Namespace: t.Credentials.Namespace, Name: image}, err
}

// sync creates the image if needed and follows its import.
func (r *Reconciler) sync(ctx context.Context, s *imageSyncScope, pc *v1alpha1.ProviderConfig) (reconcile.Result, error) {
	if s.is.Spec.TransferMode == v1alpha1.TransferModeProxy {
		return reconcile.Result{}, errkind.Permanent(v1alpha1.ReasonUnsupportedTransferMode,
			"spec.transferMode is %q: Harvester downloads images from the factory itself; set spec.transferMode to %q (the default)", v1alpha1.TransferModeProxy, v1alpha1.TransferModeDirect)
	}
	if err := imagefactory.Validate(s.is.Spec); err != nil {
		return reconcile.Result{}, asImageSyncError(errkind.Permanent(v1alpha1.ReasonInvalidSpec, "%v", err))
	}
	factory, err := r.factoryURL(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	url := imagefactory.URL(factory, s.is.Spec)
	s.is.Status.ArtifactURL = url
	cluster, ref, err := r.target(ctx, s, pc)
	if err != nil {
		return reconcile.Result{}, asImageSyncError(err)
	}
	imported, err := cluster.EnsureImage(ctx, harvester.ImageSpec{Ref: ref, DisplayName: s.is.Spec.DisplayName, URL: url,
		Requester: s.is.Namespace + "/" + s.is.Name})
	if err != nil {
		return reconcile.Result{}, asImageSyncError(err)
	}
	what := "VirtualMachineImage " + ref.String()
	if imported.Created {
		log.FromContext(ctx).Info("Created image on Harvester", "image", ref.String(), "url", url)
		s.Event(corev1.EventTypeNormal, "Created", "Sync", fmt.Sprintf("Created %s; Harvester downloads it from %s", what, url))
	}
	switch {
	case imported.Failure != nil:
		return reconcile.Result{}, imported.Failure
	case imported.Imported:
		s.ready(ref)
		return reconcile.Result{}, nil
	}
	s.setPhase(v1alpha1.ImageSyncPhaseDownloading)
	s.Progressing(v1alpha1.ReasonImageDownloading, imported.Message)
	s.Healthy()
	return reconcile.Result{RequeueAfter: imageSafetyPoll}, nil
}

// factoryURL reads the Image Factory's URL from the ButlerConfig "butler".
func (r *Reconciler) factoryURL(ctx context.Context) (string, error) {
	bc := &platformv1alpha1.ButlerConfig{}
	err := r.Get(ctx, client.ObjectKey{Name: platformv1alpha1.ButlerConfigName}, bc)
	switch {
	case apierrors.IsNotFound(err):
		return "", errkind.Waiting(v1alpha1.ReasonButlerConfigNotFound, requeue.ProviderConfigRetry,
			"ButlerConfig %q does not exist: create it with spec.imageFactory.url, the Butler Image Factory images are downloaded from", platformv1alpha1.ButlerConfigName)
	case err != nil:
		return "", err
	case bc.FactoryURL() == "":
		return "", errkind.Waiting(v1alpha1.ReasonImageFactoryNotConfigured, requeue.ProviderConfigRetry,
			"ButlerConfig %q has no spec.imageFactory.url: set it to the Butler Image Factory images are downloaded from", platformv1alpha1.ButlerConfigName)
	}
	return bc.FactoryURL(), nil
}

// asImageSyncError gives the errors of the ProviderConfig and of Harvester the ImageSync reasons
// the published provider uses: credentials problems are CredentialsError, anything Harvester
// refuses about the image is CreateImageFailed. Waits stay waits (failed only after the grace
// period), transient errors stay transient.
func asImageSyncError(err error) error {
	err = outcome.FromEngine(err)
	if w, ok := errkind.AsWaiting(err); ok {
		reason := w.Reason
		switch w.Reason {
		case v1alpha1.ReasonCredentialsUnavailable, v1alpha1.ReasonUntrustedEndpoint, v1alpha1.ReasonInsecureCredentials, v1alpha1.ReasonInvalidProviderConfig, harvester.ReasonInvalidEndpoint:
			reason = v1alpha1.ReasonCredentialsError
		case v1alpha1.ReasonPermissionDenied, v1alpha1.ReasonQuotaExceeded:
			reason = v1alpha1.ReasonCreateImageFailed
		}
		return &errkind.WaitingError{Reason: reason, RetryAfter: w.RetryAfter, Message: w.Message}
	}
	if p, ok := errkind.AsPermanent(err); ok && p.Reason == v1alpha1.ReasonInvalidSpec {
		return &errkind.PermanentError{Reason: v1alpha1.ReasonCreateImageFailed, Message: p.Message}
	}
	return err
}

// checkReady keeps a Ready ImageSync Ready while its image exists: neither a later ButlerConfig
// change nor a Harvester outage flips it. An image deleted on Harvester is created again.
func (r *Reconciler) checkReady(ctx context.Context, s *imageSyncScope, pc *v1alpha1.ProviderConfig) (reconcile.Result, error) {
	ref, err := harvester.ParseObjectRef(s.is.Status.ProviderImageRef, "")
	if err != nil {
		return r.resync(ctx, s, pc, "status.providerImageRef "+s.is.Status.ProviderImageRef+" is not <namespace>/<name>")
	}
	cluster, _, err := r.target(ctx, s, pc)
	if err != nil {
		log.FromContext(ctx).V(1).Info("Cannot check the image of a Ready ImageSync", "error", err.Error())
		return reconcile.Result{}, nil // stays Ready; the ProviderConfig's watch brings it back
	}
	exists, err := cluster.ImageExists(ctx, ref)
	if err != nil || exists {
		return reconcile.Result{}, err
	}
	return r.resync(ctx, s, pc, "VirtualMachineImage "+ref.String()+" was deleted on Harvester")
}

// resync takes a Ready ImageSync whose image is gone back to Pending and creates the image again.
func (r *Reconciler) resync(ctx context.Context, s *imageSyncScope, pc *v1alpha1.ProviderConfig, why string) (reconcile.Result, error) {
	s.Event(corev1.EventTypeWarning, v1alpha1.ReasonImageMissing, "Sync", why+"; creating it again")
	s.is.Status.ProviderImageRef = ""
	s.setPhase(v1alpha1.ImageSyncPhasePending)
	s.Progressing(v1alpha1.ReasonImageMissing, why+"; creating it again")
	meta.SetStatusCondition(&s.is.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonImageMissing, Message: why, ObservedGeneration: s.is.Generation})
	return r.sync(ctx, s, pc)
}

// retryable says whether a Failed ImageSync should be tried again, and why: its spec changed or
// the retry annotation is set, or what made it fail is gone (the ButlerConfig exists, the
// credentials work, the image Harvester gave up on was deleted to be downloaded again).
func (r *Reconciler) retryable(ctx context.Context, s *imageSyncScope, pc *v1alpha1.ProviderConfig) (string, bool, error) {
	if s.is.Status.ObservedGeneration != s.is.Generation {
		return "the spec changed", true, nil
	}
	if s.is.Annotations[v1alpha1.AnnotationRetry] == "true" {
		patch := client.MergeFrom(s.is.DeepCopy())
		delete(s.is.Annotations, v1alpha1.AnnotationRetry)
		err := s.PatchMeta(ctx, r.Client, patch)
		return "annotation " + v1alpha1.AnnotationRetry, err == nil, err
	}
	switch s.is.Status.FailureReason {
	case v1alpha1.ReasonButlerConfigNotFound, v1alpha1.ReasonImageFactoryNotConfigured:
		if _, err := r.factoryURL(ctx); err == nil {
			return "the ButlerConfig now configures the image factory", true, nil
		}
	case v1alpha1.ReasonCredentialsError, v1alpha1.ReasonProviderConfigNotFound, v1alpha1.ReasonProviderConfigNotShared:
		if _, _, err := r.target(ctx, s, pc); err == nil {
			return "the ProviderConfig and its credentials work now", true, nil
		}
	case v1alpha1.ReasonHarvesterImportFailed, v1alpha1.ReasonHarvesterRetryLimitExceeded, v1alpha1.ReasonHarvesterInitFailed, v1alpha1.ReasonCreateImageFailed:
		cluster, ref, err := r.target(ctx, s, pc)
		if err != nil {
			return "", false, nil
		}
		exists, err := cluster.ImageExists(ctx, ref)
		if err == nil && !exists {
			return "VirtualMachineImage " + ref.String() + " was deleted", true, nil
		}
	}
	return "", false, nil
}

// imageSyncScope is one reconcile of one ImageSync (see objstatus.Scope).
type imageSyncScope struct {
	*objstatus.Scope[*v1alpha1.ImageSync, v1alpha1.ImageSyncStatus]
	is *v1alpha1.ImageSync
}

// imageSyncStatus is where an ImageSync keeps its status.
var imageSyncStatus = objstatus.Kind[*v1alpha1.ImageSync, v1alpha1.ImageSyncStatus]{
	Name:     "ImageSync",
	Status:   func(is *v1alpha1.ImageSync) *v1alpha1.ImageSyncStatus { return &is.Status },
	DeepCopy: (*v1alpha1.ImageSyncStatus).DeepCopy,
	Fields: func(st *v1alpha1.ImageSyncStatus) objstatus.Fields {
		return objstatus.Fields{Phase: (*string)(&st.Phase), LastUpdated: &st.LastUpdated, Conditions: &st.Conditions,
			FailureReason: &st.FailureReason, FailureMessage: &st.FailureMessage, ObservedGeneration: &st.ObservedGeneration}
	},
	FailedPhase: string(v1alpha1.ImageSyncPhaseFailed),
	Conditions:  outcome.ButlerConditions,
}

// newScope starts a reconcile of is. Its policy: every wait is on something only the user can
// fix (the ButlerConfig, the ProviderConfig, credentials, permissions): it says so in Degraded,
// with a Warning event when it begins, and becomes Failed after the grace period. Ready, once
// False, keeps saying what first took the image away until it is Ready again.
func (r *Reconciler) newScope(is *v1alpha1.ImageSync) *imageSyncScope {
	grace := r.ConfigGracePeriod
	if grace <= 0 {
		grace = options.DefaultConfigGracePeriod
	}
	return &imageSyncScope{is: is, Scope: objstatus.New(is, imageSyncStatus, objstatus.Policy{
		Action:           "Sync",
		FailAction:       "Sync",
		Degrading:        objstatus.AnyReason,
		NewWaitCondition: v1alpha1.ConditionDegraded,
		KeepNotReady:     true,
		Configuration:    objstatus.AnyReason,
		Grace:            grace,
		GraceExpired:     "%s (waited %s)",
	}, r.Recorder, &r.statuses)}
}

func (s *imageSyncScope) setPhase(p v1alpha1.ImageSyncPhase) { s.SetPhase(string(p)) }

func (s *imageSyncScope) ready(ref harvester.ObjectRef) {
	msg := "Image synced to provider: " + ref.String()
	if s.is.Status.Phase != v1alpha1.ImageSyncPhaseReady {
		s.Event(corev1.EventTypeNormal, "Ready", "Sync", msg)
	}
	s.setPhase(v1alpha1.ImageSyncPhaseReady)
	s.is.Status.ProviderImageRef = ref.String()
	s.is.Status.FailureReason, s.is.Status.FailureMessage = "", ""
	s.SetCondition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonImageReady, msg)
	s.SetCondition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonImageReady, msg)
	s.Healthy()
}

// Indexes of ImageSyncs: by "<namespace>/<name>" of their ProviderConfig, and by the name of
// their image (images are reported by name; several ImageSyncs may share one).
const (
	imageSyncProviderConfigIndex = "imagesync.spec.providerConfigRef"
	imageSyncImageNameIndex      = "imagesync.imageName"
)

// SetupWithManager registers the controller, built with options (requeue.ReconcileTimeout
// where they set no reconciliation timeout). It needs the ImageSync and ButlerConfig kinds, read
// by the manager: register it only where Unavailable says nothing.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	r.live = mgr.GetAPIReader()
	indexer := mgr.GetFieldIndexer()
	if err := indexer.IndexField(ctx, &v1alpha1.ImageSync{}, imageSyncProviderConfigIndex, func(o client.Object) []string {
		ns, name := o.(*v1alpha1.ImageSync).ProviderConfigKey()
		return []string{ns + "/" + name}
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &v1alpha1.ImageSync{}, imageSyncImageNameIndex, func(o client.Object) []string {
		return []string{imagefactory.ImageName(o.(*v1alpha1.ImageSync).Spec)}
	}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("imagesync").
		WithOptions(requeue.WithReconcileTimeout(options)).
		For(&v1alpha1.ImageSync{}, builder.WithPredicates(objmeta.UpdatesThatMatter(v1alpha1.ImageSyncFinalizer))).
		Watches(&v1alpha1.ProviderConfig{}, handler.EnqueueRequestsFromMapFunc(r.byIndex(imageSyncProviderConfigIndex, func(o client.Object) string {
			return o.GetNamespace() + "/" + o.GetName()
		})), builder.WithPredicates(providerconfig.ConditionsChanged())).
		Watches(&platformv1alpha1.ButlerConfig{}, handler.EnqueueRequestsFromMapFunc(r.all)).
		WithLogConstructor(func(req *ctrl.Request) logr.Logger {
			l := mgr.GetLogger().WithValues("controller", "imagesync")
			if req != nil {
				l = l.WithValues("imageSync", klog.KRef(req.Namespace, req.Name))
			}
			return l
		})
	if r.HarvesterEvents != nil {
		byImageName := r.byIndex(imageSyncImageNameIndex, func(o client.Object) string { return o.GetName() })
		b = b.WatchesRawSource(r.HarvesterEvents.ImageSource(func(ctx context.Context, image types.NamespacedName) []ctrl.Request {
			return byImageName(ctx, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: image.Namespace, Name: image.Name}})
		}))
	}
	return b.Complete(r)
}

// byIndex maps an object to the ImageSyncs whose index value is key(object).
func (r *Reconciler) byIndex(index string, key func(client.Object) string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []ctrl.Request {
		list := &v1alpha1.ImageSyncList{}
		if err := r.List(ctx, list, client.MatchingFields{index: key(o)}); err != nil {
			log.FromContext(ctx).Error(err, "Listing ImageSyncs", "index", index)
			return nil
		}
		return requestsOf(list)
	}
}

// all maps a ButlerConfig change to every ImageSync: there is one ButlerConfig.
func (r *Reconciler) all(ctx context.Context, _ client.Object) []ctrl.Request {
	list := &v1alpha1.ImageSyncList{}
	if err := r.List(ctx, list); err != nil {
		log.FromContext(ctx).Error(err, "Listing ImageSyncs")
		return nil
	}
	return requestsOf(list)
}

func requestsOf(list *v1alpha1.ImageSyncList) []ctrl.Request {
	reqs := make([]ctrl.Request, 0, len(list.Items))
	for i := range list.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return reqs
}

// Unavailable says why the ImageSync controller cannot run ("" if it can): a kind the cluster does
// not know, or a permission the manager lacks (checked with SelfSubjectAccessReviews, before any
// informer would retry refused lists forever). Where it cannot, the controller stays off and
// MachineRequests are served as usual.
func Unavailable(ctx context.Context, mgr ctrl.Manager) string {
	return management.KindsUnavailable(ctx, mgr, v1alpha1.GroupVersion, []management.ServedKind{{Kind: "ImageSync", Resource: "imagesyncs"}, {Kind: "ButlerConfig", Resource: "butlerconfigs"}})
}

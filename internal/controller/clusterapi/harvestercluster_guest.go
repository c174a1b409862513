package clusterapi

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// The tenant cluster's Harvester credentials (HarvesterCluster spec.guestCredentials): the
// engine makes a guest identity on Harvester (harvester.GuestCluster), and this front door
// delivers its kubeconfig in the management cluster as a ClusterResourceSet Secret, for Cluster
// API core to apply in the tenant cluster as Secret kube-system/cloud-config, key cloud-config:
// what Harvester's cloud provider (/etc/kubernetes/cloud-config) and CSI driver
// (--kubeconfig=/etc/csi/cloud-config) mount in CAPHV's templates.
//
// A ClusterResourceSet Secret rather than a write into the tenant cluster through
// <cluster>-kubeconfig: Cluster API core applies it (with strategy Reconcile, again whenever it
// changes, which carries a rotated token to the tenant), so the provider needs no access to
// tenant clusters, it works the same for hosted control planes, and it moves with the cluster
// (clusterctl move takes Secrets named <cluster>-... and objects the HarvesterCluster owns).

// OwnerKindHarvesterCluster is the owner kind of the guest identities of HarvesterClusters.
const OwnerKindHarvesterCluster = "HarvesterCluster"

// The delivery contract, fixed: the cluster templates' ClusterResourceSets name this Secret.
const (
	// guestCloudConfigSuffix: the Secret is <Cluster name>-harvester-cloud-config.
	guestCloudConfigSuffix = "-harvester-cloud-config"
	// guestCloudConfigKey is its one data key: the YAML of the Secret to apply in the tenant.
	guestCloudConfigKey = "cloud-config.yaml"
	// clusterResourceSetSecretType is the type ClusterResourceSets accept Secrets of.
	clusterResourceSetSecretType corev1.SecretType = "addons.cluster.x-k8s.io/resource-set" //nolint:gosec // G101: a Secret type, not a credential
	// tenantCloudConfigNamespace, tenantCloudConfigName and tenantCloudConfigKey are the Secret in
	// the tenant cluster, and its key, that the cloud provider and CSI driver mount.
	tenantCloudConfigNamespace = metav1.NamespaceSystem
	tenantCloudConfigName      = "cloud-config"
	tenantCloudConfigKey       = "cloud-config"
	// tenantTokenKey holds the kubeconfig's token as a file of its own (harvester.GuestTokenFile
	// where the templates mount the Secret), which client-go reads again every minute.
	tenantTokenKey = "token"
)

// Annotations of the delivered Secret: what its credentials were issued from, so that they are
// re-issued when that changes, and deleted where they were made.
const (
	annotationGuestSource    = "infrastructure.butlerlabs.dev/guest-credentials-source"
	annotationGuestNamespace = "infrastructure.butlerlabs.dev/guest-credentials-namespace"
	// annotationGuestEndpoint names the server and CA the delivered kubeconfig points at: when
	// where tenants reach Harvester changes, the kubeconfig is written again with the same token.
	annotationGuestEndpoint = "infrastructure.butlerlabs.dev/guest-credentials-endpoint"
	// annotationGuestTokenSecret names the token Secret on Harvester whose token is delivered.
	annotationGuestTokenSecret = "infrastructure.butlerlabs.dev/guest-credentials-token-secret"
	// annotationGuestRetiring records the token Secret whose token a re-issue replaced, and
	// when it is deleted: "<name>,<RFC 3339 time>".
	annotationGuestRetiring = "infrastructure.butlerlabs.dev/guest-credentials-retiring"
)

// How soon the guest phase looks again.
const (
	// defaultGuestRecheck: a delivered identity is checked (its token Secret still there, the
	// ProviderConfig's credentials and namespace unchanged) this often when nothing else wakes
	// the HarvesterCluster: ProviderConfigs and Harvester are not watched for it.
	defaultGuestRecheck = time.Minute
	guestFailedRetry    = 10 * time.Second
	guestBlockedRetry   = time.Minute
	// guestTokenRetiredRetry: a token Secret was just deleted, to be made again.
	guestTokenRetiredRetry = time.Second
	// defaultGuestTokenOverlap is how long a token replaced by a re-issue keeps working: the new
	// one reaches the tenant's Secret through the ClusterResourceSet within seconds, its pods'
	// mounted files within kubelet's sync period (about a minute), and client-go reads the
	// token file again every minute.
	defaultGuestTokenOverlap = 10 * time.Minute
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update;delete

// guestCloudConfigName names the delivered Secret of a Cluster.
func guestCloudConfigName(clusterName string) string { return clusterName + guestCloudConfigSuffix }

// clusterNameOf names the HarvesterCluster's Cluster: its cluster-name label (Cluster API sets
// it), else its owner Cluster ("" if neither, as before Cluster API took it on).
func clusterNameOf(hc *infrav1.HarvesterCluster) string {
	if name := hc.Labels[capiClusterNameLabel]; name != "" {
		return name
	}
	return ownerOfKind(hc, capiClusterGVK)
}

// guestOwner is the engine's owner of a HarvesterCluster's guest identity.
func guestOwner(hc *infrav1.HarvesterCluster) harvester.Owner {
	return harvester.Owner{Kind: OwnerKindHarvesterCluster, Namespace: hc.Namespace, Name: hc.Name, UID: hc.UID}
}

// buildGuestCloudConfigSecret is the delivered Secret: in the HarvesterCluster's namespace,
// controlled by it, labelled with the Cluster's name, of the ClusterResourceSet type, whose one
// key holds the manifest of the tenant's Secret kube-system/cloud-config.
func buildGuestCloudConfigSecret(hc *infrav1.HarvesterCluster, clusterName string, creds harvester.GuestCredentials, namespace, retiring string) (*corev1.Secret, error) {
	manifest, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   map[string]any{"name": tenantCloudConfigName, "namespace": tenantCloudConfigNamespace},
		"type":       string(corev1.SecretTypeOpaque),
		// []byte marshals as base64, as a Secret's data is written.
		"data": map[string][]byte{tenantCloudConfigKey: creds.Kubeconfig, tenantTokenKey: creds.Token},
	})
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: hc.Namespace, Name: guestCloudConfigName(clusterName),
			Labels:      map[string]string{capiClusterNameLabel: clusterName},
			Annotations: guestAnnotations(creds, namespace, retiring),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: infrav1.GroupVersion.String(), Kind: "HarvesterCluster", Name: hc.Name, UID: hc.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Type: clusterResourceSetSecretType,
		Data: map[string][]byte{guestCloudConfigKey: manifest},
	}, nil
}

// guestAnnotations record, on the delivered Secret, what its credentials were issued from and where.
func guestAnnotations(creds harvester.GuestCredentials, namespace, retiring string) map[string]string {
	a := map[string]string{annotationGuestSource: creds.Source, annotationGuestNamespace: namespace, annotationGuestEndpoint: creds.Endpoint,
		annotationGuestTokenSecret: creds.TokenSecret}
	if retiring != "" {
		a[annotationGuestRetiring] = retiring
	}
	return a
}

// deliveredKubeconfig reads the kubeconfig back out of a delivered Secret (nil if it holds none).
func deliveredKubeconfig(s *corev1.Secret) []byte {
	embedded := &corev1.Secret{}
	if err := yaml.Unmarshal(s.Data[guestCloudConfigKey], embedded); err != nil {
		return nil
	}
	return embedded.Data[tenantCloudConfigKey]
}

// deliveredToken is the token of a delivered kubeconfig (nil if none).
func deliveredToken(kubeconfig []byte) []byte {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil || cfg.Contexts[cfg.CurrentContext] == nil {
		return nil
	}
	if user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]; user != nil && user.Token != "" {
		return []byte(user.Token)
	}
	return nil
}

// guestPhase makes, checks and delivers the tenant cluster's Harvester credentials. It never
// holds the HarvesterCluster back: whatever goes wrong is said in GuestCredentialsReady, and the
// result says when to look again. Its steps, in order: the delivered Secret read (and judged
// whose), the opt-out honoured, Harvester and the tenant endpoint reached, the credentials
// planned, the provider's own permissions and the namespace's neighbours checked, and the
// credentials issued and delivered.
func (r *HarvesterClusterReconciler) guestPhase(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], clusterName string, t *target.Target) reconcile.Result {
	hc := s.Obj
	if r.Harvester == nil {
		return reconcile.Result{}
	}
	delivered, res, ok := r.ourDelivered(ctx, s, clusterName)
	if !ok {
		return res
	}
	if !hc.Spec.GuestCredentialsManagedByProvider() {
		return r.guestNotManaged(ctx, s, delivered, t)
	}
	engine, err := r.Harvester.ClusterFor(ctx, t.Credentials)
	if err != nil {
		setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestCredentialsPending, "Harvester cannot be reached with ProviderConfig %s's credentials: %v", t.Ref, err)
		return reconcile.Result{RequeueAfter: guestFailedRetry}
	}
	guests, ok := engine.(harvester.GuestCluster)
	if !ok {
		return reconcile.Result{}
	}
	endpoint, invalid, err := r.tenantEndpoint(ctx, t)
	switch {
	case err != nil:
		setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestCredentialsFailed, "%v", err)
		return reconcile.Result{RequeueAfter: guestFailedRetry}
	case invalid != "":
		// Said, and nothing changed: delivered credentials stay as they are.
		setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestTenantServerInvalid, "%s", invalid)
		return reconcile.Result{RequeueAfter: r.guestRecheck()}
	}
	plan, res, ok := r.planGuest(ctx, s, guests, delivered, clusterName, endpoint, t)
	if !ok {
		return res
	}
	if res, ok := r.guestPermitted(ctx, s, guests, plan, clusterName, t); !ok {
		return res
	}
	if res, ok := r.guestNamespaceOwn(ctx, s, guests, plan, clusterName, t); !ok {
		return res
	}
	return r.deliverGuest(ctx, s, guests, delivered, plan, clusterName, endpoint, t)
}

// setGuestCondition says where the tenant cluster's credentials stand (GuestCredentialsReady).
func setGuestCondition(s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], status metav1.ConditionStatus, reason, format string, args ...any) {
	s.SetCondition(infrav1.ConditionGuestCredentialsReady, status, reason, fmt.Sprintf(format, args...))
}

// ourDelivered reads the Secret the credentials are delivered in: nil if there is none, or if it
// is someone else's and the provider manages no credentials (it is never changed or deleted, and
// not trusted as a record of what was made). Someone else's Secret of that name where the
// provider would deliver stops the phase (ok false).
func (r *HarvesterClusterReconciler) ourDelivered(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], clusterName string) (*corev1.Secret, reconcile.Result, bool) {
	hc := s.Obj
	delivered, err := r.deliveredSecret(ctx, hc.Namespace, clusterName)
	if err != nil {
		setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestCredentialsFailed, "read Secret %s/%s: %v", hc.Namespace, guestCloudConfigName(clusterName), err)
		return nil, reconcile.Result{RequeueAfter: guestFailedRetry}, false
	}
	if delivered == nil || deliveredBy(delivered, hc) {
		return delivered, reconcile.Result{}, true
	}
	if hc.Spec.GuestCredentialsManagedByProvider() {
		setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestCredentialsNameConflict,
			"Secret %s/%s exists and is not controlled by this HarvesterCluster: the provider never changes it; delete or rename it, or set spec.guestCredentials to None",
			delivered.Namespace, delivered.Name)
		return nil, reconcile.Result{RequeueAfter: r.guestRecheck()}, false
	}
	return nil, reconcile.Result{}, true
}

// guestNotManaged honours spec.guestCredentials None: what the provider delivered before is
// revoked, and the condition says the tenant's credentials are the user's to give.
func (r *HarvesterClusterReconciler) guestNotManaged(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], delivered *corev1.Secret, t *target.Target) reconcile.Result {
	if delivered != nil {
		if res, done := r.revokeGuest(ctx, s, delivered, t); !done {
			return res
		}
	}
	meta.RemoveStatusCondition(&s.Obj.Status.Conditions, infrav1.ConditionGuestCredentialsIsolated)
	setGuestCondition(s, metav1.ConditionTrue, infrav1.ReasonGuestCredentialsNotManaged,
		"spec.guestCredentials is None: the provider makes no Harvester credentials for the tenant cluster; give it Secret %s/%s (key %s) yourself",
		tenantCloudConfigNamespace, tenantCloudConfigName, tenantCloudConfigKey)
	return reconcile.Result{}
}

// guestPermitted checks that the provider's own credentials may make the tenant's (ok false, and
// the condition says what they lack, otherwise). Granted on Harvester, which is not watched, the
// permissions are looked at again as often as a delivered identity is. Credentials delivered with
// Harvester's own cluster-wide binding keep working, bound as they were, until the provider may
// narrow them.
func (r *HarvesterClusterReconciler) guestPermitted(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], guests harvester.GuestCluster, plan guestPlan, clusterName string, t *target.Target) (reconcile.Result, bool) {
	namespace := t.Credentials.Namespace
	missing, err := guests.MissingGuestPermissions(ctx, namespace)
	switch {
	case err != nil:
		setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestCredentialsFailed, "ask Harvester what ProviderConfig %s's credentials may do: %v", t.Ref, err)
		return reconcile.Result{RequeueAfter: guestFailedRetry}, false
	case len(missing) == 0:
		return reconcile.Result{}, true
	case plan.wide:
		r.issued(s, clusterName, namespace, guestOwner(s.Obj), t)
		s.SetCondition(infrav1.ConditionGuestCredentialsIsolated, metav1.ConditionFalse, infrav1.ReasonGuestBindingClusterWide, fmt.Sprintf(
			"the credentials are bound to Harvester's ClusterRole %s cluster-wide, which may patch every VM on Harvester, and ProviderConfig %s's credentials may not narrow them: they may not %s. Apply the current config/harvester/guest-rbac.yaml on Harvester (docs/harvester-rbac.md); the credentials are then narrowed with the same token",
			harvester.GuestCSIDriverRole, t.Ref, harvester.DescribePermissions(missing)))
		return reconcile.Result{RequeueAfter: r.guestRecheck()}, false
	}
	setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestPermissionsMissing,
		"ProviderConfig %s's credentials may not: %s. Grant them on Harvester (config/harvester/guest-rbac.yaml, see docs/harvester-rbac.md), or set spec.guestCredentials to None and give the tenant cluster Secret %s/%s yourself; the cluster's machines are made either way, but their Nodes get no providerID without it",
		t.Ref, harvester.DescribePermissions(missing), tenantCloudConfigNamespace, tenantCloudConfigName)
	return reconcile.Result{RequeueAfter: r.guestRecheck()}, false
}

// guestNamespaceOwn checks, before the cluster's first credentials are issued, that nothing of
// others is in its Harvester namespace, unless the ProviderConfig lets clusters share it (ok
// false, and the condition names what is there, otherwise).
func (r *HarvesterClusterReconciler) guestNamespaceOwn(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], guests harvester.GuestCluster, plan guestPlan, clusterName string, t *target.Target) (reconcile.Result, bool) {
	if !plan.first || sharingAllowed(t.ProviderConfig) {
		return reconcile.Result{}, true
	}
	namespace := t.Credentials.Namespace
	neighbours, err := r.neighbours(ctx, guests, s.Obj, clusterName, namespace, true)
	if err != nil {
		setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestCredentialsFailed, "%v", err)
		return reconcile.Result{RequeueAfter: guestFailedRetry}, false
	}
	if neighbours.Count == 0 {
		return reconcile.Result{}, true
	}
	setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestNamespaceShared,
		"Harvester namespace %s (ProviderConfig %s's harvester.namespace) holds objects that are not Cluster %s's: %s. Credentials bound there would let the tenant cluster stop, re-volume or delete them, so none are issued. Give the cluster a ProviderConfig whose harvester.namespace it has to itself, or, where the clusters sharing it trust each other, annotate ProviderConfig %s with %s=true",
		namespace, t.Ref, clusterName, neighbours, t.Ref, v1alpha1.AnnotationSharedNamespace)
	return reconcile.Result{RequeueAfter: r.guestRecheck()}, false
}

// deliverGuest issues the tenant cluster's credentials on Harvester as planned and delivers their
// kubeconfig in the cluster's cloud-config Secret, then judges their isolation.
func (r *HarvesterClusterReconciler) deliverGuest(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], guests harvester.GuestCluster, delivered *corev1.Secret, plan guestPlan, clusterName string, endpoint harvester.GuestEndpoint, t *target.Target) reconcile.Result {
	owner, namespace := guestOwner(s.Obj), t.Credentials.Namespace
	creds, err := guests.EnsureGuest(ctx, harvester.GuestSpec{Owner: owner, Namespace: namespace, Endpoint: endpoint, TokenSecret: plan.tokenSecret})
	if err != nil {
		return r.guestError(s, err)
	}
	secret, err := buildGuestCloudConfigSecret(s.Obj, clusterName, creds, namespace, plan.retiring)
	if err == nil {
		err = r.writeDelivered(ctx, delivered, secret)
	}
	if err != nil {
		setGuestCondition(s, metav1.ConditionFalse, infrav1.ReasonGuestCredentialsFailed, "write Secret %s/%s: %v", secret.Namespace, secret.Name, err)
		return reconcile.Result{RequeueAfter: guestFailedRetry}
	}
	if creds.Issued || plan.retiring != "" {
		ctrl.LoggerFrom(ctx).Info("Issued the tenant cluster's Harvester credentials", "namespace", namespace, "serviceAccount", harvester.GuestNamesFor(owner, namespace).ServiceAccount)
		s.Event(corev1.EventTypeNormal, infrav1.ReasonGuestCredentialsIssued, "Issue",
			fmt.Sprintf("issued a token for the tenant cluster's ServiceAccount in Harvester namespace %s; delivered in Secret %s%s", namespace, secret.Name, retiringNote(plan.retiring)))
	}
	r.issued(s, clusterName, namespace, owner, t)
	return r.isolation(ctx, s, guests, clusterName, namespace, plan.first)
}

// guestPlan is what the guest phase does with a HarvesterCluster's identity.
type guestPlan struct {
	// first: no identity of this cluster is in the namespace yet, so that nothing there (no PVC
	// its CSI driver made) can be its own without its labels.
	first bool
	// wide: the delivered token is valid, bound as Harvester binds it (cluster-wide).
	wide bool
	// tokenSecret is the token Secret whose token is to be delivered.
	tokenSecret string
	// retiring, set on a re-issue, records the token Secret whose token stops, and when
	// (annotationGuestRetiring's value).
	retiring string
}

// planGuest reads what was delivered: what is to be issued or written again, or (ok false, res
// says when to look again) that the delivered credentials are as they should be, or that
// something is under way.
func (r *HarvesterClusterReconciler) planGuest(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], guests harvester.GuestCluster,
	delivered *corev1.Secret, clusterName string, endpoint harvester.GuestEndpoint, t *target.Target) (guestPlan, reconcile.Result, bool) {
	set := func(reason, format string, args ...any) {
		s.SetCondition(infrav1.ConditionGuestCredentialsReady, metav1.ConditionFalse, reason, fmt.Sprintf(format, args...))
	}
	owner, namespace := guestOwner(s.Obj), t.Credentials.Namespace
	names := harvester.GuestNamesFor(owner, namespace)
	if delivered == nil {
		return guestPlan{first: true, tokenSecret: names.TokenSecret}, reconcile.Result{}, true
	}
	recorded := delivered.Annotations[annotationGuestNamespace]
	if recorded != "" && recorded != namespace {
		// The ProviderConfig's namespace changed: the identity of the old one goes first (the
		// record of where it is is the delivered Secret, rewritten only after).
		if done, err := guests.DeleteGuest(ctx, owner, recorded); err != nil || !done {
			set(infrav1.ReasonGuestCredentialsPending,
				"deleting the credentials made in Harvester namespace %s before ProviderConfig %s moved to %s (%v)", recorded, t.Ref, namespace, err)
			return guestPlan{}, reconcile.Result{RequeueAfter: guestFailedRetry}, false
		}
		return guestPlan{first: true, tokenSecret: names.TokenSecret}, reconcile.Result{}, true
	}
	current := delivered.Annotations[annotationGuestTokenSecret]
	if current == "" {
		current = names.TokenSecret // delivered before re-issues alternated
	}
	retiringName, retireAt := parseRetiring(delivered.Annotations[annotationGuestRetiring])
	if retiringName != "" && !time.Now().Before(retireAt) {
		if err := r.retire(ctx, guests, owner, namespace, delivered, retiringName); err != nil {
			set(infrav1.ReasonGuestCredentialsFailed, "retire the token of Secret %s/%s on Harvester: %v", namespace, retiringName, err)
			return guestPlan{}, reconcile.Result{RequeueAfter: guestFailedRetry}, false
		}
		retiringName = ""
	}
	kubeconfig := deliveredKubeconfig(delivered)
	if delivered.Annotations[annotationGuestSource] != guests.GuestSource(namespace) || kubeconfig == nil {
		// Issued from other credentials: a new token, in the other token Secret; the one before
		// keeps working until it is retired, so that the new one reaches the tenant first.
		next := names.OtherTokenSecret(current)
		if retiringName == next {
			// Re-issued again before the one before that was retired: it goes now.
			if err := r.retire(ctx, guests, owner, namespace, delivered, next); err != nil {
				set(infrav1.ReasonGuestCredentialsFailed, "retire the token of Secret %s/%s on Harvester: %v", namespace, next, err)
				return guestPlan{}, reconcile.Result{RequeueAfter: guestFailedRetry}, false
			}
			return guestPlan{}, reconcile.Result{RequeueAfter: guestTokenRetiredRetry}, false
		}
		return guestPlan{tokenSecret: next, retiring: formatRetiring(current, time.Now().Add(r.guestTokenOverlap()))}, reconcile.Result{}, true
	}
	state, err := guests.CheckGuest(ctx, owner, namespace, current, kubeconfig, endpoint)
	if err != nil {
		set(infrav1.ReasonGuestCredentialsFailed, "check the credentials on Harvester: %v", err)
		return guestPlan{}, reconcile.Result{RequeueAfter: guestFailedRetry}, false
	}
	plan := guestPlan{tokenSecret: current, wide: state.TokenValid && !state.Narrow}
	if retiringName != "" {
		plan.retiring = delivered.Annotations[annotationGuestRetiring]
	}
	if state.TokenValid && state.Narrow && state.Endpoint == delivered.Annotations[annotationGuestEndpoint] {
		r.issued(s, clusterName, namespace, owner, t)
		res := r.isolation(ctx, s, guests, clusterName, namespace, false)
		if retiringName != "" {
			res.RequeueAfter = min(res.RequeueAfter, time.Until(retireAt)+time.Second)
		}
		return guestPlan{}, res, false
	}
	// A valid token is kept: what is not narrow is narrowed, and the kubeconfig is written again
	// for where tenants reach Harvester now. An invalid one (its Secret deleted on Harvester) is
	// made again in the same token Secret.
	return plan, reconcile.Result{}, true
}

// retire deletes a token Secret whose token a newer one replaced, then its record in the
// delivered Secret.
func (r *HarvesterClusterReconciler) retire(ctx context.Context, guests harvester.GuestCluster, owner harvester.Owner, namespace string, delivered *corev1.Secret, name string) error {
	if _, err := guests.RetireGuestToken(ctx, owner, namespace, name); err != nil {
		return err
	}
	delete(delivered.Annotations, annotationGuestRetiring)
	return r.Update(ctx, delivered)
}

// The record of a token being retired: "<token Secret name>,<RFC 3339 time it stops>".
func formatRetiring(name string, at time.Time) string {
	return name + "," + at.UTC().Format(time.RFC3339)
}

func parseRetiring(v string) (string, time.Time) {
	name, at, ok := strings.Cut(v, ",")
	if !ok {
		return "", time.Time{}
	}
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return name, time.Time{} // unreadable: retired at once
	}
	return name, t
}

// retiringNote says in the issue event when the token before stops.
func retiringNote(retiring string) string {
	name, at := parseRetiring(retiring)
	if name == "" {
		return ""
	}
	return fmt.Sprintf("; the token before (Secret %s) stops at %s", name, at.Format(time.RFC3339))
}

// tenantEndpoint reads where the operator says tenants reach Harvester, beside the ProviderConfig's
// credentials: annotation v1alpha1.AnnotationTenantServer on their Secret, and its key
// v1alpha1.TenantCAKey (none: Harvester's VIP). Only whoever writes the credentials says it.
func (r *HarvesterClusterReconciler) tenantEndpoint(ctx context.Context, t *target.Target) (endpoint harvester.GuestEndpoint, invalid string, err error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: t.Credentials.SecretNamespace, Name: t.Credentials.SecretName}
	if err := r.LiveReader.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return endpoint, "", nil // the connection to Harvester says so
		}
		return endpoint, "", fmt.Errorf("read credentials Secret %s: %w", key, err)
	}
	server := secret.Annotations[v1alpha1.AnnotationTenantServer]
	ca := secret.Data[v1alpha1.TenantCAKey]
	if server == "" {
		if len(ca) > 0 {
			return endpoint, fmt.Sprintf("credentials Secret %s has key %s but no annotation %s: annotate it with the server the CA is for, or remove the key",
				key, v1alpha1.TenantCAKey, v1alpha1.AnnotationTenantServer), nil
		}
		return endpoint, "", nil
	}
	if problem := tenantServerProblem(server); problem != "" {
		return endpoint, fmt.Sprintf("annotation %s of credentials Secret %s is %q, which %s: set it to the https URL tenant clusters reach Harvester's API server at (https://<host>[:port]), or remove it to give them Harvester's VIP",
			v1alpha1.AnnotationTenantServer, key, server, problem), nil
	}
	if len(ca) > 0 {
		if _, err := cert.ParseCertsPEM(ca); err != nil {
			return endpoint, fmt.Sprintf("key %s of credentials Secret %s is not a PEM certificate bundle (%v): put the CA of %s there, or remove the key to trust Harvester's cluster CA",
				v1alpha1.TenantCAKey, key, err, server), nil
		}
	}
	return harvester.GuestEndpoint{Server: server, CA: ca}, "", nil
}

// tenantServerProblem says what is wrong with a tenant server URL, "" if nothing: tenants talk
// TLS, to a host, with nothing but a scheme, host and port.
func tenantServerProblem(server string) string {
	u, err := url.Parse(server)
	switch {
	case err != nil:
		return "is not a URL"
	case u.Scheme != "https":
		return "is not https (tenants never talk to Harvester unencrypted)"
	case u.Hostname() == "":
		return "names no host"
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "":
		return "has more than a scheme, host and port"
	}
	return ""
}

// sharingAllowed reports whether the operator lets clusters share the ProviderConfig's Harvester
// namespace (v1alpha1.AnnotationSharedNamespace).
func sharingAllowed(pc *v1alpha1.ProviderConfig) bool {
	return pc != nil && pc.Annotations[v1alpha1.AnnotationSharedNamespace] == "true"
}

// isolation sets GuestCredentialsIsolated for delivered, narrow credentials: whether anything of
// others shares their namespace.
func (r *HarvesterClusterReconciler) isolation(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], guests harvester.GuestCluster, clusterName, namespace string, first bool) reconcile.Result {
	neighbours, err := r.neighbours(ctx, guests, s.Obj, clusterName, namespace, first)
	switch {
	case err != nil:
		// Said where it was, and looked at again soon.
		s.SetCondition(infrav1.ConditionGuestCredentialsIsolated, metav1.ConditionUnknown, infrav1.ReasonGuestCredentialsFailed, err.Error())
		return reconcile.Result{RequeueAfter: guestFailedRetry}
	case neighbours.Count > 0:
		s.SetCondition(infrav1.ConditionGuestCredentialsIsolated, metav1.ConditionFalse, infrav1.ReasonGuestNamespaceShared, fmt.Sprintf(
			"Harvester namespace %s holds objects that are not Cluster %s's: %s. The tenant cluster's credentials, bound there, reach them; recreate the cluster with a ProviderConfig whose harvester.namespace it has to itself",
			namespace, clusterName, neighbours))
	default:
		s.SetCondition(infrav1.ConditionGuestCredentialsIsolated, metav1.ConditionTrue, infrav1.ReasonGuestNamespaceExclusive, fmt.Sprintf(
			"the credentials are bound in Harvester namespace %s only (and to ClusterRole %s, read-only, cluster-wide), and nothing there is another's", namespace, harvester.GuestReaderRole))
	}
	return reconcile.Result{RequeueAfter: r.guestRecheck()}
}

// neighbours lists what in the Harvester namespace is not Cluster clusterName's: its
// HarvesterCluster's guest identity and its HarvesterMachines' VMs and disks are its own.
// Objects being deleted do not count.
func (r *HarvesterClusterReconciler) neighbours(ctx context.Context, guests harvester.GuestCluster, hc *infrav1.HarvesterCluster, clusterName, namespace string, unlabelledClaims bool) (harvester.Neighbours, error) {
	machines := &infrav1.HarvesterMachineList{}
	if err := r.List(ctx, machines, client.InNamespace(hc.Namespace), client.MatchingLabels{capiClusterNameLabel: clusterName}); err != nil {
		return harvester.Neighbours{}, fmt.Errorf("list the HarvesterMachines of Cluster %s: %w", clusterName, err)
	}
	mine := make(map[string]bool, len(machines.Items))
	for i := range machines.Items {
		mine[machines.Items[i].Name] = true
	}
	ours := func(o harvester.OwnerRef) bool {
		return o.Namespace == hc.Namespace && (o.Kind == OwnerKindHarvesterCluster && o.Name == hc.Name || o.Kind == OwnerKindHarvesterMachine && mine[o.Name])
	}
	n, err := guests.GuestNeighbours(ctx, namespace, ours, unlabelledClaims)
	if err != nil {
		return n, fmt.Errorf("look for others' objects in Harvester namespace %s: %w", namespace, err)
	}
	return n, nil
}

func (r *HarvesterClusterReconciler) guestTokenOverlap() time.Duration {
	if r.GuestTokenOverlap > 0 {
		return r.GuestTokenOverlap
	}
	return defaultGuestTokenOverlap
}

func (r *HarvesterClusterReconciler) guestRecheck() time.Duration {
	if r.GuestRecheckInterval > 0 {
		return r.GuestRecheckInterval
	}
	return defaultGuestRecheck
}

func (r *HarvesterClusterReconciler) issued(s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], clusterName, namespace string, owner harvester.Owner, t *target.Target) {
	s.SetCondition(infrav1.ConditionGuestCredentialsReady, metav1.ConditionTrue, infrav1.ReasonGuestCredentialsIssued, fmt.Sprintf(
		"Secret %s (a ClusterResourceSet's, for Secret %s/%s of the tenant cluster) holds the kubeconfig of ServiceAccount %s/%s on Harvester, issued with ProviderConfig %s's credentials",
		guestCloudConfigName(clusterName), tenantCloudConfigNamespace, tenantCloudConfigName, namespace, harvester.GuestNamesFor(owner, namespace).ServiceAccount, t.Ref))
}

// guestError says what EnsureGuest's error means in GuestCredentialsReady.
func (r *HarvesterClusterReconciler) guestError(s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], err error) reconcile.Result {
	reason, retry := infrav1.ReasonGuestCredentialsFailed, guestFailedRetry
	if w, ok := errkind.AsWaiting(err); ok {
		retry = w.RetryAfter
		switch w.Reason {
		case harvester.ReasonGuestTokenPending:
			reason = infrav1.ReasonGuestCredentialsPending
		case reasons.PermissionDenied, harvester.ReasonGuestReaderRoleMissing:
			reason = infrav1.ReasonGuestPermissionsMissing
		}
	}
	if p, ok := errkind.AsPermanent(err); ok {
		retry = guestBlockedRetry
		if p.Reason == harvester.ReasonNameTaken {
			reason = infrav1.ReasonGuestCredentialsNameConflict
		}
	}
	s.SetCondition(infrav1.ConditionGuestCredentialsReady, metav1.ConditionFalse, reason, err.Error())
	return reconcile.Result{RequeueAfter: retry}
}

// deliveredSecret reads the delivered Secret of the Cluster, nil if there is none. It is read
// live: the manager neither lists nor watches Secrets.
func (r *HarvesterClusterReconciler) deliveredSecret(ctx context.Context, namespace, clusterName string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	err := r.LiveReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: guestCloudConfigName(clusterName)}, secret)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return secret, err
}

// writeDelivered creates the delivered Secret or rewrites the one there is.
func (r *HarvesterClusterReconciler) writeDelivered(ctx context.Context, existing, want *corev1.Secret) error {
	if existing == nil {
		return r.Create(ctx, want)
	}
	existing.Labels, existing.Annotations, existing.Type, existing.Data = want.Labels, want.Annotations, want.Type, want.Data
	existing.OwnerReferences = want.OwnerReferences
	return r.Update(ctx, existing)
}

// deliveredBy reports whether the Secret is the HarvesterCluster's delivered Secret: controlled
// by it (or by a HarvesterCluster of its name, before clusterctl move rebuilt the reference).
func deliveredBy(s *corev1.Secret, hc *infrav1.HarvesterCluster) bool {
	return ownedBy(s, metav1.OwnerReference{Kind: "HarvesterCluster", Name: hc.Name})
}

// ownedBy reports whether obj has a controller reference of the same kind and name (another
// UID: the HarvesterCluster was moved here by clusterctl, which rebuilds owner references).
func ownedBy(obj metav1.Object, ref metav1.OwnerReference) bool {
	c := controllerOfOurs(obj, ref.Kind)
	return c != nil && c.Name == ref.Name
}

// controllerOfOurs is obj's controller reference if it names kind of this provider's API group,
// under any version of it; nil otherwise.
func controllerOfOurs(obj metav1.Object, kind string) *metav1.OwnerReference {
	c := metav1.GetControllerOf(obj)
	if c == nil || c.Kind != kind {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(c.APIVersion); err != nil || gv.Group != infrav1.GroupVersion.Group {
		return nil
	}
	return c
}

// revokeGuest deletes the identity a delivered Secret records on Harvester, then the Secret.
// done is false while that is under way (res says when to look again).
func (r *HarvesterClusterReconciler) revokeGuest(ctx context.Context, s *objstatus.Scope[*infrav1.HarvesterCluster, infrav1.HarvesterClusterStatus], delivered *corev1.Secret, t *target.Target) (reconcile.Result, bool) {
	if err := r.deleteGuestIdentity(ctx, s.Obj, []string{delivered.Annotations[annotationGuestNamespace]}, t); err != nil {
		s.SetCondition(infrav1.ConditionGuestCredentialsReady, metav1.ConditionFalse, infrav1.ReasonGuestCredentialsFailed, err.Error())
		return reconcile.Result{RequeueAfter: guestFailedRetry}, false
	}
	if err := r.Delete(ctx, delivered, client.Preconditions{UID: &delivered.UID}); client.IgnoreNotFound(err) != nil {
		s.SetCondition(infrav1.ConditionGuestCredentialsReady, metav1.ConditionFalse, infrav1.ReasonGuestCredentialsFailed,
			fmt.Sprintf("delete Secret %s/%s: %v", delivered.Namespace, delivered.Name, err))
		return reconcile.Result{RequeueAfter: guestFailedRetry}, false
	}
	return reconcile.Result{}, true
}

// deleteGuestIdentity deletes the HarvesterCluster's guest identity in each namespace on the
// Harvester cluster t reaches, and says what is in the way if it cannot.
func (r *HarvesterClusterReconciler) deleteGuestIdentity(ctx context.Context, hc *infrav1.HarvesterCluster, namespaces []string, t *target.Target) error {
	engine, err := r.Harvester.ClusterFor(ctx, t.Credentials)
	if err != nil {
		return fmt.Errorf("the tenant cluster's Harvester credentials cannot be deleted: Harvester cannot be reached with ProviderConfig %s's credentials: %w", t.Ref, err)
	}
	guests, ok := engine.(harvester.GuestCluster)
	if !ok {
		return nil
	}
	for _, ns := range namespaces {
		if ns == "" {
			continue
		}
		done, err := guests.DeleteGuest(ctx, guestOwner(hc), ns)
		if err != nil {
			return fmt.Errorf("delete the tenant cluster's Harvester credentials in namespace %s: %w", ns, err)
		}
		if !done {
			return fmt.Errorf("the tenant cluster's Harvester credentials in namespace %s are being deleted", ns)
		}
	}
	return nil
}

// guestDeleteStep deletes the tenant cluster's Harvester credentials before the HarvesterCluster
// goes, so that none outlives its cluster: the identity in the namespace the delivered Secret
// records and in the ProviderConfig's, then the delivered Secret. It waits (DeletionBlocked)
// while Harvester cannot be reached and something was delivered; with nothing delivered and the
// ProviderConfig gone, nothing was made that the provider could find.
func (r *HarvesterClusterReconciler) guestDeleteStep(ctx context.Context, hc *infrav1.HarvesterCluster, clusterName string) error {
	if r.Harvester == nil {
		return nil
	}
	var delivered *corev1.Secret
	if clusterName != "" {
		var err error
		if delivered, err = r.deliveredSecret(ctx, hc.Namespace, clusterName); err != nil {
			return err
		}
		if delivered != nil && !deliveredBy(delivered, hc) {
			delivered = nil // someone else's: never deleted
		}
	}
	namespace, name := hc.ProviderConfigKey()
	pc := &v1alpha1.ProviderConfig{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pc); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		pc = nil
	}
	t, err := target.ResolveProviderConfig(pc, namespace+"/"+name, "spec.providerConfigRef")
	if err != nil {
		if delivered == nil {
			return nil
		}
		return errkind.Waiting(infrav1.ReasonDeletionBlocked, capiWaitingRetry,
			"the tenant cluster's Harvester credentials (recorded in Secret %s) cannot be deleted: %v. %s", delivered.Name, err, releaseAdvice(hc))
	}
	switch other, err := r.ownedByAnother(ctx, hc, clusterName, t); {
	case err != nil && !isPermissionDenied(err):
		if delivered == nil && !hc.Spec.GuestCredentialsManagedByProvider() {
			return nil // nothing was made, and no Lease could be held without Harvester
		}
		return errkind.Waiting(infrav1.ReasonDeletionBlocked, guestFailedRetry, "whose the tenant cluster's objects on Harvester are cannot be read: %v. %s", err, releaseAdvice(hc))
	case other != "":
		// A copy of a cluster another management cluster runs: what is on Harvester is that
		// one's, and stays.
		ctrl.LoggerFrom(ctx).Info("Deleted nothing on Harvester: another management cluster runs the tenant cluster", "managementCluster", other)
		if delivered != nil {
			if err := r.Delete(ctx, delivered, client.Preconditions{UID: &delivered.UID}); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		return nil
	}
	namespaces := []string{t.Credentials.Namespace}
	if delivered != nil && delivered.Annotations[annotationGuestNamespace] != t.Credentials.Namespace {
		namespaces = append(namespaces, delivered.Annotations[annotationGuestNamespace])
	}
	if err := r.deleteGuestIdentity(ctx, hc, namespaces, t); err != nil {
		if w, ok := errkind.AsWaiting(err); delivered == nil && (!hc.Spec.GuestCredentialsManagedByProvider() || ok && w.Reason == reasons.PermissionDenied) {
			// Never delivered, and opted out or never allowed: nothing was made (a provider that
			// may not read them could not have made them).
			return nil
		}
		return errkind.Waiting(infrav1.ReasonDeletionBlocked, guestFailedRetry, "%v. %s", err, releaseAdvice(hc))
	}
	if err := r.dropOwnership(ctx, hc, clusterName, t); err != nil && !isPermissionDenied(err) {
		return errkind.Waiting(infrav1.ReasonDeletionBlocked, guestFailedRetry, "delete the tenant cluster's ownership Lease on Harvester: %v. %s", err, releaseAdvice(hc))
	}
	if delivered != nil {
		if err := r.Delete(ctx, delivered, client.Preconditions{UID: &delivered.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// isPermissionDenied reports whether Harvester refused the provider's credentials a request:
// what they may not do, they cannot have done either.
func isPermissionDenied(err error) bool {
	w, ok := errkind.AsWaiting(err)
	return ok && w.Reason == reasons.PermissionDenied
}

// releaseAdvice says how a user ends the deletion of a HarvesterCluster whose tenant credentials
// cannot be deleted on Harvester (its ProviderConfig or Harvester is gone for good).
func releaseAdvice(hc *infrav1.HarvesterCluster) string {
	return fmt.Sprintf("If they cannot be deleted any more, release the HarvesterCluster without deleting them: kubectl annotate harvestercluster -n %s %s %s=true "+
		"(the ServiceAccount, its bindings and token then stay on Harvester, labelled with this HarvesterCluster: delete them there)",
		hc.Namespace, hc.Name, infrav1.AnnotationSkipHarvesterCleanup)
}

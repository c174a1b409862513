package sim

import (
	"context"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// tokenReconciler plays kube-controller-manager's token controller (kubernetes
// pkg/controller/serviceaccount/tokens_controller.go, syncSecret), which no kube-controller-manager
// runs here to do: a Secret of type kubernetes.io/service-account-token gets data token, ca.crt and
// namespace; one whose ServiceAccount does not exist, or has another UID than the Secret's
// kubernetes.io/service-account.uid annotation, is deleted.
//
// The real controller signs a legacy token, which the API server accepts while the Secret and the
// ServiceAccount exist. The simulator cannot sign with the API server's key, so it asks the API
// server for a token bound to the Secret (TokenRequest with boundObjectRef Secret), which the API
// server likewise accepts only while that Secret (same UID) and the ServiceAccount exist: deleting
// either revokes it, as on Harvester.
type tokenReconciler struct {
	sim *Simulator
	// ca is the API server's CA, what the real controller writes from its --root-ca-file.
	ca []byte
}

// tokenLifetime is asked of the API server: a legacy token does not expire.
const tokenLifetime = 10 * 365 * 24 * 3600

func (r *tokenReconciler) setup(mgr ctrl.Manager) error {
	isToken := func(o client.Object) bool {
		s, ok := o.(*corev1.Secret)
		return ok && s.Type == corev1.SecretTypeServiceAccountToken
	}
	return ctrl.NewControllerManagedBy(mgr).Named("sim-tokens").For(&corev1.Secret{}, builder.WithPredicates(predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return isToken(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return isToken(e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	})).Complete(r)
}

func (r *tokenReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := r.sim.c
	secret := &corev1.Secret{}
	if err := r.sim.live.Get(ctx, req.NamespacedName, secret); err != nil || secret.DeletionTimestamp != nil ||
		secret.Type != corev1.SecretTypeServiceAccountToken || len(secret.Data[corev1.ServiceAccountTokenKey]) > 0 {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	sa := &corev1.ServiceAccount{}
	err := r.sim.live.Get(ctx, client.ObjectKey{Namespace: secret.Namespace, Name: secret.Annotations[corev1.ServiceAccountNameKey]}, sa)
	if apierrors.IsNotFound(err) || err == nil && secret.Annotations[corev1.ServiceAccountUIDKey] != "" && secret.Annotations[corev1.ServiceAccountUIDKey] != string(sa.UID) {
		return ctrl.Result{}, client.IgnoreNotFound(c.Delete(ctx, secret, client.Preconditions{UID: &secret.UID}))
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](tokenLifetime),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: secret.Name, UID: secret.UID},
	}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	secret.Data[corev1.ServiceAccountTokenKey] = []byte(tr.Status.Token)
	secret.Data[corev1.ServiceAccountRootCAKey] = r.ca
	secret.Data[corev1.ServiceAccountNamespaceKey] = []byte(secret.Namespace)
	if secret.Annotations[corev1.ServiceAccountUIDKey] == "" {
		secret.Annotations[corev1.ServiceAccountUIDKey] = string(sa.UID)
	}
	return ctrl.Result{}, client.IgnoreNotFound(c.Update(ctx, secret))
}

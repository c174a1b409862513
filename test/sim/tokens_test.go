package sim

import (
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestTokenSecretFilledAndRevokedAsKubeControllerManager: a kubernetes.io/service-account-token
// Secret gets token, ca.crt and namespace (kube-controller-manager's tokens_controller.go); the
// token authenticates as the ServiceAccount while the Secret exists, and not once it is deleted.
// A Secret naming a ServiceAccount of another UID is deleted.
func TestTokenSecretFilledAndRevokedAsKubeControllerManager(t *testing.T) {
	f := newFixture(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "guest"}}
	f.must(h.Client.Create(f.ctx, sa))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "guest-token",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "guest", corev1.ServiceAccountUIDKey: string(sa.UID)}},
		Type: corev1.SecretTypeServiceAccountToken}
	f.must(h.Client.Create(f.ctx, secret))
	deadline := time.Now().Add(10 * time.Second)
	for len(secret.Data[corev1.ServiceAccountTokenKey]) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("token Secret not filled in: %v", secret.Data)
		}
		time.Sleep(100 * time.Millisecond)
		f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(secret), secret))
	}
	if string(secret.Data[corev1.ServiceAccountNamespaceKey]) != f.ns || len(secret.Data[corev1.ServiceAccountRootCAKey]) == 0 {
		t.Fatalf("namespace %q, ca.crt %d bytes", secret.Data[corev1.ServiceAccountNamespaceKey], len(secret.Data[corev1.ServiceAccountRootCAKey]))
	}
	cfg := &rest.Config{Host: h.Config.Host, BearerToken: string(secret.Data[corev1.ServiceAccountTokenKey]),
		TLSClientConfig: rest.TLSClientConfig{CAData: secret.Data[corev1.ServiceAccountRootCAKey]}}
	c, err := client.New(cfg, client.Options{})
	f.must(err)
	review := &authenticationv1.SelfSubjectReview{}
	f.must(c.Create(f.ctx, review))
	if want := "system:serviceaccount:" + f.ns + ":guest"; review.Status.UserInfo.Username != want {
		t.Fatalf("the token authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}
	f.must(h.Client.Delete(f.ctx, secret))
	deadline = time.Now().Add(10 * time.Second)
	for {
		err := c.Create(f.ctx, &authenticationv1.SelfSubjectReview{})
		if apierrors.IsUnauthorized(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the token of a deleted Secret still authenticates: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	stale := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "stale-token",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "guest", corev1.ServiceAccountUIDKey: "another-uid"}},
		Type: corev1.SecretTypeServiceAccountToken}
	f.must(h.Client.Create(f.ctx, stale))
	deadline = time.Now().Add(10 * time.Second)
	for !apierrors.IsNotFound(h.Client.Get(f.ctx, client.ObjectKeyFromObject(stale), stale)) {
		if time.Now().After(deadline) {
			t.Fatal("a token Secret of another ServiceAccount UID was not deleted")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

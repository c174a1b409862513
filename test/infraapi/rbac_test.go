package infraapi

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
)

// The ClusterRole of config/capi gives Cluster API's manager the full read/write access the
// contract asks for, on every kind of the package, and carries the label that Cluster API's
// manager role aggregates. Checked by the API server's authorizer, with the role bound to the
// identity of Cluster API's manager (aggregation itself is kube-controller-manager's job, which
// does not run here).
func TestCAPIManagerMayManageEveryKind(t *testing.T) {
	ctx := context.Background()
	var role *rbacv1.ClusterRole
	for _, obj := range installed {
		if obj.GetKind() == "ClusterRole" && obj.GetLabels()["cluster.x-k8s.io/aggregate-to-manager"] == "true" {
			role = &rbacv1.ClusterRole{}
			if err := k8s.Get(ctx, clientKey(obj.GetName()), role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if role == nil {
		t.Fatal("config/capi has no ClusterRole labelled cluster.x-k8s.io/aggregate-to-manager: \"true\"")
	}
	const capiManager = "system:serviceaccount:capi-system:capi-manager"
	if err := k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "capi-manager-infraapi-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: capiManager}},
	}); err != nil {
		t.Fatal(err)
	}
	allowed := func(resource, subresource, verb string) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: capiManager,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: "tenant-a", Group: infrav1.GroupVersion.Group, Version: "v1alpha1",
				Resource: resource, Subresource: subresource, Verb: verb,
			},
		}}
		if err := k8s.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	// The API server's authorizer learns of a new binding asynchronously: wait until it has
	// (the first grant answers), then check every grant.
	for deadline := time.Now().Add(10 * time.Second); !allowed(strings.ToLower(kinds[0])+"s", "", "get") && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	for _, kind := range kinds {
		resource := strings.ToLower(kind) + "s"
		for _, verb := range []string{"create", "delete", "get", "list", "patch", "update", "watch"} {
			if !allowed(resource, "", verb) {
				t.Errorf("Cluster API's manager may not %s %s", verb, resource)
			}
		}
		if !strings.HasSuffix(kind, "Template") && !allowed(resource, "status", "get") {
			t.Errorf("Cluster API's manager may not read %s/status", resource)
		}
	}
	// Nothing beyond the group.
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               capiManager,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "tenant-a", Resource: "secrets", Verb: "get"},
	}}
	if err := k8s.Create(ctx, sar); err != nil {
		t.Fatal(err)
	}
	if sar.Status.Allowed {
		t.Error("the role grants Secrets")
	}
}

package management

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
)

// ServedKind is a kind and its resource.
type ServedKind struct{ Kind, Resource string }

// KindsUnavailable says why the manager cannot serve the kinds of gv: a CRD missing (the first, in
// the order given), or list or watch not granted; "" if it can.
func KindsUnavailable(ctx context.Context, mgr ctrl.Manager, gv schema.GroupVersion, kinds []ServedKind) string {
	for _, k := range kinds {
		gk := gv.WithKind(k.Kind).GroupKind()
		if _, err := mgr.GetRESTMapper().RESTMapping(gk, gv.Version); err != nil {
			return fmt.Sprintf("the cluster has no %s CRD (%s)", k.Kind, gk)
		}
	}
	var missing []string
	for _, k := range kinds {
		resource := k.Resource
		for _, verb := range []string{"list", "watch"} {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: gv.Group, Resource: resource},
			}}
			if err := mgr.GetClient().Create(ctx, review); err != nil {
				return "cannot check its permissions: " + err.Error()
			}
			if !review.Status.Allowed {
				missing = append(missing, verb+" "+resource)
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return "the manager may not " + strings.Join(missing, ", ") + " (grant them in its ClusterRole)"
	}
	return ""
}

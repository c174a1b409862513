package target

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// LabelTeam is the label Butler puts on a team's namespaces: the Team's own, named after it, and
// the tenant namespaces it makes for the team's clusters (butler-controller's team controller).
// Namespaces are the platform's to label: a tenant who writes in its namespace cannot relabel it.
const LabelTeam = "butler.butlerlabs.dev/team"

// Consumer is the namespace of an object that would use a ProviderConfig, and the team it belongs
// to (LabelTeam; "" when it has none, or when it decides nothing and was not read).
type Consumer struct {
	Namespace, Team string
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// ConsumerOf says who namespace is to pc. Its team is read (live, one namespace) only where it
// decides: pc is a team's and in another namespace.
func ConsumerOf(ctx context.Context, reader client.Reader, pc *v1alpha1.ProviderConfig, namespace string) (Consumer, error) {
	c := Consumer{Namespace: namespace}
	if pc == nil || pc.Namespace == namespace || teamOf(pc) == "" {
		return c, nil
	}
	ns := &corev1.Namespace{}
	if err := reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return c, fmt.Errorf("read namespace %s for the team of ProviderConfig %s/%s: %w", namespace, pc.Namespace, pc.Name, err)
	}
	c.Team = ns.Labels[LabelTeam]
	return c, nil
}

// teamOf is the team a team-scoped ProviderConfig is for ("" for any other).
func teamOf(pc *v1alpha1.ProviderConfig) string {
	if s := pc.Spec.Scope; s != nil && s.Type == v1alpha1.ProviderConfigScopeTeam && s.TeamRef != nil {
		return s.TeamRef.Name
	}
	return ""
}

// SharedWith enforces who may use a ProviderConfig, as Butler scopes it (spec.scope): objects
// (kinds) of its own namespace; of any namespace when its scope is "platform"; and, when it is a
// team's ("team", teamRef), of that team's namespaces (labelled LabelTeam with the team's name).
// An object in another namespace could otherwise use credentials its author cannot read. The
// policy gates creation only: machines that exist are still observed and deleted.
func SharedWith(pc *v1alpha1.ProviderConfig, c Consumer, kinds, refField string) error {
	if pc.Namespace == c.Namespace || pc.Spec.Scope != nil && pc.Spec.Scope.Type == v1alpha1.ProviderConfigScopePlatform {
		return nil
	}
	if team := teamOf(pc); team != "" {
		if c.Team == team {
			return nil
		}
		return errkind.Waiting(v1alpha1.ReasonProviderConfigNotShared, requeue.ProviderConfigRetry,
			"ProviderConfig %s/%s (%s) is team %s's, and namespace %s is not one of the team's (label %s=%s on the namespace, which the platform sets): use a ProviderConfig of this namespace's team or one in namespace %s",
			pc.Namespace, pc.Name, refField, team, c.Namespace, LabelTeam, team, c.Namespace)
	}
	return errkind.Waiting(v1alpha1.ReasonProviderConfigNotShared, requeue.ProviderConfigRetry,
		"ProviderConfig %s/%s (%s) is in another namespace and not shared: set its spec.scope.type to \"platform\" to let %s of other namespaces use it (or \"team\" with a teamRef, for a team's namespaces), or use a ProviderConfig in namespace %s",
		pc.Namespace, pc.Name, refField, kinds, c.Namespace)
}

package target

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// Who may use a ProviderConfig, as Butler scopes it: its own namespace; any, for a platform's; a
// team's namespaces (labelled by the platform), for a team's.
func TestSharedWith(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	ns := func(name, team string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if team != "" {
			n.Labels = map[string]string{LabelTeam: team}
		}
		return n
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ns("acme", "acme"), ns("acme-prod-tenant", "acme"), ns("globex", "globex"), ns("loose", "")).Build()
	pc := func(scope *v1alpha1.ProviderConfigScope) *v1alpha1.ProviderConfig {
		return &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "butler-system", Name: "harvester"}, Spec: v1alpha1.ProviderConfigSpec{Scope: scope}}
	}
	team := func(name string) *v1alpha1.ProviderConfigScope {
		return &v1alpha1.ProviderConfigScope{Type: v1alpha1.ProviderConfigScopeTeam, TeamRef: &v1alpha1.LocalObjectReference{Name: name}}
	}
	for name, tc := range map[string]struct {
		pc        *v1alpha1.ProviderConfig
		namespace string
		shared    bool
		says      string
	}{
		"its own namespace":                        {pc(nil), "butler-system", true, ""},
		"another namespace, no scope":              {pc(nil), "acme", false, `set its spec.scope.type to "platform"`},
		"a platform's, any namespace":              {pc(&v1alpha1.ProviderConfigScope{Type: v1alpha1.ProviderConfigScopePlatform}), "loose", true, ""},
		"a team's, the team's namespace":           {pc(team("acme")), "acme", true, ""},
		"a team's, a tenant namespace of the team": {pc(team("acme")), "acme-prod-tenant", true, ""},
		"a team's, another team's namespace":       {pc(team("acme")), "globex", false, "is team acme's, and namespace globex is not one of the team's (label " + LabelTeam + "=acme"},
		"a team's, a namespace of no team":         {pc(team("acme")), "loose", false, "namespace loose is not one of the team's"},
		"a team scope without a teamRef":           {pc(&v1alpha1.ProviderConfigScope{Type: v1alpha1.ProviderConfigScopeTeam}), "acme", false, "not shared"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := ConsumerOf(ctx, reader, tc.pc, tc.namespace)
			if err != nil {
				t.Fatal(err)
			}
			err = SharedWith(tc.pc, c, "HarvesterClusters", "spec.providerConfigRef")
			if tc.shared {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			w, ok := errkind.AsWaiting(err)
			if !ok || w.Reason != v1alpha1.ReasonProviderConfigNotShared || !strings.Contains(w.Message, tc.says) || !strings.Contains(w.Message, "butler-system/harvester") {
				t.Fatalf("error %v, want %s saying %q", err, v1alpha1.ReasonProviderConfigNotShared, tc.says)
			}
		})
	}
	// The namespace is read only where it decides.
	if c, err := ConsumerOf(ctx, nil, pc(&v1alpha1.ProviderConfigScope{Type: v1alpha1.ProviderConfigScopePlatform}), "missing"); err != nil || c.Team != "" {
		t.Fatalf("a platform's ProviderConfig read the namespace: %+v %v", c, err)
	}
}

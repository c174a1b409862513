package capi

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// guestAccessDoc is the table TestGuestAccessPerHarvesterVersion answers, for people.
const guestAccessDoc = "docs/reference/guest-access.md"

// TestGuestAccessPerHarvesterVersion binds a guest identity as the provider binds it, and another
// as Harvester's own kubeconfig generator binds it (pkg/api/kubeconfig/generate_handler.go: the
// cloud provider's role in the namespace, the CSI driver's cluster-wide), on Harvester's guest
// roles of each release from v1.4 to v1.8 and the simulator's, and asks the API server
// (SubjectAccessReviews) about every row of guestAccessTable for both. In the VMs' namespace the
// provider's binding allows exactly what Harvester's does; outside it, the reads GuestReaderRole
// grants; nothing that is left out, nothing of a neighbour's. docs/reference/guest-access.md is
// the table of both answers per version; UPDATE_GOLDEN=1 rewrites it.
func TestGuestAccessPerHarvesterVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hv := startSimulatedHarvester(ctx, t)
	c := hv.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	owner := harvester.Owner{Kind: "HarvesterCluster", Namespace: "tenants", Name: "tenant", UID: "uid-1"}
	for _, obj := range []client.Object{
		harvester.BuildGuestServiceAccount(owner, "vms"), harvester.BuildGuestRoleBinding(owner, "vms"),
		harvester.BuildGuestCSIRoleBinding(owner, "vms"), harvester.BuildGuestClusterRoleBinding(owner, "vms"),
	} {
		must(c.Create(ctx, obj))
	}
	ours := harvester.GuestNamesFor(owner, "vms").ServiceAccount
	const theirs = "harvester-generated"
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "vms", Name: theirs}}
	must(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: theirs}}))
	must(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: theirs}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: harvester.GuestCloudProviderRole}}))
	must(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "vms-" + theirs}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: harvester.GuestCSIDriverRole}}))

	versions, err := sim.HarvesterGuestRoleVersions()
	must(err)
	if len(versions) < 6 {
		t.Fatalf("%d versions of Harvester's guest roles, want v1.4 to v1.8 and the simulator's", len(versions))
	}
	table := guestAccessTable()
	answers := make([][2][]bool, len(versions)) // per version: ours, Harvester's binding's
	for i, v := range versions {
		roles := map[string][]rbacv1.PolicyRule{}
		for _, u := range v.Roles {
			role := &rbacv1.ClusterRole{}
			must(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, role))
			roles[role.Name] = role.Rules
			live := &rbacv1.ClusterRole{}
			must(c.Get(ctx, client.ObjectKey{Name: role.Name}, live))
			live.Rules = role.Rules
			must(c.Update(ctx, live))
		}
		if len(roles[harvester.GuestCloudProviderRole]) == 0 || len(roles[harvester.GuestCSIDriverRole]) == 0 {
			t.Fatalf("Harvester %s: no rules for %s or %s", v.Version, harvester.GuestCloudProviderRole, harvester.GuestCSIDriverRole)
		}
		// Harvester's binding as its rules say; the authorizer sees an update within moments.
		want := make([]bool, len(table))
		for j, a := range table {
			want[j] = a.namespace == "vms" && rulesAllow(roles[harvester.GuestCloudProviderRole], a) ||
				rulesAllow(roles[harvester.GuestCSIDriverRole], a) || a.resource == "settings" && a.name == "server-version" && a.verb == "get"
		}
		var got []bool
		inForce, cancel := context.WithTimeout(ctx, 20*time.Second)
		waitFor(inForce, t, &testbed.ClusterAPI{}, "Harvester "+v.Version+"'s roles in force", func() error {
			got = reviewAll(ctx, t, c, theirs, table)
			if !slices.Equal(got, want) {
				return fmt.Errorf("Harvester's own binding's answers differ from its rules")
			}
			return nil
		})
		cancel()
		answers[i][1] = got
		answers[i][0] = reviewAll(ctx, t, c, ours, table)
		for j, a := range table {
			var want bool
			switch a.class {
			case inNamespace:
				want = answers[i][1][j]
			case readOutside:
				want = true
			}
			if answers[i][0][j] != want {
				t.Errorf("Harvester %s: %s (%s): allowed %v to the provider's binding, want %v", v.Version, a, a.source, answers[i][0][j], want)
			}
		}
	}

	doc := guestAccessMarkdown(versions, table, answers)
	path := filepath.Join(repoRoot(), guestAccessDoc)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		must(os.WriteFile(path, doc, 0o600))
		return
	}
	if have, err := os.ReadFile(path); err != nil || !bytes.Equal(have, doc) {
		t.Errorf("%s is not the table this test answers (%v): run UPDATE_GOLDEN=1 go test ./test/capi -run TestGuestAccessPerHarvesterVersion", guestAccessDoc, err)
	}
}

// reviewAll asks, for ServiceAccount vms/name, about every row.
func reviewAll(ctx context.Context, t *testing.T, c client.Client, name string, table []access) []bool {
	t.Helper()
	out := make([]bool, len(table))
	for i, a := range table {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   "system:serviceaccount:vms:" + name,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:vms", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name},
		}}
		if err := c.Create(ctx, review); err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		out[i] = review.Status.Allowed
	}
	return out
}

// rulesAllow evaluates RBAC rules for a request as the API server's authorizer does (with "*").
func rulesAllow(rules []rbacv1.PolicyRule, a access) bool {
	resource := a.resource
	if a.subresource != "" {
		resource += "/" + a.subresource
	}
	has := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, r := range rules {
		if has(r.APIGroups, a.group) && has(r.Resources, resource) && has(r.Verbs, a.verb) &&
			(len(r.ResourceNames) == 0 || a.name != "" && slices.Contains(r.ResourceNames, a.name)) {
			return true
		}
	}
	return false
}

// guestAccessMarkdown is docs/reference/guest-access.md.
func guestAccessMarkdown(versions []sim.GuestRoles, table []access, answers [][2][]bool) []byte {
	var b strings.Builder
	b.WriteString(`# What a tenant cluster's Harvester credentials may do

Generated by TestGuestAccessPerHarvesterVersion (test/capi/guest_access_test.go) from Harvester's
own guest roles of each release (test/sim/manifests/rbac-versions, copied from each release's
chart) and the API server's answers (SubjectAccessReviews); do not edit. Each cell says whether
the request is allowed to the credentials the provider makes, then to credentials bound as
Harvester's own kubeconfig generator binds them: **yes / yes**. The namespace "vms" is the
cluster's Harvester namespace (its ProviderConfig's harvester.namespace), "neighbour" any other.
docs/harvester-rbac.md explains the rows.

| Request | Why | `)
	for i, v := range versions {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(v.Version)
	}
	b.WriteString(" |\n|---|---|")
	for range versions {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	for j, a := range table {
		fmt.Fprintf(&b, "| `%s` | %s |", a, a.source)
		for i := range versions {
			fmt.Fprintf(&b, " %s / %s |", yes(answers[i][0][j]), yes(answers[i][1][j]))
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

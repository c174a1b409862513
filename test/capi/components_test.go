package capi

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// TestClusterAPIComponentsInstalledWithLeastPrivilege installs this provider as clusterctl does:
// infrastructure-components.yaml of a local clusterctl repository, processed by the real
// clusterctl (`clusterctl generate provider`: variables, target namespace, labels), applied
// server-side to a real API server that serves Cluster API core's CRDs, next to Cluster API core's
// own RBAC as its release installs it. The manager runs as a process with the components'
// Deployment args, acting as the components' ServiceAccount (impersonated), so their RBAC is all
// it has; on Harvester it acts as a user bound only by config/harvester/rbac.yaml. The real
// Cluster API core manager acts as its ServiceAccount, which reaches this provider's kinds only
// through the components' aggregated ClusterRole. A Cluster with a HarvesterCluster (sharing a
// platform ProviderConfig of the install namespace) and a Machine with a HarvesterMachine go
// through to a VM running on Harvester, and deleting the Cluster leaves Harvester empty; neither
// manager is refused anything on the way. The components' roles grant no wildcard and no more
// than the generated rules, and Secrets only one at a time (never list or watch), as config/default does.
func TestClusterAPIComponentsInstalledWithLeastPrivilege(t *testing.T) {
	assets := requireAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	_, config := clusterctlRepository(ctx, t)
	generated := runClusterctl(ctx, t, assets, config, nil, "generate", "provider", "--infrastructure", providerName+":"+providerVersion)
	components, err := testbed.DecodeManifests(generated)
	if err != nil {
		t.Fatalf("clusterctl generate provider printed what does not parse: %v", err)
	}
	d, err := testbed.ManagerDeployment(components)
	if err != nil {
		t.Fatal(err)
	}
	if d.Namespace != testbed.Namespace {
		t.Fatalf("clusterctl installs the manager in namespace %q, want %s (the Namespace of the components)", d.Namespace, testbed.Namespace)
	}
	serviceAccount := d.Spec.Template.Spec.ServiceAccountName
	requireLeastPrivilegeRoles(t, components, serviceAccount)
	_, args, err := testbed.ManagerArgs(d)
	if err != nil {
		t.Fatal(err)
	}
	// Out of a cluster the manager cannot find its namespace.
	args = append(args, "--leader-election-namespace="+d.Namespace)
	var probeAddr string
	freeManagerPorts := func() ([]string, error) { // chosen right before the manager starts
		addrs, err := testbed.FreeLocalAddrs(2)
		if err != nil {
			return nil, err
		}
		metricsAddr := addrs[0]
		probeAddr = addrs[1]
		return []string{"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=" + probeAddr}, nil
	}

	coreRBAC, err := testbed.DecodeManifests(kustomizeBuild(ctx, t, testbed.ClusterAPICoreRBAC(assets)))
	if err != nil {
		t.Fatal(err)
	}
	capiUser := clusterAPIServiceAccount(t, coreRBAC)
	managerUser := testbed.ServiceAccountUser(d.Namespace, serviceAccount)
	tb, harvesterToken, err := testbed.StartInstalled(ctx, testbed.Options{
		RepoRoot: repoRoot(), WorkDir: t.TempDir(), ManagerArgs: args, ManagerArgsLate: freeManagerPorts,
		CRDDirectories: []string{testbed.ClusterAPICRDs(assets)},
		Sim:            sim.Config{BootDelay: 200 * time.Millisecond, IPDelay: 100 * time.Millisecond, CloneDelay: 300 * time.Millisecond},
		BeforeManager: func(ctx context.Context, tb *testbed.Testbed) error {
			if err := installClusterAPIRBAC(ctx, tb, coreRBAC, capiUser); err != nil {
				return err
			}
			// As clusterctl init applies them, before the manager's Pod starts.
			if err := tb.Apply(ctx, components); err != nil {
				return err
			}
			if err := waitEstablished(ctx, tb.Mgmt, components); err != nil {
				return err
			}
			if err := aggregateClusterRoles(ctx, tb.Mgmt); err != nil {
				return err
			}
			// The authorizer learns of new bindings asynchronously; the manager decides at start
			// whether it may run its Cluster API controllers.
			return waitAllowed(ctx, tb.Mgmt, map[*rest.ImpersonationConfig]string{
				managerUser: "list harvestermachines", capiUser: "update harvestermachines",
			})
		},
	}, serviceAccount)
	t.Cleanup(tb.Stop)
	if err != nil {
		t.Fatal(err)
	}
	capiConfig := rest.CopyConfig(tb.MgmtConfig)
	capiConfig.Impersonate = *capiUser
	capi := startCoreManager(ctx, t, testbed.ClusterAPIOptions{Assets: assets, Config: capiConfig, Admin: tb.MgmtConfig, WorkDir: t.TempDir()},
		func() string { return "the provider's " + tb.ManagerLogTail() })
	wait := func(what string, check func() error) {
		t.Helper()
		waitFor(ctx, t, capi, what, func() error {
			if err := tb.ManagerExited(); err != nil {
				t.Fatal(err)
			}
			return check()
		})
	}
	wait("the manager to be ready (its caches synced with the components' RBAC)", func() error {
		if code := testbed.Probe(probeAddr, "/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz answered %d", code)
		}
		return nil
	})

	pc := platformProviderConfig(ctx, t, tb)
	if err := tb.Mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	cluster, err := createTenantCluster(ctx, tb.Mgmt, infrav1.ProviderConfigReference{Name: pc.Name, Namespace: pc.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	machine, err := createMachine(ctx, tb.Mgmt, "tenant-md-0", "")
	if err != nil {
		t.Fatal(err)
	}
	wait("Cluster API to see the Harvester infrastructure provisioned", func() error {
		return infrastructureProvisioned(ctx, tb.Mgmt, cluster)
	})
	var vm kubevirtv1.VirtualMachine
	wait("the Machine to carry the VM's providerID and addresses", func() error {
		if err := machineOnHarvester(ctx, tb.Mgmt, tb.Harvester.Client, testbed.HarvesterNamespace, machine, &vm, &infrav1.HarvesterMachine{}); err != nil {
			return err
		}
		if vm.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusRunning {
			return fmt.Errorf("VM %s is %s, want Running", vm.Name, vm.Status.PrintableStatus)
		}
		return nil
	})
	t.Logf("VM %s/%s Running on Harvester, Machine %s provisioned", vm.Namespace, vm.Name, machine.GetName())

	if err := tb.Mgmt.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	wait("the Cluster and everything on Harvester to go", func() error {
		if err := clusterGone(ctx, tb.Mgmt, cluster); err != nil {
			return err
		}
		vms, vmis, pvcs, secrets, err := tb.HarvesterLeft(ctx)
		if err != nil {
			return err
		}
		if vms+vmis+pvcs+secrets > 0 {
			return fmt.Errorf("%d VMs, %d VMIs, %d disks and %d Secrets left on Harvester", vms, vmis, pvcs, secrets)
		}
		return nil
	})

	log, err := tb.ManagerLog()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log, harvesterToken) {
		t.Error("the Harvester user's token appears in the manager's log")
	}
	for who, text := range map[string]string{"the manager": log, "Cluster API's manager": capi.Log()} {
		if refused := linesWith(text, "forbidden"); refused != "" {
			t.Errorf("%s was refused something with the installed RBAC:\n%s", who, refused)
		}
	}
}

// secretVerbs are what the manager may do with Secrets: read them one at a time (credentials and
// bootstrap data), and write the tenant clusters' delivered cloud-configs; never list or watch.
var secretVerbs = []string{"get", "create", "update", "delete"}

// requireLeastPrivilegeRoles checks the Roles and ClusterRoles of the components: no wildcard and
// no verb that hands out permissions (escalate, bind, impersonate); the ClusterRole bound to the
// manager's ServiceAccount has exactly controller-gen's rules (config/rbac/role.yaml: what the
// code's markers ask for); Secrets are granted to the manager only, and never list or watch
// (credentials and bootstrap data are read one at a time, delivered cloud-configs written by
// name), as config/default grants them;
// Cluster API core's kinds are read-only to the manager; the ClusterRole for Cluster API's
// manager (labelled cluster.x-k8s.io/aggregate-to-manager) covers this provider's group only.
func requireLeastPrivilegeRoles(t *testing.T, objs []*unstructured.Unstructured, serviceAccount string) {
	t.Helper()
	generated, err := testbed.GeneratedManagerRules(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	managerRole := ""
	for _, obj := range objs {
		if obj.GetKind() != "ClusterRoleBinding" {
			continue
		}
		binding := &rbacv1.ClusterRoleBinding{}
		convert(t, obj, binding)
		if slices.Contains(binding.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: testbed.Namespace}) {
			managerRole = binding.RoleRef.Name
		}
	}
	roles := 0
	for _, obj := range objs {
		if obj.GetKind() != "ClusterRole" && obj.GetKind() != "Role" {
			continue
		}
		roles++
		role := &rbacv1.ClusterRole{} // a Role's fields are a subset
		convert(t, obj, role)
		name := obj.GetKind() + " " + obj.GetName()
		aggregated := obj.GetLabels()["cluster.x-k8s.io/aggregate-to-manager"] == "true"
		if name == "ClusterRole "+managerRole && !reflect.DeepEqual(role.Rules, generated) {
			t.Errorf("%s (the manager's) grants other rules than config/rbac/role.yaml:\n got %+v\nwant %+v", name, role.Rules, generated)
		}
		for _, r := range role.Rules {
			requireNarrowRule(t, name, r)
			switch {
			case testbed.GrantsSecrets(r) && (name != "ClusterRole "+managerRole || slices.ContainsFunc(r.Verbs, func(v string) bool { return !slices.Contains(secretVerbs, v) })):
				t.Errorf("%s grants %v on Secrets; only the manager may, and only %v", name, r.Verbs, secretVerbs)
			case slices.Contains(r.APIGroups, "cluster.x-k8s.io") && slices.ContainsFunc(r.Verbs, func(v string) bool { return !slices.Contains([]string{"get", "list", "watch"}, v) }):
				t.Errorf("%s may %v Cluster API core's %v: the provider only reads them", name, r.Verbs, r.Resources)
			case aggregated && !slices.Equal(r.APIGroups, []string{infrav1.GroupVersion.Group}):
				t.Errorf("%s, aggregated into Cluster API's manager role, grants on groups %v: only %s is the provider's to give", name, r.APIGroups, infrav1.GroupVersion.Group)
			}
		}
	}
	if managerRole == "" || roles == 0 {
		t.Fatalf("the components bind no ClusterRole to ServiceAccount %s/%s (%d roles)", testbed.Namespace, serviceAccount, roles)
	}
}

// requireNarrowRule checks that a rule names what it grants: no wildcard, and no verb that lets
// the holder grant itself more.
func requireNarrowRule(t *testing.T, role string, r rbacv1.PolicyRule) {
	t.Helper()
	for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames, r.NonResourceURLs} {
		if slices.ContainsFunc(list, func(s string) bool { return strings.Contains(s, "*") }) {
			t.Errorf("%s has a wildcard: %+v", role, r)
		}
	}
	for _, verb := range []string{"escalate", "bind", "impersonate"} {
		if slices.Contains(r.Verbs, verb) {
			t.Errorf("%s grants %s: %+v", role, verb, r)
		}
	}
}

// installClusterAPIRBAC applies Cluster API core's RBAC (its namespace first), aggregates it, and
// shows that it does not cover this provider's kinds on its own: once the authorizer lets Cluster
// API's ServiceAccount list Machines, it must still not get HarvesterMachines.
func installClusterAPIRBAC(ctx context.Context, tb *testbed.Testbed, coreRBAC []*unstructured.Unstructured, capiUser *rest.ImpersonationConfig) error {
	c := tb.Mgmt
	namespaces := map[string]bool{}
	for _, obj := range coreRBAC {
		if ns := obj.GetNamespace(); ns != "" && !namespaces[ns] {
			namespaces[ns] = true
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				return err
			}
		}
	}
	if err := tb.Apply(ctx, coreRBAC); err != nil {
		return fmt.Errorf("Cluster API's RBAC: %w", err)
	}
	if err := aggregateClusterRoles(ctx, c); err != nil {
		return err
	}
	if err := waitAllowed(ctx, c, map[*rest.ImpersonationConfig]string{capiUser: "list machines.cluster.x-k8s.io"}); err != nil {
		return err
	}
	ok, err := allowed(ctx, c, capiUser, "get harvestermachines")
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("Cluster API's own RBAC lets its manager get HarvesterMachines: the test would not show that the components' aggregated ClusterRole grants it")
	}
	return nil
}

// aggregateClusterRoles does what kube-controller-manager's clusterrole-aggregation controller does
// in a cluster (it does not run here: the test control plane is kube-apiserver and etcd): each
// ClusterRole with an aggregationRule gets the rules of every other ClusterRole its selectors match.
func aggregateClusterRoles(ctx context.Context, c client.Client) error {
	roles := &rbacv1.ClusterRoleList{}
	if err := c.List(ctx, roles); err != nil {
		return err
	}
	for i := range roles.Items {
		aggregate := &roles.Items[i]
		if aggregate.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, s := range aggregate.AggregationRule.ClusterRoleSelectors {
			selector, err := metav1.LabelSelectorAsSelector(&s)
			if err != nil {
				return fmt.Errorf("ClusterRole %s: %w", aggregate.Name, err)
			}
			for _, role := range roles.Items {
				if role.Name == aggregate.Name || !selector.Matches(labels.Set(role.Labels)) {
					continue
				}
				for _, r := range role.Rules {
					if !slices.ContainsFunc(rules, func(have rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(have, r) }) {
						rules = append(rules, r)
					}
				}
			}
		}
		aggregate.Rules = rules
		if err := c.Update(ctx, aggregate); err != nil {
			return err
		}
	}
	return nil
}

// allowed asks the API server's authorizer whether user may do access ("verb resource[.group]";
// without a group, this provider's), in namespace ns.
func allowed(ctx context.Context, c client.Client, user *rest.ImpersonationConfig, access string) (bool, error) {
	verb, resource, _ := strings.Cut(access, " ")
	resource, group, found := strings.Cut(resource, ".")
	if !found {
		group = infrav1.GroupVersion.Group
	}
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.UserName, Groups: user.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
	}}
	if err := c.Create(ctx, review); err != nil {
		return false, err
	}
	return review.Status.Allowed, nil
}

// waitAllowed waits until the authorizer allows each user its access (see allowed).
func waitAllowed(ctx context.Context, c client.Client, accesses map[*rest.ImpersonationConfig]string) error {
	for user, access := range accesses {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			ok, err := allowed(ctx, c, user, access)
			if err != nil {
				return err
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s may still not %s after 30s", user.UserName, access)
			}
		}
	}
	return nil
}

// waitEstablished waits until the API server serves every CRD of objs.
func waitEstablished(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, obj := range objs {
		if obj.GetKind() != "CustomResourceDefinition" {
			continue
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: obj.GetName()}, crd); err != nil {
				return err
			}
			if slices.ContainsFunc(crd.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
				return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
			}) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s is not established after 30s: %+v", obj.GetName(), crd.Status.Conditions)
			}
		}
	}
	return nil
}

// clusterAPIServiceAccount is the identity of the ServiceAccount that Cluster API core's RBAC binds
// its aggregated manager role to.
func clusterAPIServiceAccount(t *testing.T, coreRBAC []*unstructured.Unstructured) *rest.ImpersonationConfig {
	t.Helper()
	for _, obj := range coreRBAC {
		if obj.GetKind() == "ServiceAccount" {
			return testbed.ServiceAccountUser(obj.GetNamespace(), obj.GetName())
		}
	}
	t.Fatal("Cluster API core's RBAC has no ServiceAccount")
	return nil
}

// platformProviderConfig creates the sample ProviderConfig (config/samples/providerconfig.yaml,
// in the install namespace) shared with every namespace (scope platform), as a platform team
// offers one Harvester to its tenants, and returns it.
func platformProviderConfig(ctx context.Context, t *testing.T, tb *testbed.Testbed) *v1alpha1.ProviderConfig {
	t.Helper()
	objs, err := tb.DecodeFile(filepath.Join(repoRoot(), "config", "samples", "providerconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pc := &v1alpha1.ProviderConfig{}
	convert(t, objs[0], pc)
	pc.Spec.Scope = &v1alpha1.ProviderConfigScope{Type: v1alpha1.ProviderConfigScopePlatform}
	if err := tb.Mgmt.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	return pc
}

// kustomizeBuild builds a kustomization (a directory, absolute or of the repository) with the
// pinned kustomize.
func kustomizeBuild(ctx context.Context, t *testing.T, dir string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "tool", "-modfile="+filepath.Join(repoRoot(), "hack", "tools", "kustomize", "go.mod"), "kustomize", "build", dir)
	cmd.Dir = repoRoot()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return out
}

// linesWith returns the lines of text that contain match.
func linesWith(text, match string) string {
	var out []string
	for line := range strings.Lines(text) {
		if strings.Contains(line, match) {
			out = append(out, "  "+strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

func convert(t *testing.T, obj *unstructured.Unstructured, into any) {
	t.Helper()
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into); err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

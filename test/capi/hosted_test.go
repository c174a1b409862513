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
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The ServiceAccount of the Steward control plane provider's release
// (butlerdotdev/cluster-api-control-plane-provider-steward control-plane-components.yaml:
// config/default's namespace steward-system and namePrefix capi-steward-).
const (
	stewardNamespace      = "steward-system"
	stewardServiceAccount = "capi-steward-controller-manager"
)

// TestClusterAPIHostedStewardRBACRendersWithClusterctl builds config/steward as `make
// infrastructure-components` does (steward-rbac.yaml) and has the real clusterctl process it
// (`clusterctl generate yaml --from`): with no variables set, it binds Steward's release
// ServiceAccount; STEWARD_NAMESPACE and STEWARD_SERVICE_ACCOUNT name another. Either way the
// ClusterRole grants HarvesterClusters get, list, watch and patch, and nothing else.
func TestClusterAPIHostedStewardRBACRendersWithClusterctl(t *testing.T) {
	assets := requireAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		env                 []string
		namespace, accounts string
	}{
		{nil, stewardNamespace, stewardServiceAccount},
		{[]string{"STEWARD_NAMESPACE=butler-system", "STEWARD_SERVICE_ACCOUNT=steward"}, "butler-system", "steward"},
	} {
		role, binding := stewardRBAC(ctx, t, assets, tc.env...)
		want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tc.namespace, Name: tc.accounts}}
		if !slices.Equal(binding.Subjects, want) || binding.RoleRef.Name != role.Name || binding.RoleRef.Kind != "ClusterRole" {
			t.Errorf("with %v the binding binds %+v to %+v, want %+v to ClusterRole %s", tc.env, binding.Subjects, binding.RoleRef, want, role.Name)
		}
		wantRules := []rbacv1.PolicyRule{{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"harvesterclusters"}, Verbs: []string{"get", "list", "watch", "patch"}}}
		if !slices.EqualFunc(role.Rules, wantRules, func(a, b rbacv1.PolicyRule) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
			t.Errorf("the ClusterRole grants %+v, want %+v", role.Rules, wantRules)
		}
		for _, r := range role.Rules {
			requireNarrowRule(t, "ClusterRole "+role.Name, r)
		}
		if role.Labels["cluster.x-k8s.io/provider"] != "infrastructure-"+providerName || binding.Labels["cluster.x-k8s.io/provider"] != "infrastructure-"+providerName {
			t.Errorf("the ClusterRole and binding are labelled %v and %v, want cluster.x-k8s.io/provider: infrastructure-%s (clusterctl delete removes them with the provider)", role.Labels, binding.Labels, providerName)
		}
	}
}

// stewardRBAC is config/steward built with the pinned kustomize and processed by the real
// clusterctl with the variables env: the opt-in ClusterRole and ClusterRoleBinding.
func stewardRBAC(ctx context.Context, t *testing.T, assets string, env ...string) (*rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "steward-rbac.yaml")
	writeFile(t, file, kustomizeBuild(ctx, t, "config/steward"))
	config := filepath.Join(t.TempDir(), "clusterctl.yaml")
	writeFile(t, config, []byte("{}\n"))
	out := runClusterctl(ctx, t, assets, config, env, "generate", "yaml", "--from", file)
	if bytes.Contains(out, []byte("${")) {
		t.Fatalf("clusterctl left a variable unset:\n%s", out)
	}
	objs, err := testbed.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	role, binding := &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			convert(t, o, role)
		case "ClusterRoleBinding":
			convert(t, o, binding)
		default:
			t.Errorf("steward-rbac.yaml has %s %s: only the ClusterRole and its binding belong there", o.GetKind(), o.GetName())
		}
	}
	if len(objs) != 2 || role.Name == "" || binding.Name == "" {
		t.Fatalf("steward-rbac.yaml has %d objects, want a ClusterRole and a ClusterRoleBinding", len(objs))
	}
	return role, binding
}

// TestClusterAPIHostedControlPlaneSetsEndpoint shows that a hosted control plane provider sets the
// endpoint of a HarvesterCluster that has none, as Butler's Steward control plane provider does it
// and with only the RBAC it has. The hosted flavour's Cluster, HarvesterCluster (no endpoint) and
// StewardControlPlane (its CRD from Steward's release), as clusterctl renders them, go to a
// management API server with the real Cluster API core manager and this provider's controllers:
// the HarvesterCluster waits for an endpoint (WaitingForControlPlaneEndpoint), not provisioned.
// Steward's release RBAC (test/testdata/steward/rbac.yaml) alone does not let its ServiceAccount
// read HarvesterClusters; with the opt-in steward-rbac.yaml (config/steward, through clusterctl)
// it may get, list, watch and patch them, and nothing else. Then, as that ServiceAccount
// (impersonated), the test does what Steward's patchGenericCluster
// (controllers/stewardcontrolplane_controller_cluster_patch.go @78fc830) does for a kind named in
// --dynamic-infrastructure-clusters: it reads the Cluster, gets the HarvesterCluster unstructured
// through a client that reads unstructured objects from an informer cache (Steward's main.go:
// options.Cache.Unstructured = true), sets spec.controlPlaneEndpoint {host, port} and patches it
// as Cluster API's patch helper does (stewardPatchHelper: one JSON merge patch of the spec, the
// status untouched). The HarvesterCluster is then provisioned and Cluster API copies the endpoint
// to the Cluster; Steward's next reconcile sends nothing; an endpoint that changes afterwards is
// refused (it is set once).
func TestClusterAPIHostedControlPlaneSetsEndpoint(t *testing.T) {
	t.Parallel()
	assets := requireAssets(t)
	w := startCAPIWorld(t, stewardCRDs())
	ctx, c := w.ctx, w.c

	// The hosted flavour's Cluster, HarvesterCluster and StewardControlPlane, as clusterctl renders
	// them for namespace ns (its ProviderConfig "harvester"); the workers are not needed here.
	_, config := clusterctlRepository(ctx, t)
	flavour := generateFlavour(ctx, t, assets, config, "hosted")
	cluster := only(t, "hosted flavour", flavour, "Cluster")
	hc := only(t, "hosted flavour", flavour, "HarvesterCluster")
	for _, o := range []*unstructured.Unstructured{hc, only(t, "hosted flavour", flavour, "StewardControlPlane"), cluster} {
		w.must(c.Create(ctx, o, client.FieldValidation("Strict")))
	}
	key := client.ObjectKeyFromObject(hc)
	waitFor(ctx, t, w.capi, "the HarvesterCluster, owned by its Cluster, to wait for an endpoint", func() error {
		got := &infrav1.HarvesterCluster{}
		if err := c.Get(ctx, key, got); err != nil {
			return err
		}
		if ptrTrue(got.Status.Initialization.Provisioned) {
			return fmt.Errorf("provisioned without an endpoint")
		}
		for _, cond := range got.Status.Conditions {
			if cond.Reason == infrav1.ReasonWaitingForControlPlaneEndpoint {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v, want one with reason %s", got.Status.Conditions, infrav1.ReasonWaitingForControlPlaneEndpoint)
	})
	time.Sleep(time.Second) // a provider that wrongly provisions would do so now
	got := &infrav1.HarvesterCluster{}
	w.must(c.Get(ctx, key, got))
	if ptrTrue(got.Status.Initialization.Provisioned) || got.Spec.ControlPlaneEndpoint.Host != "" {
		t.Fatalf("the HarvesterCluster without an endpoint is provisioned (%v) or has endpoint %q", got.Status.Initialization.Provisioned, got.Spec.ControlPlaneEndpoint.Host)
	}

	// Steward's release RBAC, then ours.
	steward := testbed.ServiceAccountUser(stewardNamespace, stewardServiceAccount)
	release, err := w.decodeFile(filepath.Join(repoRoot(), "test", "testdata", "steward", "rbac.yaml"))
	w.must(err)
	for _, o := range release {
		w.must(c.Create(ctx, o))
	}
	w.must(waitAllowed(ctx, c, map[*rest.ImpersonationConfig]string{steward: "patch stewardcontrolplanes.controlplane.cluster.x-k8s.io"}))
	if ok, err := allowed(ctx, c, steward, "get harvesterclusters"); err != nil || ok {
		t.Fatalf("Steward's release RBAC alone lets it get HarvesterClusters (%v, %v): the test would not show that steward-rbac.yaml is needed", ok, err)
	}
	requireStewardCannotReadWithGetAndPatchOnly(ctx, t, w, cluster)
	role, binding := stewardRBAC(ctx, t, assets)
	w.must(c.Create(ctx, role))
	w.must(c.Create(ctx, binding))
	for _, access := range []string{"get harvesterclusters", "list harvesterclusters", "watch harvesterclusters", "patch harvesterclusters"} {
		w.must(waitAllowed(ctx, c, map[*rest.ImpersonationConfig]string{steward: access}))
	}
	for _, access := range []string{"create harvesterclusters", "update harvesterclusters", "delete harvesterclusters", "patch harvesterclusters/status",
		"update harvesterclusters/status", "get harvestermachines", "patch harvestermachines", "patch harvesterclustertemplates"} {
		if ok, err := allowedSub(ctx, c, steward, access); err != nil || ok {
			t.Errorf("Steward's ServiceAccount may %s (%v): steward-rbac.yaml grants more than get, list, watch and patch of HarvesterClusters", access, err)
		}
	}

	sc, _ := stewardClient(ctx, t, w, steward)

	const host = "10.40.0.200" // the address of the hosted API server's Service
	data, err := stewardPatchGenericCluster(ctx, c, sc, cluster, host, 6443)
	if err != nil {
		t.Fatalf("Steward's endpoint patch: %v", err)
	}
	if want := `{"spec":{"controlPlaneEndpoint":{"host":"10.40.0.200","port":6443}}}`; string(data) != want {
		t.Errorf("the patch helper's merge patch is %s, want %s", data, want)
	}
	waitFor(ctx, t, w.capi, "the HarvesterCluster to be provisioned and Cluster API to copy the endpoint to the Cluster", func() error {
		got := &infrav1.HarvesterCluster{}
		if err := c.Get(ctx, key, got); err != nil {
			return err
		}
		if got.Spec.ControlPlaneEndpoint != (infrav1.APIEndpoint{Host: host, Port: 6443}) {
			return fmt.Errorf("HarvesterCluster endpoint %+v", got.Spec.ControlPlaneEndpoint)
		}
		if !ptrTrue(got.Status.Initialization.Provisioned) {
			return fmt.Errorf("HarvesterCluster not provisioned: conditions %+v", got.Status.Conditions)
		}
		cl := &unstructured.Unstructured{}
		cl.SetGroupVersionKind(testbed.ClusterGVK)
		if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cl); err != nil {
			return err
		}
		clHost, _, _ := unstructured.NestedString(cl.Object, "spec", "controlPlaneEndpoint", "host")
		clPort, _, _ := unstructured.NestedInt64(cl.Object, "spec", "controlPlaneEndpoint", "port")
		infra, _, _ := unstructured.NestedBool(cl.Object, "status", "initialization", "infrastructureProvisioned")
		if clHost != host || clPort != 6443 || !infra {
			return fmt.Errorf("Cluster endpoint %s:%d, status.initialization.infrastructureProvisioned %v", clHost, clPort, infra)
		}
		return nil
	})
	t.Logf("HarvesterCluster %s provisioned at %s:6443, set by Steward's ServiceAccount", key, host)

	// Steward reconciles again with the same endpoint: nothing to send.
	if data, err := stewardPatchGenericCluster(ctx, c, sc, cluster, host, 6443); err != nil || string(data) != "{}" {
		t.Errorf("Steward's next reconcile with the same endpoint: patch %s, error %v; want no change", data, err)
	}
	// An endpoint that changes afterwards is refused: certificates and kubeconfigs name it.
	_, err = stewardPatchGenericCluster(ctx, c, sc, cluster, "10.40.0.201", 6443)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cannot be changed") {
		t.Errorf("patching another endpoint in: %v, want Invalid (spec.controlPlaneEndpoint cannot be changed once set)", err)
	}
	if refused := linesWith(w.capi.Log(), "forbidden"); refused != "" {
		t.Errorf("Cluster API's manager was refused something:\n%s", refused)
	}
}

// stewardClient is a client as the Steward control plane provider's manager builds it (main.go:
// NewClient with options.Cache.Unstructured = true): reads, unstructured ones included, come from
// an informer cache, which lists and watches each kind it is asked for; it acts as user. stop ends
// its informers.
func stewardClient(ctx context.Context, t *testing.T, w *capiWorld, user *rest.ImpersonationConfig) (c client.Client, stop func()) {
	t.Helper()
	config := rest.CopyConfig(w.cfg)
	config.Impersonate = *user
	informers, err := cache.New(config, cache.Options{Scheme: w.scheme})
	w.must(err)
	cacheCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go func() { _ = informers.Start(cacheCtx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("Steward's cache did not start")
	}
	c, err = client.New(config, client.Options{Scheme: w.scheme, Cache: &client.CacheOptions{Reader: informers, Unstructured: true}})
	w.must(err)
	return c, stop
}

// requireStewardCannotReadWithGetAndPatchOnly shows why steward-rbac.yaml grants list and watch
// besides get and patch: a ServiceAccount bound by Steward's release ClusterRole and a ClusterRole
// with only get and patch of HarvesterClusters reads the Cluster, but Steward's client cannot read
// the HarvesterCluster (its informer cannot list it) and patches nothing.
func requireStewardCannotReadWithGetAndPatchOnly(ctx context.Context, t *testing.T, w *capiWorld, cluster *unstructured.Unstructured) {
	t.Helper()
	const name = "steward-get-patch-only"
	user := testbed.ServiceAccountUser(stewardNamespace, name)
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: stewardNamespace, Name: name}}
	w.must(w.c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{infrav1.GroupVersion.Group}, Resources: []string{"harvesterclusters"}, Verbs: []string{"get", "patch"}}}}))
	for _, role := range []string{name, "capi-steward-manager-role"} {
		w.must(w.c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}}))
	}
	w.must(waitAllowed(ctx, w.c, map[*rest.ImpersonationConfig]string{user: "patch harvesterclusters"}))
	w.must(waitAllowed(ctx, w.c, map[*rest.ImpersonationConfig]string{user: "list clusters.cluster.x-k8s.io"}))
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	sc, stop := stewardClient(ctx, t, w, user)
	defer stop() // its informer would go on trying to list
	if _, err := stewardPatchGenericCluster(short, w.c, sc, cluster, "10.40.0.199", 6443); err == nil || !strings.Contains(err.Error(), "cannot retrieve the HarvesterCluster") {
		t.Fatalf("Steward's client with get and patch only: %v, want it unable to read the HarvesterCluster", err)
	}
	hc := &infrav1.HarvesterCluster{}
	w.must(w.c.Get(ctx, types.NamespacedName{Namespace: cluster.GetNamespace(), Name: cluster.GetName()}, hc))
	if hc.Spec.ControlPlaneEndpoint.Host != "" {
		t.Fatalf("the HarvesterCluster got endpoint %q", hc.Spec.ControlPlaneEndpoint.Host)
	}
}

// stewardPatchGenericCluster does what the Steward control plane provider's patchGenericCluster
// (controllers/stewardcontrolplane_controller_cluster_patch.go @78fc830, patchStatus false, as for
// a kind of --dynamic-infrastructure-clusters) does with its manager's client sc: it reads the
// Cluster, gets its infrastructure cluster unstructured by the Cluster's spec.infrastructureRef,
// sets spec.controlPlaneEndpoint to {host: endpoint, port: port (int64)} and patches it with
// stewardPatchHelper. Steward reads the Cluster as cluster.x-k8s.io/v1beta1, whose
// infrastructureRef carries an apiVersion that Cluster API's conversion takes from the CRD's
// contract label; here the Cluster is read as stored (v1beta2, apiGroup and kind) and the version
// is taken from that label the same way, with admin, which reads the CRD. It returns the patch
// data.
func stewardPatchGenericCluster(ctx context.Context, admin, sc client.Client, cluster *unstructured.Unstructured, endpoint string, port int64) ([]byte, error) {
	cl := &unstructured.Unstructured{}
	cl.SetGroupVersionKind(testbed.ClusterGVK)
	if err := sc.Get(ctx, client.ObjectKeyFromObject(cluster), cl); err != nil {
		return nil, fmt.Errorf("get the Cluster: %w", err)
	}
	ref, _, _ := unstructured.NestedStringMap(cl.Object, "spec", "infrastructureRef")
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := admin.Get(ctx, client.ObjectKey{Name: "harvesterclusters." + ref["apiGroup"]}, crd); err != nil {
		return nil, err
	}
	version := crd.GetLabels()["cluster.x-k8s.io/v1beta2"]
	if ref["kind"] != "HarvesterCluster" || version == "" {
		return nil, fmt.Errorf("infrastructureRef %v, contract label %q", ref, version)
	}

	infraCluster := unstructured.Unstructured{}
	infraCluster.SetGroupVersionKind(schema.GroupVersionKind{Group: ref["apiGroup"], Version: version, Kind: ref["kind"]})
	infraCluster.SetName(ref["name"])
	infraCluster.SetNamespace(cl.GetNamespace())
	getCtx, cancel := context.WithTimeout(ctx, 30*time.Second) // a cache that cannot list blocks
	defer cancel()
	if err := sc.Get(getCtx, types.NamespacedName{Name: infraCluster.GetName(), Namespace: infraCluster.GetNamespace()}, &infraCluster); err != nil {
		return nil, fmt.Errorf("cannot retrieve the %s resource: %w", infraCluster.GetKind(), err)
	}
	before := infraCluster.DeepCopy() // patch.NewHelper(&infraCluster, r.client)
	if err := unstructured.SetNestedMap(infraCluster.Object, map[string]any{"host": endpoint, "port": port}, "spec", "controlPlaneEndpoint"); err != nil {
		return nil, err
	}
	return stewardPatchHelper(ctx, sc, before, &infraCluster)
}

// stewardPatchHelper patches after as sigs.k8s.io/cluster-api/util/patch's Helper.Patch does for an
// unstructured object (which implements neither of its conditions setters) whose status did not
// change; read in cluster-api v1.14.2 util/patch (patch.go: Patch, calculateChanges, shouldPatch,
// patch, calculatePatch; utils.go: unsafeUnstructuredCopy) and in v1.10.4, which Steward builds
// with (its patch sends client.MergeFrom(before) of the same objects: the same data). The project's module cannot import that package: it requires sigs.k8s.io/cluster-api/api
// only, and the cluster-api module itself pins another controller-runtime (hack/tools/capi is
// its own module for that reason). The helper computes the top-level fields that differ (a merge
// patch of before against after); if any besides status does, it sends one JSON merge patch
// (types.MergePatchType, no resourceVersion precondition) of the objects without status: before
// and after keep the same resourceVersion, so the patch holds only what changed; an empty patch
// ({}) is not sent. It sends a status patch only when status changed, which Steward's
// patchGenericCluster never does for dynamic kinds: that is refused here.
func stewardPatchHelper(ctx context.Context, c client.Client, before, after *unstructured.Unstructured) ([]byte, error) {
	withoutStatus := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		res := u.DeepCopy()
		delete(res.Object, "status")
		return res
	}
	if fmt.Sprint(before.Object["status"]) != fmt.Sprint(after.Object["status"]) {
		return nil, fmt.Errorf("the status changed: Steward's patchGenericCluster with patchStatus false never changes it")
	}
	b, a := withoutStatus(before), withoutStatus(after)
	data, err := client.MergeFrom(b).Data(a)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(data, []byte("{}")) {
		return data, nil
	}
	return data, c.Patch(ctx, a, client.RawPatch(types.MergePatchType, data))
}

// allowedSub is allowed with subresources: access is "verb resource[/subresource]", of this
// provider's group.
func allowedSub(ctx context.Context, c client.Client, user *rest.ImpersonationConfig, access string) (bool, error) {
	verb, resource, _ := strings.Cut(access, " ")
	resource, sub, _ := strings.Cut(resource, "/")
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.UserName, Groups: user.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: infrav1.GroupVersion.Group, Resource: resource, Subresource: sub},
	}}
	if err := c.Create(ctx, review); err != nil {
		return false, err
	}
	return review.Status.Allowed, nil
}

// decodeFile decodes the manifests of a file.
func (w *capiWorld) decodeFile(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return testbed.DecodeManifests(data)
}

func ptrTrue(b *bool) bool { return b != nil && *b }

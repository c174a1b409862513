package capi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// clusterctl's inventory: what `clusterctl init` leaves on a management cluster and `clusterctl
// move` reads (cmd/clusterctl/client/cluster/inventory.go, objectgraph.go of Cluster API).
var (
	clusterctlProviderGVK = schema.GroupVersionKind{Group: "clusterctl.cluster.x-k8s.io", Version: "v1alpha3", Kind: "Provider"}
	crdListGVK            = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinitionList"}
)

const (
	// clusterctlLabel marks every component clusterctl installed; move discovers the kinds to
	// move from the CRDs that carry it.
	clusterctlLabel = "clusterctl.cluster.x-k8s.io"
	// capiProviderLabel names the provider a component belongs to.
	capiProviderLabel = "cluster.x-k8s.io/provider"
)

// initLikeClusterctl leaves the management cluster of w as `clusterctl init` leaves it, as far as
// `clusterctl move` reads it: the CRDs of Cluster API core and of this provider's components
// (infrastructure.butlerlabs.dev; Butler's own butler.butlerlabs.dev CRDs are not components)
// labelled as clusterctl labels what it installs, clusterctl's inventory CRD (installed by
// clusterctl itself, as every clusterctl command does on first contact), and a Provider object
// for each provider, in its namespace and version.
func (w *capiWorld) initLikeClusterctl(assets, config, kubeconfig string) {
	w.t.Helper()
	crds := &metav1.PartialObjectMetadataList{}
	crds.SetGroupVersionKind(crdListGVK)
	w.must(w.c.List(w.ctx, crds))
	for i := range crds.Items {
		crd := &crds.Items[i]
		_, group, _ := strings.Cut(crd.Name, ".")
		provider := ""
		switch {
		case group == infrav1.GroupVersion.Group:
			provider = "infrastructure-" + providerName
		case crd.Name == "inclusterippools.ipam.cluster.x-k8s.io":
			provider = "ipam-in-cluster"
		case group == "cluster.x-k8s.io" || strings.HasSuffix(group, ".cluster.x-k8s.io"):
			provider = "cluster-api"
		default:
			continue
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"",%q:%q}}}`, clusterctlLabel, capiProviderLabel, provider)
		crd.SetGroupVersionKind(crdListGVK.GroupVersion().WithKind("CustomResourceDefinition"))
		w.must(w.c.Patch(w.ctx, crd, client.RawPatch(types.MergePatchType, []byte(patch))))
	}
	// A backup of a namespace that holds nothing: clusterctl installs its inventory CRD and
	// moves nothing.
	runClusterctl(w.ctx, w.t, assets, config, nil, "move", "--kubeconfig", kubeconfig, "--namespace", "clusterctl-inventory", "--to-directory", w.t.TempDir())
	for _, p := range []struct{ namespace, name, providerName, kind, version string }{
		{"capi-system", "cluster-api", "cluster-api", "CoreProvider", pinnedVersion(w.t)},
		{testbed.Namespace, "infrastructure-" + providerName, providerName, "InfrastructureProvider", providerVersion},
	} {
		if err := w.c.Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
			w.t.Fatal(err)
		}
		obj := &unstructured.Unstructured{Object: map[string]any{"providerName": p.providerName, "type": p.kind, "version": p.version}}
		obj.SetGroupVersionKind(clusterctlProviderGVK)
		obj.SetNamespace(p.namespace)
		obj.SetName(p.name)
		obj.SetLabels(map[string]string{clusterctlLabel: "", capiProviderLabel: p.name})
		w.must(w.c.Create(w.ctx, obj))
	}
}

// kubeconfigFile writes a kubeconfig of w's API server for clusterctl.
func (w *capiWorld) kubeconfigFile() string {
	path := filepath.Join(w.t.TempDir(), "kubeconfig")
	writeFile(w.t, path, sim.KubeconfigFor(w.cfg))
	return path
}

// emptyClusterctlConfig is a clusterctl configuration that says nothing (move needs no repository).
func emptyClusterctlConfig(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "clusterctl.yaml")
	writeFile(t, path, []byte("{}\n"))
	return path
}

// vmWatch records every VM created or deleted on Harvester from its start.
type vmWatch struct {
	mu     sync.Mutex
	events []string
}

// watchVMs watches the VMs of Harvester namespace vms until ctx ends, from the state it lists now:
// what it records is what was created or deleted since.
func watchVMs(ctx context.Context, t *testing.T, hv *sim.Harvester) *vmWatch {
	t.Helper()
	c, err := client.NewWithWatch(hv.Config, client.Options{Scheme: sim.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	list := &kubevirtv1.VirtualMachineList{}
	if err := c.List(ctx, list, client.InNamespace("vms")); err != nil {
		t.Fatal(err)
	}
	v := &vmWatch{}
	rv := list.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			w, err := c.Watch(ctx, &kubevirtv1.VirtualMachineList{}, client.InNamespace("vms"), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				v.note("watch failed: " + err.Error())
				return
			}
			for ev := range w.ResultChan() {
				vm, ok := ev.Object.(*kubevirtv1.VirtualMachine)
				if !ok {
					if ev.Type == watch.Error {
						v.note(fmt.Sprintf("watch error: %v", ev.Object))
						w.Stop()
						return
					}
					continue
				}
				rv = vm.ResourceVersion
				switch ev.Type {
				case watch.Added:
					v.note(fmt.Sprintf("VM %s (UID %s) created", vm.Name, vm.UID))
				case watch.Deleted:
					v.note(fmt.Sprintf("VM %s (UID %s) deleted", vm.Name, vm.UID))
				case watch.Modified:
					if vm.DeletionTimestamp != nil {
						v.note(fmt.Sprintf("VM %s (UID %s) being deleted", vm.Name, vm.UID))
					}
				}
			}
		}
	}()
	return v
}

func (v *vmWatch) note(s string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.events) == 0 || v.events[len(v.events)-1] != s {
		v.events = append(v.events, s)
	}
}

// requireNone fails the test if any VM was created or deleted since the watch started.
func (v *vmWatch) requireNone(t *testing.T, during string) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.events) > 0 {
		t.Fatalf("%s, on Harvester: %s", during, strings.Join(v.events, "; "))
	}
}

// machinesRunning waits until the tenant cluster's Machines on w are want, all Running with a
// Node, and their HarvesterMachines Ready; it returns each Machine's providerID.
func (w *capiWorld) machinesRunning(want int) map[string]string {
	w.t.Helper()
	var ids map[string]string
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
	defer cancel()
	waitFor(ctx, w.t, w.capi, fmt.Sprintf("%d Machines Running with their Node", want), func() error {
		machines := &unstructured.UnstructuredList{}
		machines.SetGroupVersionKind(testbed.MachineGVK.GroupVersion().WithKind("MachineList"))
		w.must(w.c.List(w.ctx, machines, client.InNamespace(ns), client.MatchingLabels{testbed.ClusterNameLabel: tenant.Name}))
		ids = map[string]string{}
		for _, m := range machines.Items {
			phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
			node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
			id, _, _ := unstructured.NestedString(m.Object, "spec", "providerID")
			hm := &infrav1.HarvesterMachine{}
			if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: m.GetName()}, hm); err != nil {
				return err
			}
			if c := findCondition(hm.Status.Conditions, infrav1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("HarvesterMachine %s Ready %+v, conditions %+v", hm.Name, c, hm.Status.Conditions)
			}
			if phase != "Running" || node == "" || m.GetDeletionTimestamp() != nil {
				return fmt.Errorf("Machine %s: phase %q, nodeRef %q, status %v", m.GetName(), phase, node, m.Object["status"])
			}
			ids[m.GetName()] = id
		}
		if len(ids) != want {
			return fmt.Errorf("%d Machines, want %d", len(ids), want)
		}
		return nil
	})
	return ids
}

// controlPlaneInitialized waits until Cluster API counts the tenant's control plane initialized
// (clusterctl move refuses to move a Cluster before).
func (w *capiWorld) controlPlaneInitialized(cluster *unstructured.Unstructured) {
	w.t.Helper()
	waitFor(w.ctx, w.t, w.capi, "Cluster API to count the control plane initialized", func() error {
		w.must(w.c.Get(w.ctx, client.ObjectKeyFromObject(cluster), cluster))
		conditions, _, _ := unstructured.NestedSlice(cluster.Object, "status", "conditions")
		for _, cond := range conditions {
			if m, _ := cond.(map[string]any); m["type"] == "ControlPlaneInitialized" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("Cluster conditions %v", conditions)
	})
}

// managementClusterID is the identity of w's management cluster (its kube-system namespace's UID).
func (w *capiWorld) managementClusterID() string {
	w.t.Helper()
	kubeSystem := &corev1.Namespace{}
	w.must(w.c.Get(w.ctx, client.ObjectKey{Name: "kube-system"}, kubeSystem))
	return string(kubeSystem.UID)
}

// requireVMsOwnedBy checks that the VM of each HarvesterMachine of w is labelled for it (its UID)
// and for w's management cluster.
func (w *capiWorld) requireVMsOwnedBy(names ...string) {
	w.t.Helper()
	for _, name := range names {
		hm := &infrav1.HarvesterMachine{}
		w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: name}, hm))
		vm := &kubevirtv1.VirtualMachine{}
		w.must(w.hv.Client.Get(w.ctx, client.ObjectKey{Namespace: "vms", Name: name}, vm))
		if vm.Labels[harvester.LabelMachineRequestUID] != string(hm.UID) || vm.Labels[harvester.LabelManagementCluster] != w.managementClusterID() {
			w.t.Fatalf("VM %s labels %v: want HarvesterMachine %s's UID %s and management cluster %s", name, vm.Labels, name, hm.UID, w.managementClusterID())
		}
	}
}

// requireTakenOverEvents waits for the VMTakenOver event of each HarvesterMachine, which names the
// management cluster the machine came from and says why it is the same machine.
func (w *capiWorld) requireTakenOverEvents(from string, names ...string) {
	w.t.Helper()
	for _, name := range names {
		w.waitEvent("HarvesterMachine", name, infrav1.ReasonVMTakenOver, "management cluster "+from, "its bootstrap data is the data the machine was made with")
	}
}

// randomBootstrapData is bootstrap data that holds a secret, as a kubeadm join's holds its token.
func randomBootstrapData(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "#cloud-config\n# join token " + hex.EncodeToString(b) + "\n"
}

// moveScene is a running tenant cluster (a control plane Machine and a MachineDeployment of 1,
// their Nodes played on a tenant API server) on a source management cluster, ready to move to a
// target one, each with the real Cluster API core manager and this provider, on one simulated
// Harvester, and both told to clusterctl as `clusterctl init` leaves them.
type moveScene struct {
	hv                           *sim.Harvester
	src, dst                     *capiWorld
	assets, config               string
	srcKubeconfig, dstKubeconfig string
	tenantAPI                    *testbed.Tenant
	cloudProvider                *testbed.CloudProvider
	tc                           testbed.TenantCluster
	md                           *unstructured.Unstructured
	before                       map[string]string
	vms                          *vmWatch
}

// moveSetup is what a move scene has besides what every one has.
type moveSetup struct {
	// moreCRDs are served by both management clusters.
	moreCRDs []string
	// beforeMachines, if set, runs once the source holds the tenant Cluster, before its machines.
	beforeMachines func(m *moveScene)
	// workers, if set, is the spec of the MachineDeployment's machines.
	workers *infrav1.HarvesterMachineSpec
}

// newMoveScene starts it; the target's provider runs with dstOptions.
func newMoveScene(ctx context.Context, t *testing.T, dstOptions ...providerOption) *moveScene {
	t.Helper()
	return newMoveSceneWith(ctx, t, moveSetup{}, dstOptions...)
}

// newMoveSceneWith starts a move scene with setup.
func newMoveSceneWith(ctx context.Context, t *testing.T, setup moveSetup, dstOptions ...providerOption) *moveScene {
	t.Helper()
	m := &moveScene{assets: requireAssets(t)}
	m.hv = startSimulatedHarvester(ctx, t)
	m.src = startManagementCluster(ctx, t, m.hv, setup.moreCRDs)
	m.dst = startManagementCluster(ctx, t, m.hv, setup.moreCRDs, dstOptions...)
	m.config = emptyClusterctlConfig(t)
	m.srcKubeconfig, m.dstKubeconfig = m.src.kubeconfigFile(), m.dst.kubeconfigFile()
	m.src.initLikeClusterctl(m.assets, m.config, m.srcKubeconfig)
	m.dst.initLikeClusterctl(m.assets, m.config, m.dstKubeconfig)

	tenantAPI, err := testbed.StartTenant(ctx, m.src.c, ns, tenant.Name)
	t.Cleanup(func() { _ = tenantAPI.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	m.tenantAPI = tenantAPI
	kubelets, err := testbed.PlayKubelets(ctx, m.hv.Config, "vms", tenantAPI)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelets.Stop)
	// Harvester's cloud provider runs in the tenant from the credentials the management cluster
	// that holds the Cluster delivered: the source's before the move, the target's after.
	m.cloudProvider = testbed.PlayCloudProvider(ctx, m.src.c, ns, tenant.Name, tenantAPI)
	t.Cleanup(func() { m.cloudProvider.Stop() })

	m.tc = tenant
	m.tc.BootstrapData = randomBootstrapData(t)
	m.src.must(testbed.CreateAll(ctx, m.src.c, m.tc.ClusterObjects()...))
	cluster := m.tc.Cluster()
	// The bootstrap data Secret belongs to the cluster, as a bootstrap provider's Secret belongs
	// to its config (an ownerReference): clusterctl moves it with the cluster, unchanged.
	m.src.must(m.src.c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster))
	ownedByCluster := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":%q,"kind":"Cluster","name":%q,"uid":%q}]}}`,
		testbed.ClusterGVK.GroupVersion().String(), cluster.GetName(), cluster.GetUID())
	m.src.must(m.src.c.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m.tc.BootstrapSecretName()}}, client.RawPatch(types.MergePatchType, []byte(ownedByCluster))))
	if setup.beforeMachines != nil {
		setup.beforeMachines(m)
	}
	cpInfra, cp := m.tc.ControlPlaneMachine("tenant-cp-0")
	workers := m.tc
	if setup.workers != nil {
		workers.MachineSpec = *setup.workers
	}
	template, md := workers.MachineDeployment("tenant-md-0", 1)
	m.md = md
	m.src.must(testbed.CreateAll(ctx, m.src.c, cpInfra, cp, template, m.md))
	m.before = m.src.machinesRunning(2)
	m.src.controlPlaneInitialized(cluster)
	m.vms = watchVMs(ctx, t, m.hv)
	return m
}

// names are the tenant cluster's Machines, sorted.
func (m *moveScene) names() []string {
	return slices.Sorted(maps.Keys(m.before))
}

// carriedOn checks that the target runs every Machine the source ran, with the same providerID,
// its VM labelled for the target's HarvesterMachine and management cluster, each taken over with
// an event that says why, and its status rebuilt from Harvester.
func (m *moveScene) carriedOn(ctx context.Context, t *testing.T, start time.Time) {
	t.Helper()
	m.cloudProvider.Stop()
	m.cloudProvider = testbed.PlayCloudProvider(ctx, m.dst.c, ns, tenant.Name, m.tenantAPI)
	after := m.dst.machinesRunning(len(m.before))
	t.Logf("every Machine Running on the target %s after the move started", time.Since(start).Round(time.Millisecond))
	for name, id := range m.before {
		if after[name] != id {
			t.Fatalf("after the move Machine %s has providerID %q, had %q", name, after[name], id)
		}
	}
	m.dst.requireVMsOwnedBy(m.names()...)
	m.dst.requireTakenOverEvents(m.src.managementClusterID(), m.names()...)
	for _, name := range m.names() {
		hm := &infrav1.HarvesterMachine{}
		m.dst.must(m.dst.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, hm))
		if len(hm.Status.Addresses) == 0 || hm.Status.Initialization.Provisioned == nil || !*hm.Status.Initialization.Provisioned {
			t.Fatalf("HarvesterMachine %s status after the move: %+v", name, hm.Status)
		}
	}
	m.dst.requireOwner(m.dst.managementClusterID())
}

// waitOwned waits for the HarvesterCluster's Owned condition to say reason and mentions.
func (w *capiWorld) waitOwned(reason string, mentions ...string) *metav1.Condition {
	w.t.Helper()
	hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}}
	return w.waitCondition(hc, func() []metav1.Condition { return hc.Status.Conditions }, infrav1.ConditionOwned, reason, mentions...)
}

// requireOwner checks that the tenant cluster's ownership Lease on Harvester names holder.
func (w *capiWorld) requireOwner(holder string) {
	w.t.Helper()
	lease := &coordinationv1.Lease{}
	w.must(w.hv.Client.Get(w.ctx, client.ObjectKey{Namespace: "vms", Name: harvester.OwnershipLeaseName(types.NamespacedName{Namespace: ns, Name: tenant.Name})}, lease))
	if got := ptr.Deref(lease.Spec.HolderIdentity, ""); got != holder {
		w.t.Fatalf("the tenant cluster's ownership Lease is held by %q, want %q", got, holder)
	}
}

// TestClusterAPIMove moves a running tenant cluster from one management cluster to another with the
// real `clusterctl move`, the target's clock ten minutes ahead of the source's. The source
// releases the cluster's ownership when clusterctl pauses it, and the target takes it when it
// resumes its copy: every Machine is Running again with the same providerID, its VM labelled for
// the new HarvesterMachine and management cluster, and no VM was created or deleted on Harvester
// during or after the move; the MachineDeployment scales to 2 and back to 1 on the target, and
// deleting the Cluster there leaves Harvester empty.
func TestClusterAPIMove(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	t.Cleanup(cancel)
	m := newMoveScene(ctx, t, clockOff(10*time.Minute))
	delivered := m.src.tenantCredentials()
	start := time.Now()
	out := runClusterctl(ctx, t, m.assets, m.config, nil, "move", "--kubeconfig", m.srcKubeconfig, "--to-kubeconfig", m.dstKubeconfig, "--namespace", ns, "-v", "3")
	t.Logf("clusterctl move:\n%s", out)
	t.Logf("clusterctl moved the tenant cluster in %s", time.Since(start).Round(time.Millisecond))
	m.carriedOn(ctx, t, start)
	// The tenant's credentials passed with the cluster, proven by the moved Secret's live token:
	// nothing was re-issued.
	if now := m.dst.tenantCredentials(); !bytes.Equal(tokenOf(t, now), tokenOf(t, delivered)) {
		t.Fatal("the move re-issued the tenant's credentials")
	}
	m.dst.must(whoAmI(ctx, delivered))
	m.dst.waitOwned(infrav1.ReasonOwnershipTakenOver, "took Cluster tenant's machines over from management cluster "+m.src.managementClusterID(), "released it")
	// Some time on the target: nothing is created or deleted by itself.
	time.Sleep(3 * time.Second)
	m.vms.requireNone(t, "during and after the move")

	// The target scales the MachineDeployment up and down.
	dstMD := m.md.DeepCopy()
	m.dst.must(m.dst.c.Patch(ctx, dstMD, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`))))
	m.dst.machinesRunning(3)
	t.Logf("scaled up on the target, %s after the move started", time.Since(start).Round(time.Millisecond))
	m.dst.must(m.dst.c.Patch(ctx, dstMD, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))))
	m.dst.machinesRunning(2)
	t.Logf("scaled down on the target, %s after the move started", time.Since(start).Round(time.Millisecond))

	// Deleting the Cluster on the target empties Harvester, its ownership Lease included.
	m.dst.must(m.dst.c.Delete(ctx, m.tc.Cluster()))
	waitFor(ctx, t, m.dst.capi, "the Cluster and everything on Harvester to go", func() error {
		return m.dst.clusterAndMachinesGone(m.tc.Cluster())
	})
	waitFor(ctx, t, m.dst.capi, "the ownership Lease to go", func() error {
		return goneFrom(ctx, m.hv.Client, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "vms",
			Name: harvester.OwnershipLeaseName(types.NamespacedName{Namespace: ns, Name: tenant.Name})}})
	})
}

// TestClusterAPIMoveForgeryTakesNothing: a tenant copies what it can read of a running machine
// (its name, spec.providerID and annotations, the record of where its VM lives among them) into
// a HarvesterMachine of another namespace of the same management cluster, and of the same
// namespace of another management cluster on the same Harvester, with bootstrap data of its own,
// and with the hand-over annotation, which the platform operator did not allow. None of them takes
// the VM, disks or cloud-init Secret; each says whose the VM is, and none of their deletions
// deletes anything. The machine runs on, its VM never changed hands.
func TestClusterAPIMoveForgeryTakesNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	hv := startSimulatedHarvester(ctx, t)
	victim := startManagementCluster(ctx, t, hv, nil)
	other := startManagementCluster(ctx, t, hv, nil)

	tc := tenant
	tc.BootstrapData = randomBootstrapData(t)
	victim.must(testbed.CreateAll(ctx, victim.c, tc.ClusterObjects()...))
	hmObj, machine := tc.Machine("tenant-md-0", "")
	victim.must(testbed.CreateAll(ctx, victim.c, hmObj, machine))
	var vm kubevirtv1.VirtualMachine
	live := &infrav1.HarvesterMachine{}
	waitFor(ctx, t, victim.capi, "the victim's machine to run", func() error {
		return machineOnHarvester(ctx, victim.c, hv.Client, "vms", machine, &vm, live)
	})
	vms := watchVMs(ctx, t, hv)

	// What a tenant can read of the live machine and copy.
	forge := func(hm *infrav1.HarvesterMachine, providerID bool, extra map[string]string) {
		hm.Annotations = map[string]string{}
		for k, v := range live.Annotations {
			hm.Annotations[k] = v
		}
		for k, v := range extra {
			hm.Annotations[k] = v
		}
		hm.Spec = live.Spec
		if !providerID {
			hm.Spec.ProviderID = ""
		}
	}
	forger := tc
	forger.BootstrapData = randomBootstrapData(t) // its own: it cannot read the victim's
	// A cluster of its own: one of the victim's name on another management cluster is stopped
	// before its machines are looked at, by the victim's ownership Lease (the restore test).
	forger.Name = "forger"

	// Another management cluster, the same namespace and name, the hand-over annotation.
	other.must(testbed.CreateAll(ctx, other.c, forger.ClusterObjects()...))
	hm1, m1 := forger.Machine("tenant-md-0", "")
	forge(hm1, false, map[string]string{infrav1.AnnotationHandOver: "true"})
	other.must(testbed.CreateAll(ctx, other.c, hm1, m1))
	other.readyCondition("tenant-md-0", v1alpha1.ReasonNameConflict, "another management cluster", "--"+options.HandOverFlag, "kube-system")

	// Another namespace of the same management cluster, with the providerID and the victim's own
	// bootstrap data (the namespace alone stops it).
	const evil = "evil"
	victim.must(victim.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: evil}}))
	victim.must(victim.c.Create(ctx, &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: evil, Name: "harvester"}, Spec: v1alpha1.ProviderConfigSpec{
		Provider: v1alpha1.ProviderTypeHarvester, CredentialsRef: &v1alpha1.SecretReference{Name: "harvester-kubeconfig"},
		Harvester: &v1alpha1.HarvesterProviderConfig{Namespace: "vms", NetworkName: "vms/vlan40", ImageName: "vms/ubuntu"},
	}}))
	victim.must(victim.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: evil, Name: "harvester-kubeconfig"}, Data: map[string][]byte{"kubeconfig": hv.Kubeconfig}}))
	inEvil := tc
	inEvil.Namespace = evil
	victim.must(testbed.CreateAll(ctx, victim.c, inEvil.ClusterObjects()...))
	hm2, m2 := inEvil.Machine("tenant-md-0", "")
	forge(hm2, true, nil)
	victim.must(testbed.CreateAll(ctx, victim.c, hm2, m2))
	waitFor(ctx, t, victim.capi, "the forged HarvesterMachine of namespace evil to be refused", func() error {
		hm := &infrav1.HarvesterMachine{}
		victim.must(victim.c.Get(ctx, client.ObjectKey{Namespace: evil, Name: "tenant-md-0"}, hm))
		if c := findCondition(hm.Status.Conditions, infrav1.ConditionReady); c == nil || c.Reason != v1alpha1.ReasonNameConflict || !strings.Contains(c.Message, "HarvesterMachine tenants/tenant-md-0") {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})

	// The other management cluster again, now with the providerID too (and no hand-over).
	other.must(other.c.Delete(ctx, m1))
	waitFor(ctx, t, other.capi, "the first forgery to go", func() error {
		if err := other.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tenant-md-0"}, &infrav1.HarvesterMachine{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("HarvesterMachine still there (%w)", err)
		}
		if err := other.c.Get(ctx, client.ObjectKeyFromObject(m1), m1.DeepCopy()); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Machine still there (%w)", err)
		}
		return nil
	})
	hm3, m3 := forger.Machine("tenant-md-0", "")
	forge(hm3, true, nil)
	other.must(testbed.CreateAll(ctx, other.c, hm3, m3))
	other.readyCondition("tenant-md-0", v1alpha1.ReasonNameConflict, "bootstrap data is not the data")

	// Nothing changed hands; deleting the forgeries deletes nothing.
	other.must(other.c.Delete(ctx, m3))
	victim.must(victim.c.Delete(ctx, m2))
	for _, w := range []*capiWorld{other, victim} {
		waitFor(ctx, t, w.capi, "the forgeries to go", func() error {
			list := &infrav1.HarvesterMachineList{}
			w.must(w.c.List(ctx, list))
			for _, hm := range list.Items {
				if hm.UID != live.UID {
					return fmt.Errorf("HarvesterMachine %s/%s still there", hm.Namespace, hm.Name)
				}
			}
			return nil
		})
	}
	time.Sleep(2 * time.Second)
	victim.requireVMsOwnedBy("tenant-md-0")
	vms.requireNone(t, "with forged HarvesterMachines")
	if vmsLeft, disks, secrets := victim.harvesterLeft(); vmsLeft != 1 || disks != 1 || secrets != 1 {
		t.Fatalf("on Harvester: %d VMs, %d disks, %d cloud-init Secrets: want the victim's one of each", vmsLeft, disks, secrets)
	}
	victim.readyCondition("tenant-md-0", infrav1.ReasonVMRunning)
}

// TestClusterAPIMoveLeftBehindDeletionEnds: the ProviderConfig is platform configuration that
// clusterctl move leaves behind. A Cluster whose ProviderConfig is gone is deleted: its
// HarvesterMachine says its deletion is blocked and the command that releases it; once the user
// annotates it (skip-cleanup), the deletion ends, and nothing is deleted on Harvester. A HarvesterCluster
// whose ProviderConfig does not exist says it is not installed on this management cluster.
func TestClusterAPIMoveLeftBehindDeletionEnds(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t)
	ctx, c := w.ctx, w.c
	cluster := w.tenantCluster()
	machine := w.machine("tenant-md-0", "")
	var vm kubevirtv1.VirtualMachine
	waitFor(ctx, t, w.capi, "the machine to run", func() error {
		return machineOnHarvester(ctx, c, w.hv.Client, "vms", machine, &vm, &infrav1.HarvesterMachine{})
	})

	w.must(c.Delete(ctx, &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "harvester"}}))
	waitFor(ctx, t, w.capi, "the HarvesterCluster to say its ProviderConfig is not installed here", func() error {
		hc := &infrav1.HarvesterCluster{}
		w.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tenant.Name}, hc))
		if cond := findCondition(hc.Status.Conditions, infrav1.ConditionReady); cond == nil || cond.Reason != infrav1.ReasonProviderConfigNotFound ||
			!strings.Contains(cond.Message, "does not exist on this management cluster") || !strings.Contains(cond.Message, "kubectl get providerconfig -n tenants harvester -o yaml") {
			return fmt.Errorf("Ready %+v", cond)
		}
		return nil
	})
	w.must(c.Delete(ctx, cluster))
	w.readyCondition("tenant-md-0", infrav1.ReasonDeletionBlocked, "ProviderConfig tenants/harvester", "kubectl annotate harvestermachine -n tenants tenant-md-0 "+infrav1.AnnotationSkipHarvesterCleanup+"=true")
	// Cluster API deletes the HarvesterCluster once the machines are gone: until the user says so,
	// the Cluster stays.
	time.Sleep(2 * time.Second)
	w.must(c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster))
	w.must(c.Patch(ctx, &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-md-0"}},
		client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, infrav1.AnnotationSkipHarvesterCleanup)))))
	// The HarvesterCluster cannot delete the tenant's credentials on Harvester without its
	// ProviderConfig either: it says so and how to release it, and is released the same way.
	waitFor(ctx, t, w.capi, "the HarvesterCluster to say its deletion is blocked and how to release it", func() error {
		hc := &infrav1.HarvesterCluster{}
		w.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tenant.Name}, hc))
		if cond := findCondition(hc.Status.Conditions, infrav1.ConditionReady); cond == nil || cond.Reason != infrav1.ReasonDeletionBlocked ||
			!strings.Contains(cond.Message, "kubectl annotate harvestercluster -n tenants "+tenant.Name+" "+infrav1.AnnotationSkipHarvesterCleanup+"=true") {
			return fmt.Errorf("Ready %+v", cond)
		}
		return nil
	})
	w.must(c.Patch(ctx, &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}},
		client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, infrav1.AnnotationSkipHarvesterCleanup)))))
	waitFor(ctx, t, w.capi, "the Cluster to go", func() error { return clusterGone(ctx, c, cluster) })
	// Released without cleaning up: the VM is still there.
	w.must(w.hv.Client.Get(ctx, client.ObjectKeyFromObject(&vm), &vm))
	if vm.DeletionTimestamp != nil {
		t.Fatalf("the VM of a HarvesterMachine released with skip-cleanup is being deleted")
	}
}

// TestClusterAPIMoveDeleteProviderKeepsButlerAPI: `clusterctl delete --infrastructure
// butler-harvester --include-crd`, run by the real clusterctl against the components as clusterctl
// installs them (clusterctl generate provider, applied, with clusterctl's inventory), deletes this
// provider's own CRDs (infrastructure.butlerlabs.dev) and never Butler's (butler.butlerlabs.dev):
// those are not components, so the management cluster's own MachineRequests and ProviderConfigs
// stay.
func TestClusterAPIMoveDeleteProviderKeepsButlerAPI(t *testing.T) {
	t.Parallel()
	assets := requireAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	_, config := clusterctlRepository(ctx, t)
	generated := runClusterctl(ctx, t, assets, config, nil, "generate", "provider", "--infrastructure", providerName+":"+providerVersion)
	components, err := testbed.DecodeManifests(generated)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range components {
		if o.GetKind() == "CustomResourceDefinition" && !strings.HasSuffix(o.GetName(), "."+infrav1.GroupVersion.Group) {
			t.Errorf("the components carry CRD %s: only %s's are this provider's", o.GetName(), infrav1.GroupVersion.Group)
		}
	}

	env := &envtest.Environment{ErrorIfCRDPathMissing: true, CRDDirectoryPaths: []string{
		testbed.ClusterAPICRDs(assets), filepath.Join(repoRoot(), "config", "crd", "bases"),
	}}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: testScheme()})
	if err != nil {
		t.Fatal(err)
	}
	// Butler's API first, as Butler installs it, and an object of it.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "harvester"}, Spec: v1alpha1.ProviderConfigSpec{
		Provider: v1alpha1.ProviderTypeHarvester, CredentialsRef: &v1alpha1.SecretReference{Name: "harvester-kubeconfig"},
		Harvester: &v1alpha1.HarvesterProviderConfig{Namespace: "vms", NetworkName: "vms/vlan40"},
	}}
	if err := c.Create(ctx, pc); err != nil {
		t.Fatal(err)
	}
	// The components as clusterctl init applies them, and its inventory.
	for _, o := range components {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("clusterctl"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if err := waitEstablished(ctx, c, components); err != nil {
		t.Fatal(err)
	}
	w := &capiWorld{t: t, ctx: ctx, c: c, cfg: cfg}
	kubeconfig := w.kubeconfigFile()
	w.initLikeClusterctl(assets, config, kubeconfig)

	runClusterctl(ctx, t, assets, config, nil, "delete", "--kubeconfig", kubeconfig, "--infrastructure", providerName, "--include-crd")

	crds := &metav1.PartialObjectMetadataList{}
	crds.SetGroupVersionKind(crdListGVK)
	w.must(c.List(ctx, crds))
	var left []string
	for _, crd := range crds.Items {
		if crd.DeletionTimestamp == nil {
			left = append(left, crd.Name)
		}
	}
	for _, o := range components {
		if o.GetKind() == "CustomResourceDefinition" && slices.Contains(left, o.GetName()) {
			t.Errorf("clusterctl delete --include-crd left the provider's CRD %s", o.GetName())
		}
	}
	for _, name := range []string{"machinerequests.butler.butlerlabs.dev", "providerconfigs.butler.butlerlabs.dev", "imagesyncs.butler.butlerlabs.dev"} {
		if !slices.Contains(left, name) {
			t.Errorf("clusterctl delete --include-crd deleted Butler's CRD %s (CRDs left: %v)", name, left)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pc), pc); err != nil || pc.DeletionTimestamp != nil {
		t.Errorf("ProviderConfig after clusterctl delete: %v, deletion %v", err, pc.DeletionTimestamp)
	}
}

// testScheme knows the kinds the tests write typed.
func testScheme() *k8sruntime.Scheme {
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	return scheme
}

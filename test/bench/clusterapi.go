package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The Cluster API run asks for its machines as Cluster API users do: through the real Cluster API
// core manager, with a MachineDeployment of N in a Cluster whose infrastructure is a
// HarvesterCluster. Before the measurement it readies what such a cluster has when it scales: a
// second API server as the tenant cluster (its kubeconfig in the <cluster>-kubeconfig Secret), the
// kubelet player (testbed.PlayKubelets: a Node with the VM's providerID once its VM runs), and a
// control plane Machine with its Node, so that Cluster API counts the control plane initialized
// and watches the tenant's Nodes. The measurement runs from creating the MachineDeployment to all
// its Machines in phase Running (with their Node), and from deleting it to it being gone; the
// Cluster is deleted afterwards, and Harvester must then be empty.
//
// Over K Harvester clusters (-harvesters) the run has K such Clusters, one on each Harvester
// cluster's ProviderConfig, each with its own tenant API server, kubelet player, control plane
// Machine and MachineDeployment, the N machines spread over the K MachineDeployments: a platform
// whose tenants live on several sites.
const (
	capiClusterName       = "bench"
	capiControlPlane      = "bench-cp-0"
	capiMachineDeployment = "bench-md"
)

// capiCluster is one Cluster of a Cluster API run, on one Harvester cluster.
type capiCluster struct {
	spec                     testbed.TenantCluster
	controlPlane, deployment string
	// harvester is the index of its Harvester cluster in the testbed's.
	harvester int
	// replicas is its MachineDeployment's share of the run's machines.
	replicas int
	tenant   *testbed.Tenant
	kubelets *testbed.Kubelets
}

// capiClusters are the Clusters of a Cluster API run of n machines over k Harvester clusters:
// the first is benchTenant with MachineDeployment bench-md, cluster i (from 1) is bench-<i+1> on
// Harvester cluster i's ProviderConfig with MachineDeployment bench-md-<i+1> (its machines' names
// too begin with bench-md-), its endpoint below the first's. Machine i of n is in cluster i mod k,
// as the MachineRequest runs spread theirs.
func capiClusters(k, n int) []*capiCluster {
	k = max(k, 1)
	out := make([]*capiCluster, k)
	for i := range out {
		c := &capiCluster{spec: benchTenant, controlPlane: capiControlPlane, deployment: capiMachineDeployment, harvester: i, replicas: n / k}
		if i < n%k {
			c.replicas++
		}
		if i > 0 {
			c.spec.Name = fmt.Sprintf("%s-%d", capiClusterName, i+1)
			c.spec.ProviderConfig = infrav1.ProviderConfigReference{Name: providerConfigName(i)}
			c.spec.Endpoint.Host = fmt.Sprintf("10.40.15.%d", 250-i)
			c.controlPlane = c.spec.Name + "-cp-0"
			c.deployment = fmt.Sprintf("%s-%d", capiMachineDeployment, i+1)
		}
		out[i] = c
	}
	return out
}

// benchTenant is the Cluster of the run, on the ProviderConfig of config/samples; its machines are
// the size of the MachineRequests of the other runs.
var benchTenant = testbed.TenantCluster{
	Namespace: testbed.Namespace, Name: capiClusterName, ProviderConfig: infrav1.ProviderConfigReference{Name: "harvester-config"},
	Endpoint: infrav1.APIEndpoint{Host: "10.40.15.250", Port: 6443}, // the top of the /20 the machines' IPs come from
	MachineSpec: infrav1.HarvesterMachineSpec{CPU: 4, Memory: resource.MustParse("8Gi"),
		RootDisk: infrav1.RootDisk{Size: resource.MustParse("50Gi")}},
}

// clusterAPIAssets is the Cluster API build CAPI_ASSETS names (make bench sets it), else the one
// hack/tools/capi.sh builds or finds cached.
func clusterAPIAssets(ctx context.Context, repoRoot string) (string, error) {
	if os.Getenv(testbed.ClusterAPIAssetsEnv) != "" {
		return testbed.ClusterAPIAssets()
	}
	return testbed.BuildClusterAPI(ctx, repoRoot)
}

// machineDeployment is the front door of the Cluster API run.
type machineDeployment struct {
	timeout time.Duration
	// static gives the machines their addresses from benchPool, which ipam (the in-cluster IPAM
	// provider's player) serves.
	static bool
	ipam   *testbed.IPAM
	// clusters are the run's Clusters, one on each Harvester cluster (prepare makes them).
	clusters []*capiCluster
	// createdAt and deletedAt are when the MachineDeployment was created and deleted.
	createdAt, deletedAt time.Time
	// core is what Cluster API core had done by then (and by the end: coreWork).
	coreAtCreate, coreAtDelete coreWork
	replicas                   int
	// When each of the MachineDeployment's machines (by name) reached each milestone, as informers
	// see them: its HarvesterMachine's and its Machine's.
	infra, machine map[string]*ipSeen
	stops          []func()
	breakdown      string
}

// The milestones of a machine's HarvesterMachine and Machine.
const (
	milestoneCreated     = "created"
	milestoneProvisioned = "provisioned"
	milestoneRunning     = "running"
	milestoneDeleting    = "deleting"
	milestoneGone        = "gone"
)

func (m *machineDeployment) queue() string { return "harvestermachine" }

func (m *machineDeployment) prepare(ctx context.Context, tb *testbed.Testbed) error {
	m.clusters = capiClusters(len(tb.Harvesters), 0)
	for _, c := range m.clusters {
		var err error
		if c.tenant, err = testbed.StartTenant(ctx, tb.Mgmt, c.spec.Namespace, c.spec.Name); err != nil {
			return err
		}
		if c.kubelets, err = testbed.PlayKubelets(ctx, tb.Harvesters[c.harvester].Config, testbed.HarvesterNamespace, c.tenant, testbed.WithAdminCloudProvider()); err != nil {
			return err
		}
		cpInfra, cp := c.spec.ControlPlaneMachine(c.controlPlane)
		if err := testbed.CreateAll(ctx, tb.Mgmt, append(c.spec.ClusterObjects(), cpInfra, cp)...); err != nil {
			return err
		}
	}
	for _, c := range m.clusters {
		if err := waitFor(ctx, 2*time.Minute, tb, func() (bool, error) { return controlPlaneInitialized(ctx, tb.Mgmt, c) }); err != nil {
			return fmt.Errorf("waiting for the control plane Machine %s to run and Cluster API to count the control plane of %s initialized: %w", c.controlPlane, c.spec.Name, err)
		}
	}
	if m.static {
		if err := tb.Mgmt.Create(ctx, benchPool()); err != nil {
			return err
		}
		ipam, err := testbed.PlayIPAM(ctx, tb.MgmtConfig)
		if err != nil {
			return err
		}
		m.ipam = ipam
	}
	return m.watch(ctx, tb)
}

// benchPool is the InClusterIPPool of the static-address run: 1,024 addresses of the machines'
// /20, above the leases the simulated DHCP server gives first (the control plane Machine's).
func benchPool() *unstructured.Unstructured {
	pool := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"addresses": []any{"10.40.8.0-10.40.11.255"}, "prefix": int64(20), "gateway": "10.40.0.1",
	}}}
	pool.SetGroupVersionKind(testbed.InClusterIPPoolGVK)
	pool.SetNamespace(benchTenant.Namespace)
	pool.SetName("bench-static")
	return pool
}

// watch starts the informers that time the MachineDeployment's machines.
func (m *machineDeployment) watch(ctx context.Context, tb *testbed.Testbed) error {
	machine := &unstructured.Unstructured{}
	machine.SetGroupVersionKind(testbed.MachineGVK)
	deployments := m.deployments()
	for _, w := range []struct {
		seen       *map[string]*ipSeen
		obj        client.Object
		milestones []string
		ready      func(any) bool // the second milestone: provisioned, Running
	}{
		{&m.infra, &infrav1.HarvesterMachine{}, []string{milestoneCreated, milestoneProvisioned, milestoneDeleting, milestoneGone}, func(o any) bool {
			hm, ok := o.(*infrav1.HarvesterMachine)
			return ok && hm.Status.Initialization.Provisioned != nil && *hm.Status.Initialization.Provisioned
		}},
		{&m.machine, machine, []string{milestoneCreated, milestoneRunning, milestoneDeleting, milestoneGone}, func(o any) bool {
			u, ok := o.(*unstructured.Unstructured)
			return ok && machinePhase(u) == "Running"
		}},
	} {
		seen, stop, err := watchMilestones(ctx, tb.MgmtConfig, tb.Mgmt.Scheme(), benchTenant.Namespace, w.obj, w.milestones, func(o any, deleted bool) (string, []string) {
			obj, ok := o.(metav1.Object)
			if !ok || !slices.Contains(deployments, obj.GetLabels()[testbed.DeploymentNameLabel]) {
				return "", nil
			}
			switch {
			case deleted:
				return obj.GetName(), []string{milestoneGone}
			case obj.GetDeletionTimestamp() != nil:
				return obj.GetName(), []string{milestoneDeleting}
			case w.ready(o):
				return obj.GetName(), []string{milestoneCreated, w.milestones[1]}
			}
			return obj.GetName(), []string{milestoneCreated}
		})
		if err != nil {
			return err
		}
		*w.seen = seen
		m.stops = append(m.stops, stop)
	}
	return nil
}

// deployments names the run's MachineDeployments.
func (m *machineDeployment) deployments() []string {
	names := make([]string, len(m.clusters))
	for i, c := range m.clusters {
		names[i] = c.deployment
	}
	return names
}

func (m *machineDeployment) close() {
	for _, stop := range m.stops {
		stop()
	}
	if m.ipam != nil {
		m.ipam.Stop()
	}
	for _, c := range m.clusters {
		if c.kubelets != nil {
			c.kubelets.Stop()
		}
		if c.tenant != nil {
			_ = c.tenant.Stop() // the run's outcome is known; a tenant API server that stops badly changes nothing
		}
	}
}

// create creates the MachineDeployments of the n machines, each with its template, one after the
// other as fast as the management API server takes them.
func (m *machineDeployment) create(ctx context.Context, tb *testbed.Testbed, n int) error {
	var objs []client.Object
	for i, share := range capiClusters(len(m.clusters), n) {
		c := m.clusters[i]
		c.replicas = share.replicas
		tenant := c.spec
		if m.static {
			tenant.MachineSpec.Interfaces = []infrav1.NetworkInterface{{Network: "default/vlan40-workloads", Nameservers: []string{"10.40.0.2"},
				AddressesFromPools: []infrav1.IPPoolReference{{APIGroup: testbed.InClusterIPPoolGVK.Group, Kind: testbed.InClusterIPPoolGVK.Kind, Name: benchPool().GetName()}}}}
		}
		template, md := tenant.MachineDeployment(c.deployment, c.replicas)
		objs = append(objs, template, md)
	}
	var err error
	if m.coreAtCreate, err = scrapeCoreWork(ctx, tb.ClusterAPI.MetricsURL, m.coreHosts(tb)); err != nil {
		return err
	}
	m.createdAt, m.replicas = time.Now(), n
	return testbed.CreateAll(ctx, tb.Mgmt, objs...)
}

// running counts the Machines Running now: under load Cluster API's MachineSet may create one too
// many from a stale cache, and delete it again once it sees it (seen at N=100).
func (m *machineDeployment) running() int {
	running := m.machine[milestoneRunning].snapshot()
	for _, left := range []string{milestoneDeleting, milestoneGone} {
		for name := range m.machine[left].snapshot() {
			delete(running, name)
		}
	}
	return len(running)
}

// afterRunning also works out where each machine's time went, and whose share is whose.
func (m *machineDeployment) afterRunning(tb *testbed.Testbed) []time.Duration {
	machineRunning := m.machine[milestoneRunning].snapshot()
	infraCreated, infraProvisioned := m.infra[milestoneCreated].snapshot(), m.infra[milestoneProvisioned].snapshot()
	var capiCreate, ours, ourProvision, player, capiRunning []time.Duration
	for name, run := range machineRunning {
		ip := ipReportedAt(tb, name)
		seen, registered := m.registered(name)
		if anyZero(ip, seen, registered, infraCreated[name], infraProvisioned[name]) {
			continue // a step the informers did not show apart (two changes in one event): no breakdown
		}
		capiCreate = append(capiCreate, infraCreated[name].Sub(m.createdAt))
		ours = append(ours, ip.Sub(infraCreated[name]))
		ourProvision = append(ourProvision, infraProvisioned[name].Sub(ip))
		player = append(player, registered.Sub(seen))
		capiRunning = append(capiRunning, run.Sub(latest(infraProvisioned[name], registered)))
	}
	m.breakdown = fmt.Sprintf("Where each machine's time went, p50 / p99 over %d of %d machines: MachineDeployment created to the machine's HarvesterMachine created %s (Cluster API core: MachineSet, then Machines and HarvesterMachines from the template, one after the other); "+
		"to its VM reporting an IP %s (the infrastructure provider: disk, cloud-init Secret, VM; the simulated Harvester boots at once); IP to HarvesterMachine provisioned %s (the infrastructure provider); "+
		"VMI seen running to Node registered Ready %s (the kubelet player); the later of provisioned and Node registered to Machine Running %s (Cluster API core: providerID, nodeRef).",
		len(capiCreate), len(machineRunning), p50p99(capiCreate), p50p99(ours), p50p99(ourProvision), p50p99(player), p50p99(capiRunning))
	return sinceIPReported(tb, machineRunning)
}

// registered is when a kubelet player saw the machine's VMI running and when it registered its
// Node Ready (zero if none did).
func (m *machineDeployment) registered(name string) (seen, registered time.Time) {
	for _, c := range m.clusters {
		if seen, registered = c.kubelets.Registered(name); !registered.IsZero() {
			return seen, registered
		}
	}
	return seen, registered
}

// deletionBreakdown works out where each machine's deletion time went, and whose share is whose.
func (m *machineDeployment) deletionBreakdown() string {
	machineDeleting, machineGone := m.machine[milestoneDeleting].snapshot(), m.machine[milestoneGone].snapshot()
	infraDeleting, infraGone := m.infra[milestoneDeleting].snapshot(), m.infra[milestoneGone].snapshot()
	var capiDelete, capiDrain, ours, capiNode []time.Duration
	for name, done := range machineGone {
		if anyZero(machineDeleting[name], infraDeleting[name], infraGone[name]) || machineDeleting[name].Before(m.deletedAt) {
			continue // deleted by its MachineSet before (one too many), or steps not shown apart
		}
		capiDelete = append(capiDelete, machineDeleting[name].Sub(m.deletedAt))
		capiDrain = append(capiDrain, infraDeleting[name].Sub(machineDeleting[name]))
		ours = append(ours, infraGone[name].Sub(infraDeleting[name]))
		capiNode = append(capiNode, done.Sub(infraGone[name]))
	}
	return fmt.Sprintf("Where each machine's deletion went, p50 / p99 over %d of %d machines: MachineDeployment deleted to the Machine deleted %s (Cluster API core: MachineDeployment, MachineSet, Machines); "+
		"to its HarvesterMachine deleted %s (Cluster API core: Node drained, volumes detached); to the HarvesterMachine gone %s (the infrastructure provider: VM, disks and Secret deleted on the simulated Harvester, finalizer removed); "+
		"to the Machine gone %s (Cluster API core: Node deleted, finalizer removed).",
		len(capiDelete), len(machineGone), p50p99(capiDelete), p50p99(capiDrain), p50p99(ours), p50p99(capiNode))
}

func anyZero(ts ...time.Time) bool {
	for _, t := range ts {
		if t.IsZero() {
			return true
		}
	}
	return false
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func p50p99(ds []time.Duration) string {
	return fmt.Sprintf("%s / %s", percentile(ds, 0.5).Round(time.Millisecond), percentile(ds, 0.99).Round(time.Millisecond))
}

func (m *machineDeployment) deleteAll(ctx context.Context, tb *testbed.Testbed) error {
	var err error
	if m.coreAtDelete, err = scrapeCoreWork(ctx, tb.ClusterAPI.MetricsURL, m.coreHosts(tb)); err != nil {
		return err
	}
	m.deletedAt = time.Now()
	for _, c := range m.clusters {
		_, md := c.spec.MachineDeployment(c.deployment, 0)
		if err := tb.Mgmt.Delete(ctx, md); err != nil {
			return err
		}
	}
	return nil
}

// gone: Cluster API's finalizers keep a MachineDeployment until its MachineSet and Machines are
// gone, and a Machine until its HarvesterMachine is, which ours keeps until its VM and disks are
// deleted.
func (m *machineDeployment) gone(ctx context.Context, tb *testbed.Testbed, _ *deletionCounts) (bool, error) {
	for _, c := range m.clusters {
		if _, found, err := getCAPI(ctx, tb.Mgmt, testbed.MachineDeploymentGVK, c.deployment); found || err != nil {
			return false, err
		}
	}
	return true, nil
}

// machines: each Cluster's control plane Machine beside the n.
func (m *machineDeployment) machines(n int) int { return n + len(m.clusters) }

// harvesterPrefix: the MachineDeployments' machines (the control plane Machines' stay).
func (m *machineDeployment) harvesterPrefix() string { return capiMachineDeployment + "-" }

func (m *machineDeployment) counted(tb *testbed.Testbed) countedKind {
	inDeployments, err := labels.NewRequirement(testbed.DeploymentNameLabel, selection.In, m.deployments())
	if err != nil {
		panic(err) // the names are the bench's own, valid label values
	}
	return countedKind{what: "Machines", config: tb.MgmtConfig, namespace: benchTenant.Namespace, resource: testbed.MachineGVK.GroupVersion().WithResource("machines"),
		selector: labels.NewSelector().Add(*inDeployments).String()}
}

// ownWrites: each template, each MachineDeployment and its deletion.
func (m *machineDeployment) ownWrites(int) map[string]float64 {
	k := float64(len(m.clusters))
	return map[string]float64{"POST harvestermachinetemplates": k, "POST machinedeployments": k, "DELETE machinedeployments": k}
}

// finish measures the Cluster API core manager, then deletes the Cluster (its control plane
// Machine with it) and requires Harvester to be empty.
func (m *machineDeployment) finish(ctx context.Context, tb *testbed.Testbed) (string, error) {
	core, err := m.coreWork(ctx, tb)
	if err != nil {
		return "", err
	}
	rssMB, cpuSeconds, err := processUsage(tb.ClusterAPI.PID())
	if err != nil {
		return "", err
	}
	usage := fmt.Sprintf("The Cluster API core manager: peak RSS %.0f MB, CPU %.1f s since it started (the control plane Machines included).", rssMB, cpuSeconds)
	start := time.Now()
	for _, c := range m.clusters {
		if err := tb.Mgmt.Delete(ctx, c.spec.Cluster()); err != nil {
			return "", err
		}
	}
	left := 0
	err = waitFor(ctx, m.timeout, tb, func() (bool, error) {
		for _, c := range m.clusters {
			if _, found, err := getCAPI(ctx, tb.Mgmt, testbed.ClusterGVK, c.spec.Name); err != nil || found {
				return false, err
			}
		}
		vms, vmis, pvcs, secrets, err := tb.HarvesterLeft(ctx)
		left = vms + vmis + pvcs + secrets
		if err != nil || left > 0 || !m.static {
			return left == 0, err
		}
		// The claims are deleted with their machines; the IPAM provider then lets them go.
		claims, err := m.addressClaims(ctx, tb)
		left = claims
		return claims == 0, err
	})
	if err != nil {
		return "", fmt.Errorf("deleting the Cluster (%d objects left on Harvester, or IPAddressClaims): %w", left, err)
	}
	teardown := fmt.Sprintf("Deleting the Clusters afterwards took %s and left Harvester empty.", time.Since(start).Round(10*time.Millisecond))
	if m.static {
		if err := m.ipam.Err(); err != nil {
			return "", fmt.Errorf("the IPAM player: %w", err)
		}
		teardown += " No IPAddressClaim was left."
	}
	return strings.Join([]string{m.breakdown, m.deletionBreakdown(), core, usage, teardown}, " "), nil
}

// coreHosts names the API servers Cluster API core talks to, by host: the management cluster's
// and the tenants'.
func (m *machineDeployment) coreHosts(tb *testbed.Testbed) map[string]string {
	tenants := "tenant's"
	if len(m.clusters) > 1 {
		tenants = "tenants'"
	}
	hosts := map[string]string{hostOf(tb.MgmtConfig.Host): "management"}
	for _, c := range m.clusters {
		hosts[hostOf(c.tenant.Config.Host)] = tenants
	}
	return hosts
}

// coreWork says what Cluster API core did for the MachineDeployment's machines, creating (until
// the deletion started) and deleting (until now).
func (m *machineDeployment) coreWork(ctx context.Context, tb *testbed.Testbed) (string, error) {
	end, err := scrapeCoreWork(ctx, tb.ClusterAPI.MetricsURL, m.coreHosts(tb))
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Cluster API core's reconciles per machine by controller, creating: %s; deleting: %s.",
		describeCoreWork(m.coreAtCreate, m.coreAtDelete, m.replicas), describeCoreWork(m.coreAtDelete, end, m.replicas)), nil
}

// controlPlaneInitialized reports whether the cluster's control plane Machine runs and Cluster API
// counts its control plane initialized.
func controlPlaneInitialized(ctx context.Context, c client.Client, of *capiCluster) (bool, error) {
	cp, found, err := getCAPI(ctx, c, testbed.MachineGVK, of.controlPlane)
	if !found || machinePhase(cp) != "Running" {
		return false, err
	}
	cluster, found, err := getCAPI(ctx, c, testbed.ClusterGVK, of.spec.Name)
	if !found {
		return false, err
	}
	conditions, _, _ := unstructured.NestedSlice(cluster.Object, "status", "conditions")
	for _, cond := range conditions {
		if m, _ := cond.(map[string]any); m["type"] == "ControlPlaneInitialized" && m["status"] == "True" {
			return true, nil
		}
	}
	return false, nil
}

// getCAPI reads a Cluster API object of the run's namespace; found is false when it does not exist.
func getCAPI(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, name string) (*unstructured.Unstructured, bool, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := c.Get(ctx, client.ObjectKey{Namespace: benchTenant.Namespace, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	return u, err == nil, err
}

func machinePhase(u *unstructured.Unstructured) string {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return phase
}

// addressClaims counts the IPAddressClaims of the run's namespace.
func (m *machineDeployment) addressClaims(ctx context.Context, tb *testbed.Testbed) (int, error) {
	claims := &unstructured.UnstructuredList{}
	claims.SetGroupVersionKind(testbed.IPAddressClaimGVK.GroupVersion().WithKind("IPAddressClaimList"))
	err := tb.Mgmt.List(ctx, claims, client.InNamespace(benchTenant.Namespace))
	return len(claims.Items), err
}

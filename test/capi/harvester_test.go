package capi

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/clusterapi"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/harvesterevents"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/providerconfig"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// capiWorld is a management API server with this provider's CRDs and Cluster API's, the real
// Cluster API core manager, this provider's controllers, and a simulated Harvester with a VM
// network and an image; namespace ns holds the credentials and a ProviderConfig "harvester".
type capiWorld struct {
	t    *testing.T
	ctx  context.Context
	c    client.Client
	hv   *sim.Harvester
	capi *testbed.ClusterAPI
	// cfg and scheme reach the management API server, to start the provider again.
	cfg    *rest.Config
	scheme *k8sruntime.Scheme
	// stopProvider stops this provider's manager and waits until it has stopped.
	stopProvider func()
}

const ns = "tenants"

// startCAPIWorld starts a simulated Harvester and a management cluster on it; the management API
// server also serves the CRDs of the directories moreCRDs.
func startCAPIWorld(t *testing.T, moreCRDs ...string) *capiWorld {
	t.Helper()
	return startCAPIWorldWith(t, nil, moreCRDs...)
}

// startCAPIWorldWith is startCAPIWorld with the provider changed by opts.
func startCAPIWorldWith(t *testing.T, opts []providerOption, moreCRDs ...string) *capiWorld {
	t.Helper()
	return startCAPIWorldWithin(t, 4*time.Minute, opts, moreCRDs...)
}

// startCAPIWorldWithin is startCAPIWorldWith for a test that may take up to timeout.
func startCAPIWorldWithin(t *testing.T, timeout time.Duration, opts []providerOption, moreCRDs ...string) *capiWorld {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return startManagementCluster(ctx, t, startSimulatedHarvester(ctx, t), moreCRDs, opts...)
}

// startSimulatedHarvester starts the simulated Harvester with namespace vms, its VM network vlan40
// and image ubuntu.
func startSimulatedHarvester(ctx context.Context, t *testing.T) *sim.Harvester {
	t.Helper()
	hv, err := sim.StartHarvester(ctx, sim.Options{Sim: sim.Config{BootDelay: 200 * time.Millisecond, IPDelay: 100 * time.Millisecond, CloneDelay: 300 * time.Millisecond}})
	if err != nil {
		t.Fatalf("start the simulated Harvester: %v", err)
	}
	t.Cleanup(func() { _ = hv.Stop() })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(hv.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vms"}}))
	must(testbed.InstallGuestReader(ctx, hv.Client))
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(sim.NetworkAttachmentDefinitionGVK)
	nad.SetNamespace("vms")
	nad.SetName("vlan40")
	nad.SetAnnotations(map[string]string{sim.AnnotationRoute: `{"mode":"auto","cidr":"10.40.0.0/24"}`})
	_ = unstructured.SetNestedField(nad.Object, `{"cniVersion":"0.3.1","type":"bridge","bridge":"mgmt-br","vlan":40}`, "spec", "config")
	must(hv.Client.Create(ctx, nad))
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	image.SetNamespace("vms")
	image.SetName("ubuntu")
	_ = unstructured.SetNestedField(image.Object, "https://example.invalid/ubuntu.qcow2", "spec", "url")
	must(hv.Client.Create(ctx, image))
	return hv
}

// startManagementCluster starts a management cluster on Harvester hv: an API server with the CRDs,
// the real Cluster API core manager and this provider; namespace ns holds the credentials and a
// ProviderConfig "harvester" (platform configuration, installed on every management cluster).
func startManagementCluster(ctx context.Context, t *testing.T, hv *sim.Harvester, moreCRDs []string, providerOpts ...providerOption) *capiWorld {
	t.Helper()
	assets := requireAssets(t)
	env := &envtest.Environment{ErrorIfCRDPathMissing: true, CRDDirectoryPaths: append([]string{
		testbed.ClusterAPICRDs(assets), filepath.Join(repoRoot(), "config", "crd", "bases"), filepath.Join(repoRoot(), "config", "crd", "infrastructure"),
	}, moreCRDs...)}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start the management API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	capi := startCoreManager(ctx, t, testbed.ClusterAPIOptions{Assets: assets, Config: cfg, WorkDir: t.TempDir()})
	w := &capiWorld{t: t, ctx: ctx, c: c, hv: hv, capi: capi, cfg: cfg, scheme: scheme}
	w.stopProvider = startProvider(ctx, t, cfg, scheme, providerOpts...)

	// Management cluster: the credentials, a ProviderConfig, and the tenant cluster's objects.
	w.must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	w.must(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "harvester-kubeconfig"}, Data: map[string][]byte{"kubeconfig": hv.Kubeconfig}}))
	w.must(c.Create(ctx, &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "harvester"}, Spec: v1alpha1.ProviderConfigSpec{
		Provider: v1alpha1.ProviderTypeHarvester, CredentialsRef: &v1alpha1.SecretReference{Name: "harvester-kubeconfig"},
		Harvester: &v1alpha1.HarvesterProviderConfig{Namespace: "vms", NetworkName: "vms/vlan40", ImageName: "vms/ubuntu"},
	}}))
	return w
}

// playTenant starts the tenant cluster's API server and plays its parts that stand between the
// provider and its Nodes: the kubelets of the VMs in vms, and the ClusterResourceSet with
// Harvester's cloud provider (from the delivered credentials alone); all stop with the test.
func (w *capiWorld) playTenant() (*testbed.Tenant, *testbed.CloudProvider) {
	w.t.Helper()
	tenantAPI, err := testbed.StartTenant(w.ctx, w.c, ns, tenant.Name)
	w.t.Cleanup(func() { _ = tenantAPI.Stop() })
	w.must(err)
	kubelets, err := testbed.PlayKubelets(w.ctx, w.hv.Config, "vms", tenantAPI)
	w.must(err)
	w.t.Cleanup(kubelets.Stop)
	cloudProvider := testbed.PlayCloudProvider(w.ctx, w.c, ns, tenant.Name, tenantAPI)
	w.t.Cleanup(cloudProvider.Stop)
	return tenantAPI, cloudProvider
}

func (w *capiWorld) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

// tenant is the tenant cluster of the tests: Cluster "tenant" with its HarvesterCluster (endpoint
// given) on ProviderConfig "harvester" of the namespace, machines of 2 CPUs, 2Gi and a 10Gi root
// disk.
var tenant = testbed.TenantCluster{Namespace: ns, Name: "tenant", ProviderConfig: infrav1.ProviderConfigReference{Name: "harvester"},
	Endpoint:    infrav1.APIEndpoint{Host: "10.40.0.250", Port: 6443},
	MachineSpec: infrav1.HarvesterMachineSpec{CPU: 2, Memory: resource.MustParse("2Gi"), RootDisk: infrav1.RootDisk{Size: resource.MustParse("10Gi")}},
}

// tenantCluster creates the tenant Cluster with its HarvesterCluster (with the failure domains
// given) and the bootstrap data Secret of its machines.
func (w *capiWorld) tenantCluster(failureDomains ...infrav1.HarvesterFailureDomain) *unstructured.Unstructured {
	cluster, err := createTenantCluster(w.ctx, w.c, tenant.ProviderConfig, failureDomains...)
	w.must(err)
	return cluster
}

// createTenantCluster creates the tenant Cluster with its HarvesterCluster (on ProviderConfig pc,
// with the failure domains given) and the bootstrap data Secret of its machines.
func createTenantCluster(ctx context.Context, c client.Client, pc infrav1.ProviderConfigReference, failureDomains ...infrav1.HarvesterFailureDomain) (*unstructured.Unstructured, error) {
	tc := tenant
	tc.ProviderConfig, tc.FailureDomains = pc, failureDomains
	return tc.Cluster(), testbed.CreateAll(ctx, c, tc.ClusterObjects()...)
}

// harvesterLeft counts what is left on Harvester: VMs, disks, and cloud-init Secrets of machines.
func (w *capiWorld) harvesterLeft() (vms, disks, secrets int) {
	vmList, pvcs, secretList := &kubevirtv1.VirtualMachineList{}, &corev1.PersistentVolumeClaimList{}, &corev1.SecretList{}
	w.must(w.hv.Client.List(w.ctx, vmList, client.InNamespace("vms")))
	w.must(w.hv.Client.List(w.ctx, pvcs, client.InNamespace("vms")))
	w.must(w.hv.Client.List(w.ctx, secretList, client.InNamespace("vms"), client.MatchingLabels{harvester.LabelOwnerKind: clusterapi.OwnerKindHarvesterMachine}))
	return len(vmList.Items), len(pvcs.Items), len(secretList.Items)
}

// machine creates a HarvesterMachine and its Machine of the tenant cluster (see createMachine).
func (w *capiWorld) machine(name, failureDomain string) *unstructured.Unstructured {
	machine, err := createMachine(w.ctx, w.c, name, failureDomain)
	w.must(err)
	return machine
}

// createMachine creates Machine name of the tenant cluster in failureDomain ("" for none), whose
// bootstrap data is given, with its HarvesterMachine of the same name.
func createMachine(ctx context.Context, c client.Client, name, failureDomain string) (*unstructured.Unstructured, error) {
	hm, machine := tenant.Machine(name, failureDomain)
	return machine, testbed.CreateAll(ctx, c, hm, machine)
}

// infrastructureProvisioned checks that Cluster API has marked the Cluster's infrastructure
// provisioned (from its HarvesterCluster).
func infrastructureProvisioned(ctx context.Context, c client.Client, cluster *unstructured.Unstructured) error {
	if err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		return err
	}
	if ok, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "infrastructureProvisioned"); !ok {
		return fmt.Errorf("Cluster status.initialization %v", cluster.Object["status"])
	}
	return nil
}

// machineOnHarvester checks that the machine's VM (of the Machine's name) is in Harvester
// namespace hvNamespace, that Cluster API copied its providerID (harvester://<VM UID>) and
// addresses (InternalIP on the VM network first, then Hostname) to the Machine, and that the
// HarvesterMachine says it is provisioned. It fills vm and hm.
func machineOnHarvester(ctx context.Context, c, hv client.Client, hvNamespace string, machine *unstructured.Unstructured, vm *kubevirtv1.VirtualMachine, hm *infrav1.HarvesterMachine) error {
	if err := hv.Get(ctx, types.NamespacedName{Namespace: hvNamespace, Name: machine.GetName()}, vm); err != nil {
		return err
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(machine), machine); err != nil {
		return err
	}
	providerID, _, _ := unstructured.NestedString(machine.Object, "spec", "providerID")
	if want := harvester.ProviderIDPrefix + string(vm.UID); providerID != want {
		return fmt.Errorf("Machine spec.providerID %q, want %q", providerID, want)
	}
	addresses, _, _ := unstructured.NestedSlice(machine.Object, "status", "addresses")
	if len(addresses) < 2 || !strings.HasPrefix(fmt.Sprint(addresses[0].(map[string]any)["address"]), "10.40.0.") {
		return fmt.Errorf("Machine status.addresses %v, want the VM's InternalIP first and its Hostname", addresses)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(machine), hm); err != nil {
		return err
	}
	if hm.Status.Initialization.Provisioned == nil || !*hm.Status.Initialization.Provisioned {
		return fmt.Errorf("HarvesterMachine status.initialization.provisioned %v", hm.Status.Initialization.Provisioned)
	}
	return nil
}

// clusterGone checks that the Cluster is gone.
func clusterGone(ctx context.Context, c client.Client, cluster *unstructured.Unstructured) error {
	switch err := c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); {
	case err == nil:
		return fmt.Errorf("Cluster still there, finalizers %v", cluster.GetFinalizers())
	case !apierrors.IsNotFound(err):
		return err
	}
	return nil
}

// clusterAndMachinesGone checks that the Cluster is gone and its machines' VMs, disks and
// cloud-init Secrets too.
func (w *capiWorld) clusterAndMachinesGone(cluster *unstructured.Unstructured) error {
	if err := clusterGone(w.ctx, w.c, cluster); err != nil {
		return err
	}
	if vms, disks, secrets := w.harvesterLeft(); vms+disks+secrets > 0 {
		return fmt.Errorf("%d VMs, %d disks and %d cloud-init Secrets left on Harvester", vms, disks, secrets)
	}
	return nil
}

// labelNode sets label key=value on a node of the simulated Harvester, as its administrator would.
func (w *capiWorld) labelNode(node, key, value string) {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	w.must(w.hv.Client.Patch(w.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch))))
}

// readyCondition waits until the HarvesterMachine's Ready condition has reason and its message
// says all of mentions, and returns the HarvesterMachine.
func (w *capiWorld) readyCondition(name, reason string, mentions ...string) *infrav1.HarvesterMachine {
	w.t.Helper()
	hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	w.waitCondition(hm, func() []metav1.Condition { return hm.Status.Conditions }, infrav1.ConditionReady, reason, mentions...)
	return hm
}

// waitCondition waits for obj's condition condType (conditions reads them from obj once it is
// read) to have that reason and to mention each of mentions, and returns it.
func (w *capiWorld) waitCondition(obj client.Object, conditions func() []metav1.Condition, condType, reason string, mentions ...string) *metav1.Condition {
	w.t.Helper()
	var cond *metav1.Condition
	waitFor(w.ctx, w.t, w.capi, fmt.Sprintf("%s %s %s", obj.GetName(), condType, reason), func() error {
		w.must(w.c.Get(w.ctx, client.ObjectKeyFromObject(obj), obj))
		cond = findCondition(conditions(), condType)
		if cond == nil || cond.Reason != reason {
			return fmt.Errorf("%s %+v", condType, cond)
		}
		for _, m := range mentions {
			if !strings.Contains(cond.Message, m) {
				return fmt.Errorf("%s message %q does not say %q", condType, cond.Message, m)
			}
		}
		return nil
	})
	return cond
}

// TestClusterAPIMachineOnHarvester runs the real Cluster API core manager, this provider's
// HarvesterCluster and HarvesterMachine controllers, and the simulated Harvester: a Cluster with a
// HarvesterCluster (endpoint given, failure domains of labelled Harvester nodes) and a Machine in
// one of them whose bootstrap data Secret is given. Cluster API marks the infrastructure
// provisioned from the HarvesterCluster; the machine's VM runs on Harvester, on the node of its
// failure domain, and Cluster API copies the HarvesterMachine's providerID (harvester://<VM UID>,
// what Harvester's cloud provider sets on the Node), addresses and failure domain to the Machine.
// A Machine in a failure domain the HarvesterCluster lacks gets nothing and FailureDomainNotFound;
// one in a failure domain no node is in gets a VM that waits, diagnosed VMUnschedulable; a running
// machine whose Machine moves to another failure domain stays where it is. A HarvesterMachine
// Cluster API has not named its Machine for yet has its place recorded, and nothing else. A
// paused Cluster pauses the HarvesterMachine: deleting it then leaves its VM alone until the
// Cluster resumes.
// Deleting the Cluster leaves Harvester empty.
func TestClusterAPIMachineOnHarvester(t *testing.T) {
	kubeadmCRDs, err := testbed.KubeadmCRDs(requireAssets(t), t.TempDir()) // a Machine names a KubeadmConfig
	if err != nil {
		t.Fatal(err)
	}
	w := startCAPIWorld(t, kubeadmCRDs)
	ctx, c, hv, capi, must := w.ctx, w.c, w.hv, w.capi, w.must
	// Harvester's nodes in zones a and b; no node is in zone d.
	const zone = "topology.kubernetes.io/zone"
	w.labelNode("harvester-node-1", zone, "zone-a")
	w.labelNode("harvester-node-2", zone, "zone-b")
	inZone := func(z string) infrav1.HarvesterFailureDomain {
		return infrav1.HarvesterFailureDomain{Name: z, NodeSelector: map[string]string{zone: z}}
	}
	cluster := w.tenantCluster(inZone("zone-a"), inZone("zone-b"), inZone("zone-d"))
	machine := w.machine("tenant-md-0", "zone-b")

	waitFor(ctx, t, capi, "Cluster API to see the Harvester infrastructure provisioned", func() error {
		return infrastructureProvisioned(ctx, c, cluster)
	})
	var vm kubevirtv1.VirtualMachine
	hm := &infrav1.HarvesterMachine{}
	waitFor(ctx, t, capi, "the Machine to carry the VM's providerID and addresses", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", machine, &vm, hm)
	})
	if vm.Labels[harvester.LabelOwnerKind] != clusterapi.OwnerKindHarvesterMachine {
		t.Fatalf("VM labels %v, want %s=%s", vm.Labels, harvester.LabelOwnerKind, clusterapi.OwnerKindHarvesterMachine)
	}

	// The Machine's failure domain: the VM requires its nodes' label, runs on the node in zone-b,
	// and the HarvesterMachine reports it, which Cluster API copies to the Machine.
	if hm.Status.FailureDomain != "zone-b" {
		t.Fatalf("HarvesterMachine status.failureDomain %q, want zone-b", hm.Status.FailureDomain)
	}
	if na := vm.Spec.Template.Spec.Affinity.NodeAffinity; na == nil || fmt.Sprint(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) != fmt.Sprint([]corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-b"}}}}}) {
		t.Fatalf("VM node affinity %+v, want zone-b required", na)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	must(hv.Client.Get(ctx, client.ObjectKeyFromObject(&vm), vmi))
	if vmi.Status.NodeName != "harvester-node-2" {
		t.Fatalf("VMI runs on %q, want harvester-node-2 (zone-b)", vmi.Status.NodeName)
	}
	waitFor(ctx, t, capi, "Cluster API to copy the failure domain to the Machine", func() error {
		must(c.Get(ctx, client.ObjectKeyFromObject(machine), machine))
		if fd, _, _ := unstructured.NestedString(machine.Object, "status", "failureDomain"); fd != "zone-b" {
			return fmt.Errorf("Machine status.failureDomain %q", fd)
		}
		return nil
	})

	// A failure domain the HarvesterCluster does not define: nothing is created, and the
	// HarvesterMachine says what to fix.
	w.machine("tenant-md-1", "zone-x")
	w.readyCondition("tenant-md-1", infrav1.ReasonFailureDomainNotFound,
		`spec.failureDomain "zone-x" of Machine tenants/tenant-md-1`, "it defines zone-a, zone-b, zone-d", `add a failure domain named "zone-x"`)
	if err := hv.Client.Get(ctx, types.NamespacedName{Namespace: "vms", Name: "tenant-md-1"}, &kubevirtv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
		t.Fatalf("VM of a machine in an unknown failure domain: %v", err)
	}
	if pvcs := (&corev1.PersistentVolumeClaimList{}); hv.Client.List(ctx, pvcs, client.InNamespace("vms")) != nil || len(pvcs.Items) != 1 {
		t.Fatalf("disks on Harvester: %d, want the one of tenant-md-0", len(pvcs.Items))
	}

	// A HarvesterMachine of the Cluster that Cluster API has not named a Machine for (as a
	// MachineSet's, between their two creates): its place is recorded at once, with the
	// finalizer, so that no write to it is left between the Machine and its VM; nothing is made
	// for it and nothing is reported yet. Deleted so, it is released, and Harvester is unchanged.
	ahead, _ := tenant.Machine("tenant-ahead", "")
	ahead.Labels = map[string]string{testbed.ClusterNameLabel: tenant.Name}
	must(c.Create(ctx, ahead))
	waitFor(ctx, t, capi, "the place of a HarvesterMachine without its Machine to be recorded", func() error {
		must(c.Get(ctx, client.ObjectKeyFromObject(ahead), ahead))
		p, err := v1alpha1.DecodePlacement(ahead.Annotations)
		if err != nil || p == nil || !slices.Contains(ahead.Finalizers, infrav1.HarvesterMachineFinalizer) {
			return fmt.Errorf("annotations %v (%w), finalizers %v", ahead.Annotations, err, ahead.Finalizers)
		}
		if p.Namespace != "vms" || p.Name != "tenant-ahead" || p.ClusterID == "" {
			t.Fatalf("recorded place %+v, want vms/tenant-ahead on the Harvester cluster", *p)
		}
		return nil
	})
	if len(ahead.Status.Conditions) != 0 || ahead.Spec.ProviderID != "" {
		t.Fatalf("a HarvesterMachine without its Machine: conditions %v, providerID %q; want nothing reported or made", ahead.Status.Conditions, ahead.Spec.ProviderID)
	}
	must(c.Delete(ctx, ahead))
	waitFor(ctx, t, capi, "the HarvesterMachine without its Machine to be released", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ahead), ahead); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%w), finalizers %v", err, ahead.Finalizers)
		}
		return nil
	})
	if err := hv.Client.Get(ctx, types.NamespacedName{Namespace: "vms", Name: "tenant-ahead"}, &kubevirtv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
		t.Fatalf("VM of a HarvesterMachine without its Machine: %v", err)
	}
	if pvcs := (&corev1.PersistentVolumeClaimList{}); hv.Client.List(ctx, pvcs, client.InNamespace("vms")) != nil || len(pvcs.Items) != 1 {
		t.Fatalf("disks on Harvester: %d, want the one of tenant-md-0", len(pvcs.Items))
	}

	// A placement record the tenant wrote itself, naming another Harvester namespace: the provider
	// makes nothing there, nor anywhere, and says which record it refuses; deleted, the
	// HarvesterMachine deletes nothing.
	must(hv.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vms-other"}}))
	own, err := v1alpha1.DecodePlacement(hm.Annotations)
	if err != nil || own == nil {
		t.Fatalf("the placement record of tenant-md-0: %v (%v)", own, err)
	}
	forged, forgedMachine := tenant.Machine("tenant-forged", "")
	forged.Annotations = map[string]string{infrav1.AnnotationPlacement: v1alpha1.EncodePlacement(v1alpha1.Placement{
		ClusterID: own.ClusterID, Server: own.Server, Namespace: "vms-other", Name: "tenant-forged"})}
	must(testbed.CreateAll(ctx, c, forged, forgedMachine))
	w.readyCondition("tenant-forged", infrav1.ReasonPlacementRefused, "records VM vms-other/tenant-forged", "made only in vms/tenant-forged", "kubectl annotate harvestermachine -n tenants tenant-forged")
	must(c.Delete(ctx, forgedMachine))
	waitFor(ctx, t, capi, "the HarvesterMachine with a forged placement record to go", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(forged), forged); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%w), finalizers %v", err, forged.Finalizers)
		}
		return nil
	})
	for _, list := range []client.ObjectList{&kubevirtv1.VirtualMachineList{}, &corev1.PersistentVolumeClaimList{}, &corev1.SecretList{}} {
		must(hv.Client.List(ctx, list, client.InNamespace("vms-other")))
		if n := meta.LenList(list); n > 0 {
			t.Fatalf("%T in Harvester namespace vms-other: %d, want none", list, n)
		}
	}
	if pvcs := (&corev1.PersistentVolumeClaimList{}); hv.Client.List(ctx, pvcs, client.InNamespace("vms")) != nil || len(pvcs.Items) != 1 {
		t.Fatalf("disks on Harvester: %d, want the one of tenant-md-0", len(pvcs.Items))
	}

	// A failure domain no Harvester node is in: the VM waits to be scheduled, and the engine's
	// diagnosis names the labels to give a node.
	w.machine("tenant-md-2", "zone-d")
	w.readyCondition("tenant-md-2", infrav1.ReasonVMUnschedulable, "didn't match Pod's node affinity/selector", zone+"=zone-d", "label the nodes")

	// A Machine whose bootstrap data is not written yet (its bootstrap provider's config named,
	// Cluster API's validation asks for one or the other): nothing is made, and the
	// HarvesterMachine says what it waits for. The bootstrap provider naming the Secret (a change
	// of the Machine's spec, seen by its metadata watch) wakes it at once, well before it would
	// look again.
	waiting, waitingMachine := tenant.Machine("tenant-md-3", "")
	must(unstructured.SetNestedMap(waitingMachine.Object, map[string]any{"configRef": map[string]any{
		"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfig", "name": "tenant-md-3",
	}}, "spec", "bootstrap"))
	must(testbed.CreateAll(ctx, c, waiting, waitingMachine))
	w.readyCondition("tenant-md-3", infrav1.ReasonWaitingForBootstrapData, "spec.bootstrap.dataSecretName of Machine tenants/tenant-md-3")
	if err := hv.Client.Get(ctx, types.NamespacedName{Namespace: "vms", Name: "tenant-md-3"}, &kubevirtv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
		t.Fatalf("VM of a machine without bootstrap data: %v", err)
	}
	must(c.Patch(ctx, waitingMachine, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"bootstrap":{"dataSecretName":%q}}}`, tenant.BootstrapSecretName())))))
	named := time.Now()
	waitFor(ctx, t, capi, "the VM of tenant-md-3 once its bootstrap data is named", func() error {
		return hv.Client.Get(ctx, types.NamespacedName{Namespace: "vms", Name: "tenant-md-3"}, &kubevirtv1.VirtualMachine{})
	})
	if took := time.Since(named); took > requeue.ProviderConfigRetry/2 {
		t.Fatalf("the VM came %s after the Machine named its bootstrap data: the Machine's watch did not wake its HarvesterMachine", took)
	}

	// A machine whose VM exists stays where it runs: its Machine moved to a failure domain the
	// HarvesterCluster lacks neither stops it nor changes its VM or its status.failureDomain.
	generation := vm.Generation
	must(c.Patch(ctx, machine, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"failureDomain":"zone-x"}}`))))
	deadline := time.Now().Add(3 * time.Second) // the Machine's watch reconciles the HarvesterMachine at once
	for time.Now().Before(deadline) {
		must(c.Get(ctx, client.ObjectKeyFromObject(hm), hm))
		must(hv.Client.Get(ctx, client.ObjectKeyFromObject(&vm), &vm))
		if cond := findCondition(hm.Status.Conditions, infrav1.ConditionReady); cond == nil || cond.Reason != infrav1.ReasonVMRunning || hm.Status.FailureDomain != "zone-b" || vm.Generation != generation {
			t.Fatalf("after its Machine moved to zone-x: Ready %+v, status.failureDomain %q, VM generation %d (was %d)", cond, hm.Status.FailureDomain, vm.Generation, generation)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A paused Cluster pauses its HarvesterMachine.
	must(c.Patch(ctx, cluster, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`))))
	waitFor(ctx, t, capi, "the HarvesterMachine to say it is paused", func() error {
		must(c.Get(ctx, client.ObjectKeyFromObject(hm), hm))
		if cond := findCondition(hm.Status.Conditions, infrav1.ConditionPaused); cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("Paused condition %v", cond)
		}
		return nil
	})
	// Paused means left alone, even when deleted: the VM stays until the Cluster is resumed.
	must(c.Delete(ctx, hm))
	time.Sleep(3 * time.Second)
	must(hv.Client.Get(ctx, client.ObjectKeyFromObject(&vm), &vm))
	must(c.Get(ctx, client.ObjectKeyFromObject(hm), hm))
	if vm.DeletionTimestamp != nil || len(hm.Finalizers) == 0 {
		t.Fatalf("while paused, VM deletion timestamp %v and HarvesterMachine finalizers %v: want the VM kept and the finalizer held", vm.DeletionTimestamp, hm.Finalizers)
	}
	// Annotation skip-cleanup, which a tenant can write, does not leave a VM or credentials that
	// the provider can delete: it counts only for a blocked deletion (the platform operator's
	// flag aside).
	skipCleanup := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, infrav1.AnnotationSkipHarvesterCleanup)))
	must(c.Patch(ctx, hm, skipCleanup))
	must(c.Patch(ctx, &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}}, skipCleanup))
	must(c.Patch(ctx, cluster, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":false}}`))))

	// Deleting the Cluster deletes its Machine, the HarvesterMachine and its VM, disks and Secret.
	must(c.Delete(ctx, cluster))
	waitFor(ctx, t, capi, "the Cluster and everything on Harvester to go", func() error {
		return w.clusterAndMachinesGone(cluster)
	})
	w.waitEvent("HarvesterMachine", "tenant-md-0", infrav1.ReasonCleanupNotSkipped, "only when its deletion is blocked", "--"+options.SkipCleanupFlag)
	w.waitEvent("HarvesterCluster", tenant.Name, infrav1.ReasonCleanupNotSkipped, "the tenant cluster's Harvester credentials")
}

// waitEvent waits for an event of reason about the object of kind and name in namespace ns whose
// note says all of mentions.
func (w *capiWorld) waitEvent(kind, name, reason string, mentions ...string) {
	w.t.Helper()
	waitFor(w.ctx, w.t, w.capi, fmt.Sprintf("a %s event of %s %s", reason, kind, name), func() error {
		list := &eventsv1.EventList{}
		if err := w.c.List(w.ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == reason && e.Regarding.Kind == kind && e.Regarding.Name == name && containsAll(e.Note, mentions) {
				return nil
			}
		}
		return fmt.Errorf("no such event among %d", len(list.Items))
	})
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// startProvider starts this provider's controllers in the test's process, as
// internal/controller/setup wires them (ProviderConfig checks, HarvesterCluster, HarvesterMachine
// and HarvesterMachineTemplate), each start with nothing in memory. It returns a function that stops them and waits until they have stopped.
// guestTokenOverlap is how long the token a re-issue replaced keeps working in the tests'
// providers: short, so that tests that re-issue see the old one refused soon; the rotation test
// makes it long enough for the new one to reach a running cloud provider (tokenOverlap).
const guestTokenOverlap = 2 * time.Second

func startProvider(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *k8sruntime.Scheme, opts ...providerOption) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Client:     client.Options{Cache: &client.CacheOptions{Unstructured: true}}, // as cmd/manager
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}})
	if err != nil {
		t.Fatal(err)
	}
	events := &harvesterevents.HarvesterEvents{}
	clusters := harvester.NewClusters(&clustercache.Cache{SecretReader: mgr.GetAPIReader(), Context: ctx}, events)
	recorder := mgr.GetEventRecorder("butler-provider-harvester")
	pcr := &providerconfig.Reconciler{Client: mgr.GetClient(), SecretReader: mgr.GetAPIReader(), Harvester: clusters, Recorder: recorder,
		CredentialsPoll: 500 * time.Millisecond, NotReadyRetry: 500 * time.Millisecond, RefusalRecheckGap: 500 * time.Millisecond}
	if err := pcr.SetupWithManager(ctx, mgr, controller.Options{}); err != nil {
		t.Fatal(err)
	}
	hmr := &clusterapi.HarvesterMachineReconciler{Client: mgr.GetClient(), LiveReader: mgr.GetAPIReader(), Harvester: clusters, HarvesterEvents: events, Recorder: recorder, Preflight: pcr,
		PollInterval: 2 * time.Second, StartLimits: harvester.StartLimits{IPReport: time.Minute}}
	hcr := &clusterapi.HarvesterClusterReconciler{Client: mgr.GetClient(), Recorder: recorder, Preflight: pcr,
		Harvester: clusters, LiveReader: mgr.GetAPIReader(), GuestRecheckInterval: 2 * time.Second, GuestTokenOverlap: guestTokenOverlap,
		OwnershipLease: ownershipLease}
	for _, o := range opts {
		o(hmr, hcr)
	}
	if why := clusterapi.Unavailable(ctx, mgr); why != "" {
		t.Fatalf("Cluster API controllers off: %s", why)
	}
	if err := hmr.SetupWithManager(ctx, mgr, controller.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := hcr.SetupWithManager(ctx, mgr, controller.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := (&clusterapi.HarvesterMachineTemplateReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr, controller.Options{}); err != nil {
		t.Fatal(err)
	}
	mgrCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(mgrCtx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// ownershipLease is the tenant clusters' ownership Lease duration in the tests: a hand-over waits
// for it.
const ownershipLease = 20 * time.Second

// providerOption changes the provider a test runs on a management cluster.
type providerOption func(*clusterapi.HarvesterMachineReconciler, *clusterapi.HarvesterClusterReconciler)

// tokenOverlap has the provider keep a replaced guest token working for d.
func tokenOverlap(d time.Duration) providerOption {
	return func(_ *clusterapi.HarvesterMachineReconciler, hcr *clusterapi.HarvesterClusterReconciler) {
		hcr.GuestTokenOverlap = d
	}
}

// clockOff runs the provider's ownership Leases on a clock d away from the machine's, as another
// management cluster's clock may be.
func clockOff(d time.Duration) providerOption {
	return func(_ *clusterapi.HarvesterMachineReconciler, hcr *clusterapi.HarvesterClusterReconciler) {
		hcr.Clock = offsetClock(d)
	}
}

// offsetClock is the real clock, d away.
type offsetClock time.Duration

func (c offsetClock) Now() time.Time                  { return time.Now().Add(time.Duration(c)) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func findCondition(conditions []metav1.Condition, t string) *metav1.Condition {
	for i := range conditions {
		if conditions[i].Type == t {
			return &conditions[i]
		}
	}
	return nil
}

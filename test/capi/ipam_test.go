package capi

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// staticPool is the InClusterIPPool of the IPAM tests: three addresses of vlan40.
var staticPool = infrav1.IPPoolReference{APIGroup: testbed.InClusterIPPoolGVK.Group, Kind: testbed.InClusterIPPoolGVK.Kind, Name: "vlan40-static"}

// TestClusterAPIIPAMStaticAddresses runs a MachineDeployment whose machines take their addresses
// from an InClusterIPPool through Cluster API's IPAM contract, their NIC as the talos-static
// flavour describes it (rendered by clusterctl) (the real core manager and its
// webhooks; testbed.PlayIPAM plays the in-cluster IPAM provider). Each machine's IPAddressClaim is
// owned by its HarvesterMachine and carries the cluster's name; its VM is made with the NIC's MAC
// the provider chose, the guest gets the address as network configuration matched by that MAC,
// and the Machine reaches Running with its Node and the pool's address, which is the Node's
// InternalIP. One machine more than the
// pool has addresses waits, saying the pool is exhausted, and gets no VM; scaling down releases the
// addresses of the machines deleted, once their VMs are gone, and the waiting machine takes one. A
// machine with a second NIC on another network gets both, the second by DHCP, and its Node the
// first's only (testbed.CloudProvider selects Node addresses as Harvester's cloud provider does);
// with the HarvesterCluster's management network set to the second's, the machine is Degraded
// (ManagementNetworkMismatch) and a cloud provider run with it gives the Node the second's. A pool
// kind no CRD serves is refused before anything is claimed. A machine whose image ignores the
// network configuration (the simulated guest takes a DHCP lease) runs, Degraded with
// GuestAddressMismatch. Deleting the Cluster leaves no claim, address or
// VM.
func TestClusterAPIIPAMStaticAddresses(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t, testbed.InClusterIPPoolCRDs(repoRoot()))
	ctx, c, hv := w.ctx, w.c, w.hv
	tenantAPI, cloudProvider := w.playTenant()
	ipam := w.playIPAM()
	createStaticPool(ctx, w)
	storage := &unstructured.Unstructured{}
	storage.SetGroupVersionKind(sim.NetworkAttachmentDefinitionGVK)
	storage.SetNamespace("vms")
	storage.SetName("storage")
	storage.SetAnnotations(map[string]string{sim.AnnotationRoute: `{"mode":"auto","cidr":"10.60.0.0/24"}`})
	_ = unstructured.SetNestedField(storage.Object, `{"cniVersion":"0.3.1","type":"bridge","bridge":"storage-br","vlan":60}`, "spec", "config")
	w.must(hv.Client.Create(ctx, storage))

	early := w.releasedWhileTheirVMsExist()
	cluster := w.tenantCluster()
	cpInfra, cp := tenant.ControlPlaneMachine("tenant-cp-0") // by DHCP, as before
	w.must(testbed.CreateAll(ctx, c, cpInfra, cp))
	static := tenant
	static.MachineSpec.Interfaces = talosStaticInterfaces(ctx, t)
	template, md := static.MachineDeployment("tenant-static", 2)
	w.must(testbed.CreateAll(ctx, c, template, md))

	inPool := netip.MustParsePrefix("10.40.0.100/30")
	machinesOf := func(deployment string) []unstructured.Unstructured {
		machines := &unstructured.UnstructuredList{}
		machines.SetGroupVersionKind(testbed.MachineGVK.GroupVersion().WithKind("MachineList"))
		w.must(c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{testbed.DeploymentNameLabel: deployment}))
		return machines.Items
	}
	// running waits for want Machines of the deployment Running with a Node and an address of the
	// pool, and returns each one's address.
	running := func(want int) map[string]string {
		t.Helper()
		var got map[string]string
		waitFor(ctx, t, w.capi, fmt.Sprintf("%d Machines Running with their Node and an address of the pool", want), func() error {
			got = map[string]string{}
			for _, m := range machinesOf(md.GetName()) {
				phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
				node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
				addr := machineAddressIn(m, inPool)
				if m.GetDeletionTimestamp() != nil {
					return fmt.Errorf("Machine %s is being deleted", m.GetName())
				}
				if phase != "Running" || node == "" || addr == "" {
					return fmt.Errorf("Machine %s: phase %q, nodeRef %q, address of the pool %q", m.GetName(), phase, node, addr)
				}
				got[m.GetName()] = addr
			}
			if len(got) != want {
				return fmt.Errorf("%d Machines, want %d", len(got), want)
			}
			return nil
		})
		return got
	}
	two := running(2)
	addresses := map[string]bool{}
	for machine, addr := range two {
		if addresses[addr] {
			t.Fatalf("two machines have address %s: %v", addr, two)
		}
		addresses[addr] = true
		w.checkStaticMachine(machine, addr)
		w.nodeInternalIP(tenantAPI, machine, addr)
	}

	// One machine more than the pool has addresses: the fourth waits, and says why.
	w.must(c.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":4}}`))))
	var waiting string
	waitFor(ctx, t, w.capi, "a machine waiting for an address of the exhausted pool", func() error {
		for _, m := range machinesOf(md.GetName()) {
			hm := &infrav1.HarvesterMachine{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.GetName()}, hm); err != nil {
				continue
			}
			if cond := findCondition(hm.Status.Conditions, infrav1.ConditionReady); cond != nil && cond.Reason == infrav1.ReasonIPPoolExhausted {
				if !strings.Contains(cond.Message, staticPool.Name) || !strings.Contains(cond.Message, "no address free") {
					return fmt.Errorf("Ready %+v does not name the pool and what is wrong", cond)
				}
				waiting = hm.Name
				return nil
			}
		}
		return fmt.Errorf("no HarvesterMachine says %s", infrav1.ReasonIPPoolExhausted)
	})
	if err := hv.Client.Get(ctx, types.NamespacedName{Namespace: "vms", Name: waiting}, &kubevirtv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the machine waiting for an address has a VM: %v", err)
	}

	// Scaling down releases the addresses of the machines deleted; the waiting one takes one.
	w.must(c.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))))
	one := running(1)
	waitFor(ctx, t, w.capi, "the claims of the deleted machines released", func() error {
		claims := w.addressClaims()
		if len(claims) != 1 {
			return fmt.Errorf("claims %v, want one", claims)
		}
		return nil
	})
	for machine, addr := range one {
		w.checkStaticMachine(machine, addr)
	}

	// Two NICs: the pool's address on the first, a DHCP lease of storage on the second.
	twoNICs := tenant
	twoNICs.MachineSpec.Interfaces = []infrav1.NetworkInterface{
		{Network: "vms/vlan40", AddressesFromPools: []infrav1.IPPoolReference{staticPool}},
		{Network: "vms/storage"},
	}
	hm, machine := twoNICs.Machine("tenant-two-nics", "")
	w.must(testbed.CreateAll(ctx, c, hm, machine))
	var first, second harvester.Addresses
	waitFor(ctx, t, w.capi, "the two-NIC machine running with both addresses", func() error {
		vmi := &kubevirtv1.VirtualMachineInstance{}
		if err := hv.Client.Get(ctx, types.NamespacedName{Namespace: "vms", Name: hm.Name}, vmi); err != nil {
			return err
		}
		first = harvester.SelectAddresses(vmi.Status.Interfaces, harvester.NICName)
		second = harvester.SelectAddresses(vmi.Status.Interfaces, "nic-2")
		if a, err := netip.ParseAddr(first.Primary); err != nil || !inPool.Contains(a) {
			return fmt.Errorf("first NIC %+v, want an address of the pool", first)
		}
		if a, err := netip.ParseAddr(second.Primary); err != nil || !netip.MustParsePrefix("10.60.0.0/24").Contains(a) {
			return fmt.Errorf("second NIC %+v, want a lease of storage", second)
		}
		return nil
	})
	// Its Node gets the first NIC's address only, as Harvester's cloud provider reads one NIC.
	w.nodeInternalIP(tenantAPI, hm.Name, first.Primary, second.Primary)

	// A management network that is not the first NIC's: the machine says so, and a cloud provider
	// run with it gives the Node the second NIC's address.
	w.must(c.Patch(ctx, &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"managementNetwork":"vms/storage"}}`))))
	w.waitCondition(hm, func() []metav1.Condition { return hm.Status.Conditions }, infrav1.ConditionDegraded, infrav1.ReasonManagementNetworkMismatch,
		"on network vms/vlan40", "spec.managementNetwork", "is vms/storage")
	w.must(cloudProvider.RestartWith("--management-network=vms/storage"))
	w.nodeInternalIP(tenantAPI, hm.Name, second.Primary, first.Primary)
	w.must(c.Patch(ctx, &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"managementNetwork":"vms/vlan40"}}`))))
	w.waitCondition(hm, func() []metav1.Condition { return hm.Status.Conditions }, infrav1.ConditionDegraded, infrav1.ReasonAsExpected)

	// An image that ignores cloud-init's network configuration takes a DHCP lease instead of the
	// pool's address: the machine runs, and says so.
	ignoring := tenant
	ignoring.MachineSpec.Interfaces = []infrav1.NetworkInterface{{Network: "vms/vlan40", AddressesFromPools: []infrav1.IPPoolReference{staticPool}}}
	ignoring.MachineSpec.Labels = map[string]string{sim.AnnotationFault: sim.FaultIgnoreNetworkConfig}
	ignored, ignoredMachine := ignoring.Machine("tenant-ignores-network-config", "")
	w.must(testbed.CreateAll(ctx, c, ignored, ignoredMachine))
	w.waitCondition(ignored, func() []metav1.Condition { return ignored.Status.Conditions }, infrav1.ConditionDegraded, infrav1.ReasonGuestAddressMismatch,
		"not the address its pool assigned", "IPAddress "+ignored.Name+"-nic-1-1")

	// A pool of a kind nothing serves: refused before anything is claimed.
	unserved := tenant
	unserved.MachineSpec.Interfaces = []infrav1.NetworkInterface{{Network: "vms/vlan40", AddressesFromPools: []infrav1.IPPoolReference{
		{APIGroup: "ipam.example.com", Kind: "NoSuchPool", Name: "p"},
	}}}
	bad, badMachine := unserved.Machine("tenant-unserved", "")
	w.must(testbed.CreateAll(ctx, c, bad, badMachine))
	w.readyCondition(bad.Name, infrav1.ReasonIPPoolKindNotServed, "NoSuchPool", "ipam.example.com", "clusterctl init --ipam in-cluster")
	if claims := w.addressClaims(); slices.ContainsFunc(claims, func(n string) bool { return strings.HasPrefix(n, bad.Name) }) {
		t.Fatalf("a claim was made for a pool kind nothing serves: %v", claims)
	}

	// Deleting the Cluster leaves no claim, no address and nothing on Harvester.
	w.must(c.Delete(ctx, cluster))
	waitFor(ctx, t, w.capi, "the Cluster, its claims and addresses, and everything on Harvester to go", func() error {
		if err := w.clusterAndMachinesGone(cluster); err != nil {
			return err
		}
		if claims := w.addressClaims(); len(claims) > 0 {
			return fmt.Errorf("claims left: %v", claims)
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(testbed.IPAddressGVK.GroupVersion().WithKind("IPAddressList"))
		w.must(c.List(ctx, list, client.InNamespace(ns)))
		if len(list.Items) > 0 {
			return fmt.Errorf("%d IPAddresses left", len(list.Items))
		}
		return nil
	})
	if err := ipam.Err(); err != nil {
		t.Errorf("the IPAM player: %v", err)
	}
	if released := early(); len(released) > 0 {
		t.Errorf("claims released while their machine's VM was on Harvester: %v", released)
	}
}

// releasedWhileTheirVMsExist watches the tests' IPAddressClaims until the test ends, and returns
// what says which were deleted while the VM of their machine (the claim's name up to "-nic-") was
// still on Harvester.
func (w *capiWorld) releasedWhileTheirVMsExist() func() []string {
	w.t.Helper()
	c, err := client.NewWithWatch(w.cfg, client.Options{})
	w.must(err)
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(testbed.IPAddressClaimGVK.GroupVersion().WithKind("IPAddressClaimList"))
	watcher, err := c.Watch(w.ctx, list, client.InNamespace(ns))
	w.must(err)
	w.t.Cleanup(watcher.Stop)
	var mu sync.Mutex
	var early []string
	go func() {
		for ev := range watcher.ResultChan() {
			claim, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || claim.GetDeletionTimestamp() == nil {
				continue
			}
			machine, _, _ := strings.Cut(claim.GetName(), "-nic-")
			err := w.hv.Client.Get(w.ctx, types.NamespacedName{Namespace: "vms", Name: machine}, &kubevirtv1.VirtualMachine{})
			if err == nil {
				mu.Lock()
				early = append(early, claim.GetName())
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(early)
	}
}

// machineAddressIn is the Machine's first status.addresses entry in prefix, "" if none.
func machineAddressIn(m unstructured.Unstructured, prefix netip.Prefix) string {
	addresses, _, _ := unstructured.NestedSlice(m.Object, "status", "addresses")
	for _, a := range addresses {
		raw, _ := a.(map[string]any)["address"].(string)
		if ip, err := netip.ParseAddr(raw); err == nil && prefix.Contains(ip) {
			return raw
		}
	}
	return ""
}

// addressClaims are the names of the IPAddressClaims of the tests' namespace.
func (w *capiWorld) addressClaims() []string {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(testbed.IPAddressClaimGVK.GroupVersion().WithKind("IPAddressClaimList"))
	w.must(w.c.List(w.ctx, list, client.InNamespace(ns)))
	var names []string
	for _, claim := range list.Items {
		names = append(names, claim.GetName())
	}
	return names
}

// checkStaticMachine checks what a machine with its address from the pool has: its claim, owned
// by its HarvesterMachine with the cluster's name; the HarvesterMachine's addresses with the
// pool's first; its VM's NIC with the MAC the provider derives; its cloud-init network
// configuration giving that NIC the address, the pool's gateway and the nameserver; and the guest
// reporting it.
func (w *capiWorld) checkStaticMachine(name, addr string) {
	w.t.Helper()
	hm := &infrav1.HarvesterMachine{}
	w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: name}, hm))
	claim := &unstructured.Unstructured{}
	claim.SetGroupVersionKind(testbed.IPAddressClaimGVK)
	w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: name + "-nic-1-1"}, claim))
	if owner := metav1.GetControllerOf(claim); owner == nil || owner.UID != hm.UID || claim.GetLabels()[testbed.ClusterNameLabel] != tenant.Name {
		w.t.Errorf("claim %s: controller %+v, labels %v", claim.GetName(), owner, claim.GetLabels())
	}
	if clusterName, _, _ := unstructured.NestedString(claim.Object, "spec", "clusterName"); clusterName != tenant.Name {
		w.t.Errorf("claim %s: spec.clusterName %q", claim.GetName(), clusterName)
	}
	if len(hm.Status.Addresses) == 0 || hm.Status.Addresses[0].Address != addr {
		w.t.Errorf("HarvesterMachine %s: addresses %v, want %s first", name, hm.Status.Addresses, addr)
	}
	vm := &kubevirtv1.VirtualMachine{}
	w.must(w.hv.Client.Get(w.ctx, types.NamespacedName{Namespace: "vms", Name: name}, vm))
	mac := harvester.MACAddressFor("vms", name, 0)
	if ifaces := vm.Spec.Template.Spec.Domain.Devices.Interfaces; len(ifaces) != 1 || ifaces[0].MacAddress != mac {
		w.t.Errorf("VM %s: interfaces %+v, want one with MAC %s", name, ifaces, mac)
	}
	secret := &corev1.Secret{}
	w.must(w.hv.Client.Get(w.ctx, types.NamespacedName{Namespace: "vms", Name: name + "-cloudinit"}, secret))
	config := string(secret.Data["networkdata"])
	for _, want := range []string{mac, addr + "/24", "via: 10.40.0.1", "10.40.0.2", "dhcp4: false"} {
		if !strings.Contains(config, want) {
			w.t.Errorf("VM %s: network configuration without %q:\n%s", name, want, config)
		}
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	w.must(w.hv.Client.Get(w.ctx, types.NamespacedName{Namespace: "vms", Name: name}, vmi))
	if got := harvester.SelectAddresses(vmi.Status.Interfaces, harvester.NICName); got.Primary != addr {
		w.t.Errorf("VM %s: the guest reports %+v, want %s", name, got, addr)
	}
}

// nodeInternalIP waits for the tenant's Node name to have InternalIP addr and none of absent.
func (w *capiWorld) nodeInternalIP(tenantAPI *testbed.Tenant, name, addr string, absent ...string) {
	w.t.Helper()
	waitFor(w.ctx, w.t, w.capi, fmt.Sprintf("Node %s with InternalIP %s", name, addr), func() error {
		node := &corev1.Node{}
		if err := tenantAPI.Client.Get(w.ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		internal := ""
		for _, a := range node.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && internal == "" {
				internal = a.Address
			}
			if slices.Contains(absent, a.Address) {
				return fmt.Errorf("Node %s has address %s (addresses %v)", name, a.Address, node.Status.Addresses)
			}
		}
		if internal != addr {
			return fmt.Errorf("Node %s: addresses %v, want InternalIP %s", name, node.Status.Addresses, addr)
		}
		return nil
	})
}

// talosStaticInterfaces are the NICs of the talos-static flavour's workers, as clusterctl renders
// them for vms/vlan40, the pool staticPool and nameserver 10.40.0.2.
func talosStaticInterfaces(ctx context.Context, t *testing.T) []infrav1.NetworkInterface {
	t.Helper()
	_, config := clusterctlRepository(ctx, t)
	for _, o := range generateFlavour(ctx, t, requireAssets(t), config, "talos-static") {
		if o.GetKind() == "HarvesterMachineTemplate" && strings.HasSuffix(o.GetName(), "-md-0") {
			hmt := &infrav1.HarvesterMachineTemplate{}
			convert(t, o, hmt)
			if pools := hmt.Spec.Template.Spec.Interfaces; len(pools) != 1 || len(pools[0].AddressesFromPools) != 1 || pools[0].AddressesFromPools[0] != staticPool {
				t.Fatalf("the talos-static flavour's workers have interfaces %+v, want one on pool %+v", pools, staticPool)
			}
			return hmt.Spec.Template.Spec.Interfaces
		}
	}
	t.Fatal("the talos-static flavour has no workers' HarvesterMachineTemplate")
	return nil
}

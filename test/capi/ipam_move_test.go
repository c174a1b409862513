package capi

import (
	"bytes"
	"context"
	"maps"
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// TestClusterAPIMoveKeepsAddresses moves a running tenant cluster whose workers take their
// addresses from an InClusterIPPool (its CRD labelled for clusterctl move's hierarchy, as the
// in-cluster provider's release labels it) with the real clusterctl move. clusterctl carries the
// pool, the claims (without status) and their IPAddresses. Until the target's IPAM provider links
// each claim to its IPAddress again, the machine waits, saying so (IPAddressPending), and its VM and
// cloud-init Secret are left as they are; once linked, every Machine is Running on the target with
// the address it had, and no claim or IPAddress was made anew.
func TestClusterAPIMoveKeepsAddresses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 7*time.Minute)
	t.Cleanup(cancel)
	workers := tenant.MachineSpec
	workers.Interfaces = []infrav1.NetworkInterface{{Network: "vms/vlan40", AddressesFromPools: []infrav1.IPPoolReference{staticPool}}}
	m := newMoveSceneWith(ctx, t, moveSetup{
		moreCRDs: []string{testbed.InClusterIPPoolCRDs(repoRoot())},
		workers:  &workers,
		beforeMachines: func(m *moveScene) {
			createStaticPool(ctx, m.src)
			m.src.playIPAM()
		},
	})
	claimsBefore, addressesBefore := m.src.claimsAndAddresses()
	if len(claimsBefore) != 1 || len(addressesBefore) != 1 {
		t.Fatalf("before the move: claims %v, IPAddresses %v, want one of each", claimsBefore, addressesBefore)
	}
	var worker string
	for claim := range claimsBefore {
		worker = claim[:len(claim)-len("-nic-1-1")]
	}
	secretBefore, vmBefore := m.harvesterObjectsOf(ctx, worker)

	out := runClusterctl(ctx, t, m.assets, m.config, nil, "move", "--kubeconfig", m.srcKubeconfig, "--to-kubeconfig", m.dstKubeconfig, "--namespace", ns, "-v", "3")
	t.Logf("clusterctl move:\n%s", out)
	// No IPAM provider runs on the target yet: the moved claim has no address, and says so.
	claim := worker + "-nic-1-1"
	m.dst.readyCondition(worker, infrav1.ReasonIPAddressPending, "IPAddressClaim "+ns+"/"+claim, "has no address")
	if secret, vm := m.harvesterObjectsOf(ctx, worker); secret.ResourceVersion != secretBefore.ResourceVersion || vm.Generation != vmBefore.Generation || vm.UID != vmBefore.UID {
		t.Fatalf("while the moved claim had no address: cloud-init Secret resourceVersion %s (was %s), VM %s generation %d (was %s, %d)",
			secret.ResourceVersion, secretBefore.ResourceVersion, vm.UID, vm.Generation, vmBefore.UID, vmBefore.Generation)
	}

	dstIPAM := m.dst.playIPAM()
	m.carriedOn(ctx, t, time.Now())
	claimsAfter, addressesAfter := m.dst.claimsAndAddresses()
	if !maps.Equal(claimsAfter, claimsBefore) || !maps.Equal(addressesAfter, addressesBefore) {
		t.Fatalf("after the move: claims %v and IPAddresses %v, want %v and %v", claimsAfter, addressesAfter, claimsBefore, addressesBefore)
	}
	hm := &infrav1.HarvesterMachine{}
	m.dst.must(m.dst.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: worker}, hm))
	if len(hm.Status.Addresses) == 0 || hm.Status.Addresses[0].Address != addressesBefore[claim] {
		t.Fatalf("HarvesterMachine %s on the target: addresses %v, want %s first", worker, hm.Status.Addresses, addressesBefore[claim])
	}
	// Taken over, the VM and its Secret are labelled for the target's HarvesterMachine; what the
	// guest was given is the same.
	if secret, vm := m.harvesterObjectsOf(ctx, worker); !maps.EqualFunc(secret.Data, secretBefore.Data, bytes.Equal) || vm.UID != vmBefore.UID ||
		!reflect.DeepEqual(vm.Spec.Template.Spec.Domain.Devices.Interfaces, vmBefore.Spec.Template.Spec.Domain.Devices.Interfaces) {
		t.Fatalf("after the move the cloud-init Secret's data or the VM (%s, was %s) changed", vm.UID, vmBefore.UID)
	}
	m.vms.requireNone(t, "during and after the move")
	if err := dstIPAM.Err(); err != nil {
		t.Errorf("the target's IPAM player: %v", err)
	}
}

// playIPAM plays the in-cluster IPAM provider on w until the test ends.
func (w *capiWorld) playIPAM() *testbed.IPAM {
	w.t.Helper()
	ipam, err := testbed.PlayIPAM(w.ctx, w.cfg)
	w.must(err)
	w.t.Cleanup(ipam.Stop)
	return ipam
}

// createStaticPool creates the InClusterIPPool staticPool on w: three addresses of vlan40.
func createStaticPool(ctx context.Context, w *capiWorld) {
	pool := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"addresses": []any{"10.40.0.100-10.40.0.102"}, "prefix": int64(24), "gateway": "10.40.0.1",
	}}}
	pool.SetGroupVersionKind(testbed.InClusterIPPoolGVK)
	pool.SetNamespace(ns)
	pool.SetName(staticPool.Name)
	w.must(w.c.Create(ctx, pool))
}

// claimsAndAddresses are w's IPAddressClaims, each with the IPAddress its status names, and its
// IPAddresses, each with its address.
func (w *capiWorld) claimsAndAddresses() (claims, addresses map[string]string) {
	w.t.Helper()
	claims, addresses = map[string]string{}, map[string]string{}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(testbed.IPAddressClaimGVK.GroupVersion().WithKind("IPAddressClaimList"))
	w.must(w.c.List(w.ctx, list, client.InNamespace(ns)))
	for _, c := range list.Items {
		claims[c.GetName()], _, _ = unstructured.NestedString(c.Object, "status", "addressRef", "name")
	}
	list = &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(testbed.IPAddressGVK.GroupVersion().WithKind("IPAddressList"))
	w.must(w.c.List(w.ctx, list, client.InNamespace(ns)))
	for _, a := range list.Items {
		addr, _, _ := unstructured.NestedString(a.Object, "spec", "address")
		if _, err := netip.ParseAddr(addr); err != nil {
			w.t.Fatalf("IPAddress %s: %q", a.GetName(), addr)
		}
		addresses[a.GetName()] = addr
	}
	return claims, addresses
}

// harvesterObjectsOf are the machine's cloud-init Secret and VM on Harvester.
func (m *moveScene) harvesterObjectsOf(ctx context.Context, machine string) (*corev1.Secret, *kubevirtv1.VirtualMachine) {
	secret, vm := &corev1.Secret{}, &kubevirtv1.VirtualMachine{}
	m.src.must(m.hv.Client.Get(ctx, types.NamespacedName{Namespace: "vms", Name: machine + "-cloudinit"}, secret))
	m.src.must(m.hv.Client.Get(ctx, types.NamespacedName{Namespace: "vms", Name: machine}, vm))
	return secret, vm
}

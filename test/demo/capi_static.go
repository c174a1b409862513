package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The pool of the demo's --static-addresses mode: ten addresses of the samples' VLAN
// (testbed.NetworkCIDR), above the leases the simulated DHCP server gives first, on the network of
// the ProviderConfig of config/samples.
const (
	demoPoolName    = "demo-workers"
	demoPoolFirst   = "10.40.0.180"
	demoPoolLast    = "10.40.0.189"
	demoPoolNetwork = "default/vlan40-workloads"
)

// demoPool is that InClusterIPPool, as a user creates it.
func demoPool() *unstructured.Unstructured {
	pool := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"addresses": []any{demoPoolFirst + "-" + demoPoolLast}, "prefix": int64(24), "gateway": "10.40.0.1",
	}}}
	pool.SetGroupVersionKind(testbed.InClusterIPPoolGVK)
	pool.SetNamespace(testbed.Namespace)
	pool.SetName(demoPoolName)
	return pool
}

// useStaticAddresses edits the rendered workers' HarvesterMachineTemplate as docs/cluster-api.md
// shows: their one NIC, on the ProviderConfig's network, takes its address from demoPool.
func (c *capiDemo) useStaticAddresses() error {
	for _, o := range c.objs {
		if o.GetKind() != "HarvesterMachineTemplate" {
			continue
		}
		nic := map[string]any{"network": demoPoolNetwork, "nameservers": []any{"10.40.0.2"}, "addressesFromPools": []any{map[string]any{
			"apiGroup": testbed.InClusterIPPoolGVK.Group, "kind": testbed.InClusterIPPoolGVK.Kind, "name": demoPoolName,
		}}}
		if err := unstructured.SetNestedSlice(o.Object, []any{nic}, "spec", "template", "spec", "interfaces"); err != nil {
			return err
		}
		c.say("  HarvesterMachineTemplate %s: spec.template.spec.interfaces takes each worker's address from InClusterIPPool %s (%s-%s) on %s", o.GetName(), demoPoolName, demoPoolFirst, demoPoolLast, demoPoolNetwork)
		return nil
	}
	return fmt.Errorf("the %s flavour has no HarvesterMachineTemplate", capiFlavour)
}

// checkStaticAddresses checks that every Machine runs at an address of demoPool, which its Node
// has as InternalIP (set by the played cloud provider from the VM's NIC, as Harvester's does).
func (c *capiDemo) checkStaticAddresses(ctx context.Context) error {
	rows, err := c.rows(ctx)
	if err != nil {
		return err
	}
	first, last := netip.MustParseAddr(demoPoolFirst), netip.MustParseAddr(demoPoolLast)
	for _, r := range rows {
		ip, err := netip.ParseAddr(r.IP)
		if err != nil || ip.Less(first) || last.Less(ip) {
			return fmt.Errorf("the Machine %s has IP %q, not an address of InClusterIPPool %s (%s-%s)", r.Machine, r.IP, demoPoolName, demoPoolFirst, demoPoolLast)
		}
		if err := c.waitNodeInternalIP(ctx, r); err != nil {
			return err
		}
	}
	claims, err := c.claimsLeft(ctx)
	if err != nil {
		return err
	}
	if claims != len(rows) {
		return fmt.Errorf("%d IPAddressClaims for %d Machines, want one each", claims, len(rows))
	}
	c.say("Every Machine runs at an address of InClusterIPPool %s, by an IPAddressClaim of its own, and its Node has it as InternalIP.", demoPoolName)
	return nil
}

// nodeAddressWait bounds how long a Node may go without the InternalIP its Machine has: a cloud
// provider sets a Node's providerID and its addresses in two writes (the spec, then the status),
// so a Machine can be Running, by its Node's providerID, a moment before that Node has addresses.
const nodeAddressWait = 30 * time.Second

// waitNodeInternalIP waits until the Node of the row has the row's Machine address as InternalIP.
func (c *capiDemo) waitNodeInternalIP(ctx context.Context, r machineRow) error {
	deadline := time.Now().Add(nodeAddressWait)
	for {
		node := &corev1.Node{}
		if err := c.tenant.Client.Get(ctx, client.ObjectKey{Name: r.Node}, node); err != nil {
			return err
		}
		internal := nodeInternalIP(node)
		if internal == r.IP {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Node %s has InternalIP %q %s after its Machine %s ran, the Machine's address is %s", r.Node, internal, nodeAddressWait, r.Machine, r.IP)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// claimsLeft counts the IPAddressClaims of the demo's namespace (one per worker: the hosted
// control plane has no machines).
func (c *capiDemo) claimsLeft(ctx context.Context) (int, error) {
	claims := &unstructured.UnstructuredList{}
	claims.SetGroupVersionKind(testbed.IPAddressClaimGVK.GroupVersion().WithKind("IPAddressClaimList"))
	err := c.tb.Mgmt.List(ctx, claims, client.InNamespace(testbed.Namespace))
	return len(claims.Items), err
}

func nodeInternalIP(node *corev1.Node) string {
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

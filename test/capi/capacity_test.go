package capi

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The cluster autoscaler's node group size annotations (Cluster API's
// AutoscalerMinSizeAnnotation and AutoscalerMaxSizeAnnotation).
const (
	autoscalerMinSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	autoscalerMaxSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
)

// TestClusterAPICapacityScalesFromZero runs a MachineDeployment as the cluster autoscaler has it
// scale from zero, through the real Cluster API core manager and its webhooks: created with the
// autoscaler's size annotations and no replicas, Cluster API's defaulting webhook gives it the
// minimum, 0, and no machine is made; its HarvesterMachineTemplate reports status.capacity and
// status.nodeInfo from its spec, which is all the autoscaler has of a node group without Nodes.
// Scaled to 1 through the scale subresource, as the autoscaler does, its machine's Node (the
// kubelet player counts the VMI's vCPUs and guest memory) advertises exactly that capacity. Scaled
// back to 0, nothing is left on Harvester.
func TestClusterAPICapacityScalesFromZero(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t)
	ctx, c := w.ctx, w.c
	tenantAPI, _ := w.playTenant()
	w.tenantCluster()

	template, md := tenant.MachineDeployment("tenant-autoscaled", 0)
	unstructured.RemoveNestedField(md.Object, "spec", "replicas")
	md.SetAnnotations(map[string]string{autoscalerMinSize: "0", autoscalerMaxSize: "3"})
	w.must(testbed.CreateAll(ctx, c, template, md))
	w.must(c.Get(ctx, client.ObjectKeyFromObject(md), md))
	if replicas, found, _ := unstructured.NestedInt64(md.Object, "spec", "replicas"); !found || replicas != 0 {
		t.Fatalf("MachineDeployment spec.replicas %d (set %v), want 0 from the autoscaler's minimum (Cluster API's defaulting webhook)", replicas, found)
	}

	var capacity corev1.ResourceList
	waitFor(ctx, t, w.capi, "the HarvesterMachineTemplate to report its capacity", func() error {
		got := &infrav1.HarvesterMachineTemplate{}
		w.must(c.Get(ctx, client.ObjectKeyFromObject(template), got))
		cpu, memory := got.Status.Capacity[corev1.ResourceCPU], got.Status.Capacity[corev1.ResourceMemory]
		if cpu.Value() != int64(tenant.MachineSpec.CPU) || memory.Cmp(tenant.MachineSpec.Memory) != 0 {
			return fmt.Errorf("status.capacity %v, want cpu %d and memory %s", got.Status.Capacity, tenant.MachineSpec.CPU, tenant.MachineSpec.Memory.String())
		}
		if got.Status.NodeInfo == nil || got.Status.NodeInfo.OperatingSystem != "linux" {
			return fmt.Errorf("status.nodeInfo %+v, want operatingSystem linux", got.Status.NodeInfo)
		}
		capacity = got.Status.Capacity
		return nil
	})
	if machines := w.harvesterMachinesOf(md.GetName()); len(machines) != 0 {
		t.Fatalf("a MachineDeployment of 0 made HarvesterMachines %v", machines)
	}

	// The autoscaler scales the node group through the scale subresource.
	scale := func(replicas int) {
		t.Helper()
		target := &unstructured.Unstructured{}
		target.SetGroupVersionKind(testbed.MachineDeploymentGVK)
		target.SetNamespace(ns)
		target.SetName(md.GetName())
		w.must(c.SubResource("scale").Patch(ctx, target, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas))))
	}
	scale(1)
	waitFor(ctx, t, w.capi, "the new machine's Node to advertise the template's capacity", func() error {
		machines := w.harvesterMachinesOf(md.GetName())
		if len(machines) != 1 {
			return fmt.Errorf("HarvesterMachines %v, want one", machines)
		}
		node := &corev1.Node{}
		if err := tenantAPI.Client.Get(ctx, client.ObjectKey{Name: machines[0]}, node); err != nil {
			return fmt.Errorf("the Node of %s: %w", machines[0], err)
		}
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if got, want := node.Status.Capacity[name], capacity[name]; got.Cmp(want) != 0 {
				return fmt.Errorf("Node %s advertises %s %s; the template reported %s", node.Name, name, got.String(), want.String())
			}
		}
		return nil
	})

	scale(0)
	waitFor(ctx, t, w.capi, "the node group back at zero, nothing left on Harvester", func() error {
		if machines := w.harvesterMachinesOf(md.GetName()); len(machines) != 0 {
			return fmt.Errorf("HarvesterMachines %v, want none", machines)
		}
		if vms, disks, secrets := w.harvesterLeft(); vms+disks+secrets != 0 {
			return fmt.Errorf("%d VMs, %d disks and %d cloud-init Secrets on Harvester", vms, disks, secrets)
		}
		return nil
	})
}

// harvesterMachinesOf names the HarvesterMachines of the MachineDeployment deployment.
func (w *capiWorld) harvesterMachinesOf(deployment string) []string {
	list := &infrav1.HarvesterMachineList{}
	w.must(w.c.List(w.ctx, list, client.InNamespace(ns), client.MatchingLabels{testbed.DeploymentNameLabel: deployment}))
	names := make([]string, 0, len(list.Items))
	for _, hm := range list.Items {
		names = append(names, hm.Name)
	}
	return names
}

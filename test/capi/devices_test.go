package capi

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// TestClusterAPIDevicesDedicatedCPUsAndModel runs a Machine whose HarvesterMachine asks for
// dedicated CPUs and a CPU model through the real Cluster API core manager. Harvester's VM
// mutator (simulated) gives its VM no overcommit and requires the CPU manager label; with no node
// whose CPU manager is on, the machine is VMUnschedulable and says what to turn on; once a node
// has it, the machine runs there, its VM pinned, with the model asked for and requests equal to
// its limits.
func TestClusterAPIDevicesDedicatedCPUsAndModel(t *testing.T) {
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	w.tenantCluster()
	pinned := tenant
	pinned.MachineSpec.DedicatedCPUPlacement = true
	pinned.MachineSpec.CPUModel = "EPYC-Rome"
	hm, machine := pinned.Machine("tenant-pinned", "")
	w.must(testbed.CreateAll(ctx, c, hm, machine))

	w.readyCondition(hm.Name, infrav1.ReasonVMUnschedulable, "spec.dedicatedCpuPlacement", "Enable CPU Manager", kubevirtv1.CPUManager+"=true")

	w.must(hv.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "harvester-node-2"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+kubevirtv1.CPUManager+`":"true"}}}`))))
	vm := &kubevirtv1.VirtualMachine{}
	waitFor(ctx, t, w.capi, "the pinned machine provisioned", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", machine, vm, &infrav1.HarvesterMachine{})
	})
	d := vm.Spec.Template.Spec.Domain
	if !d.CPU.DedicatedCPUPlacement || d.CPU.Model != "EPYC-Rome" || int64(d.CPU.Cores) != int64(tenant.MachineSpec.CPU) {
		t.Errorf("VM cpu %+v, want %d dedicated cores of model EPYC-Rome", d.CPU, tenant.MachineSpec.CPU)
	}
	if !equality.Semantic.DeepEqual(d.Resources.Requests, d.Resources.Limits) {
		t.Errorf("VM requests %v, want its limits %v", d.Resources.Requests, d.Resources.Limits)
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	w.must(hv.Client.Get(ctx, client.ObjectKeyFromObject(vm), vmi))
	if vmi.Status.NodeName != "harvester-node-2" {
		t.Errorf("the VMI runs on %q, want harvester-node-2, the node whose CPU manager is on", vmi.Status.NodeName)
	}
}

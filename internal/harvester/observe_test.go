package harvester

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// The IP comes from the VMI of the current VM only: a VMI of the same name that a deleted VM
// left (KubeVirt removes it a little later) reports neither its phase nor its addresses.
func TestObserveReadsOnlyTheCurrentVMsVMI(t *testing.T) {
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "cp-0", UID: "current-vm"}}
	vmiOf := func(owner types.UID) *kubevirtv1.VirtualMachineInstance {
		return &kubevirtv1.VirtualMachineInstance{
			ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "cp-0", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine", Name: "cp-0", UID: owner, Controller: ptr.To(true)}}},
			Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Running, Interfaces: []kubevirtv1.VirtualMachineInstanceNetworkInterface{
				{Name: NICName, IP: "10.40.0.7", IPs: []string{"10.40.0.7"}, MAC: "52:54:00:00:00:07"}}},
		}
	}
	for owner, wantIP := range map[string]string{"current-vm": "10.40.0.7", "deleted-vm": ""} {
		t.Run(owner, func(t *testing.T) {
			vmi := vmiOf(types.UID(owner))
			m := claimsCluster(t, interceptor.Funcs{}, vm.DeepCopy(), vmi)
			obs, err := m.observeVM(context.Background(), vm)
			if err != nil {
				t.Fatal(err)
			}
			if obs.Addresses.Primary != wantIP || (wantIP == "") != (obs.VMIPhase == "") {
				t.Fatalf("VMI of %s: IP %q, VMI phase %q; want IP %q", owner, obs.Addresses.Primary, obs.VMIPhase, wantIP)
			}
		})
	}
}

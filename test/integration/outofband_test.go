package integration

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// A Running machine whose VM is stopped on Harvester stays Running but reports Ready=False and
// Degraded VMNotReady; started again, it is Ready again.
func TestVMStoppedOutOfBand(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("stop-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	setRunStrategy := func(s kubevirtv1.VirtualMachineRunStrategy) {
		vm := &kubevirtv1.VirtualMachine{}
		w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "stop-0"}, vm))
		patch := client.MergeFrom(vm.DeepCopy())
		vm.Spec.RunStrategy = ptr.To(s)
		w.must(hv.Patch(w.ctx, vm, patch))
	}
	setRunStrategy(kubevirtv1.RunStrategyHalted)
	// KubeVirt removes the VMI before it writes the VM's new status: the first report may still
	// quote the VM's last status, the next one says Stopped.
	eventually(t, timeout, func() error {
		c := meta.FindStatusCondition(w.get(mr).Status.Conditions, v1alpha1.ConditionDegraded)
		if c == nil || c.Reason != v1alpha1.ReasonVMNotReady || !strings.Contains(c.Message, "VirtualMachine "+w.hvNs+"/stop-0") || !strings.Contains(c.Message, "Stopped") {
			return fmt.Errorf("Degraded %+v, want VMNotReady naming the VM and Stopped", c)
		}
		return nil
	})
	if got := w.get(mr); got.Status.Phase != v1alpha1.MachinePhaseRunning {
		t.Fatalf("phase %s: a stopped VM is not a failure", got.Status.Phase)
	}
	setRunStrategy(kubevirtv1.RunStrategyAlways)
	w.waitMRCondition(mr, v1alpha1.ConditionReady, v1alpha1.ReasonVMRunning)
	w.deleteAndWait(mr)
}

// A MachineRequest deleted while its VM is still starting leaves nothing behind.
func TestDeletedWhileCreating(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("early-0")
	mr.Spec.Labels = map[string]string{sim.AnnotationFault: sim.FaultSlowBoot}
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseCreating)
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

// The cloud-init Secret deleted out of band while Creating is recreated (the VM reads it when it
// starts); the machine comes up.
func TestCloudInitSecretDeletedWhileCreating(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("ci-0")
	mr.Spec.Labels = map[string]string{sim.AnnotationFault: sim.FaultNoDHCP}
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseCreating)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.hvNs, Name: "ci-0-cloudinit"}}
	eventually(t, timeout, func() error { return hv.Get(w.ctx, client.ObjectKeyFromObject(secret), secret) })
	old := secret.UID
	w.must(hv.Delete(w.ctx, secret))
	eventually(t, timeout, func() error {
		again := &corev1.Secret{}
		if err := hv.Get(w.ctx, client.ObjectKeyFromObject(secret), again); err != nil {
			return err
		}
		if again.UID == old || string(again.Data["userdata"]) != mr.Spec.UserData {
			return errString("the cloud-init Secret was not recreated with the userData")
		}
		return nil
	})
	w.deleteAndWait(mr)
}

type errString string

func (e errString) Error() string { return string(e) }

package integration

import (
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/machinerequest"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// These tests restart the manager between their steps: whatever it held in memory is gone, and
// every guarantee must rest on what the API servers kept. Run on Butler's schema
// (BUTLER_TEST_SCHEMA, see make test), which prunes every status field it does not know, they
// show that what the provider records survives there.

// requireRecorded checks that the machine's place and VM are recorded as the API server keeps
// them: the placement annotation names the VM, and status.providerID its UID.
func (w *world) requireRecorded(mr *v1alpha1.MachineRequest, vmName string) *v1alpha1.MachineRequest {
	w.t.Helper()
	got := w.get(mr)
	p, err := got.RecordedPlacement()
	if err != nil || p == nil || p.Namespace != w.hvNs || p.Name != vmName || p.ClusterID == "" {
		w.t.Fatalf("%s: recorded placement %+v (%v), want %s/%s", mr.Name, p, err, w.hvNs, vmName)
	}
	if uid := w.vmUIDs(w.hvNs)[vmName]; uid == "" || got.Status.ProviderID != "harvester://"+string(uid) {
		w.t.Fatalf("%s: providerID %q, want that of VM %s (UID %q)", mr.Name, got.Status.ProviderID, vmName, uid)
	}
	return got
}

// A restart after the VM is created and before it runs: the machine keeps its one VM (recorded
// with its providerID while Creating) and becomes Running with it.
func TestRestartWhileCreating(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("restart-create-0")
	mr.Spec.Labels = map[string]string{sim.AnnotationFault: sim.FaultNoDHCP} // runs, but reports no IP yet
	w.must(mgmt.Create(w.ctx, mr))
	eventually(t, timeout, func() error {
		if got := w.get(mr); got.Status.Phase != v1alpha1.MachinePhaseCreating || got.Status.ProviderID == "" {
			return fmt.Errorf("phase %s, providerID %q; want Creating with the VM's providerID", got.Status.Phase, got.Status.ProviderID)
		}
		return nil
	})
	w.requireRecorded(mr, mr.Spec.MachineName)
	before := w.vmUIDs(w.hvNs)[mr.Spec.MachineName]

	restartManager(t)
	// The guest gets its lease now.
	vm := &kubevirtv1.VirtualMachine{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: mr.Spec.MachineName}, vm))
	patch := client.MergeFrom(vm.DeepCopy())
	delete(vm.Labels, sim.AnnotationFault)
	w.must(hv.Patch(w.ctx, vm, patch))
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: w.hvNs, Name: mr.Spec.MachineName}}
	w.must(client.IgnoreNotFound(hv.Delete(w.ctx, vmi))) // restarted by KubeVirt (RunStrategy Always), without the fault

	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.requireRecorded(mr, mr.Spec.MachineName)
	if uids := w.vmUIDs(w.hvNs); len(uids) != 1 || uids[mr.Spec.MachineName] != before {
		t.Fatalf("VMs %v after the restart, want the one created before it (%s)", uids, before)
	}
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("after the deletion")
}

// A restart, then the ProviderConfig pointed at another Harvester namespace: the running machine
// stays where its record says (nothing duplicated in the new namespace), and is deleted there.
func TestNamespaceEditAfterRestart(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("restart-ns-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.requireRecorded(mr, mr.Spec.MachineName)

	restartManager(t)
	moved := w.moveProviderConfig(w.hvNs + "-moved")

	w.waitMRCondition(mr, v1alpha1.ConditionDegraded, v1alpha1.ReasonProviderConfigMoved)
	consistently(t, 2*time.Second, func() error {
		if got := w.get(mr); got.Status.Phase != v1alpha1.MachinePhaseRunning {
			return fmt.Errorf("phase %s (%s)", got.Status.Phase, got.Status.FailureReason)
		}
		if vms, pvcs, secrets := w.countIn(moved); vms+pvcs+secrets != 0 {
			return fmt.Errorf("%d VMs, %d PVCs, %d Secrets duplicated in the new namespace", vms, pvcs, secrets)
		}
		return nil
	})
	w.requireRecorded(mr, mr.Spec.MachineName)

	restartManager(t)
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("after the deletion")
}

// A deletion while the credentials Secret is gone, after a restart: the finalizer stays (the VM
// cannot be confirmed gone) and says why, until the Secret is back; then everything goes.
func TestDeletionWithoutCredentialsAfterRestart(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("restart-del-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	secret := &corev1.Secret{}
	w.must(mgmt.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "harvester-kubeconfig"}, secret))
	w.must(mgmt.Delete(w.ctx, secret))

	restartManager(t)
	w.must(mgmt.Delete(w.ctx, mr))
	c := w.waitMRCondition(mr, v1alpha1.ConditionDegraded, v1alpha1.ReasonDeletionBlocked)
	requireMentions(t, "Degraded message", c.Message, w.hvNs+"/"+mr.Spec.MachineName, v1alpha1.AnnotationSkipHarvesterCleanup)
	consistently(t, 2*time.Second, func() error {
		got := w.get(mr) // still there: its finalizer holds it
		if !controllerutilContains(got.Finalizers, v1alpha1.MachineRequestFinalizer) {
			return fmt.Errorf("finalizers %v", got.Finalizers)
		}
		if vms, _, _ := w.harvesterObjects(); vms != 1 {
			return fmt.Errorf("%d VMs on Harvester, want the machine's", vms)
		}
		return nil
	})

	restartManager(t)
	w.must(mgmt.Create(w.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: w.ns},
		Data:       map[string][]byte{"kubeconfig": harvesterConfig},
	}))
	w.waitGone(&v1alpha1.MachineRequest{ObjectMeta: mr.ObjectMeta}, mgmt)
	w.requireHarvesterEmpty("after the deletion")
}

// The manager tells which MachineRequest schema is installed: the project's, or Butler's.
func TestInstalledSchemaDetected(t *testing.T) {
	want := machinerequest.SchemaButler
	if s := os.Getenv(schemaEnv); s == "" || s == "project" {
		want = machinerequest.SchemaProject
	}
	if got, err := machinerequest.InstalledSchema(mgmtCfg); err != nil || got != want {
		t.Fatalf("InstalledSchema = %q, %v; want %q", got, err, want)
	}
}

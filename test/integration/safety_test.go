package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// vmUIDs maps the VMs of a Harvester namespace by name to their UIDs.
func (w *world) vmUIDs(namespace string) map[string]types.UID {
	w.t.Helper()
	list := &kubevirtv1.VirtualMachineList{}
	w.must(hv.List(w.ctx, list, client.InNamespace(namespace)))
	out := map[string]types.UID{}
	for _, vm := range list.Items {
		out[vm.Name] = vm.UID
	}
	return out
}

// countIn counts the VMs, PVCs and Secrets in a Harvester namespace.
// moveProviderConfig points the world's ProviderConfig at a new Harvester namespace, which it
// creates, and returns its name.
func (w *world) moveProviderConfig(namespace string) string {
	w.t.Helper()
	createNamespace(w.t, hv, namespace)
	pc := &v1alpha1.ProviderConfig{}
	w.must(mgmt.Get(w.ctx, client.ObjectKeyFromObject(w.pc), pc))
	patch := client.MergeFrom(pc.DeepCopy())
	pc.Spec.Harvester.Namespace = namespace
	w.must(mgmt.Patch(w.ctx, pc, patch))
	return namespace
}

func (w *world) countIn(namespace string) (vms, pvcs, secrets int) {
	w.t.Helper()
	saved := w.hvNs
	defer func() { w.hvNs = saved }()
	w.hvNs = namespace
	return w.harvesterObjects()
}

// Editing the ProviderConfig's Harvester namespace with machines Running: they stay Running where
// they were created (Degraded says why), none is Failed or duplicated, a new machine goes to the
// new namespace, and deleting an old machine removes its VM, disks and Secret from the old one.
func TestProviderConfigNamespaceEditedWhileRunning(t *testing.T) {
	w := newWorld(t)
	old := []*v1alpha1.MachineRequest{w.machineRequest("keep-0"), w.machineRequest("keep-1")}
	for _, mr := range old {
		w.must(mgmt.Create(w.ctx, mr))
	}
	for _, mr := range old {
		w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	}
	before := w.vmUIDs(w.hvNs)

	moved := w.moveProviderConfig("moved-" + rand.String(5))

	for _, mr := range old {
		c := w.waitMRCondition(mr, v1alpha1.ConditionDegraded, v1alpha1.ReasonProviderConfigMoved)
		requireMentions(t, "Degraded message", c.Message, moved, w.hvNs+"/"+mr.Name, "delete and recreate")
	}
	consistently(t, 2*time.Second, func() error {
		for _, mr := range old {
			got := w.get(mr)
			if p, _ := got.RecordedPlacement(); got.Status.Phase != v1alpha1.MachinePhaseRunning || p == nil || p.Namespace != w.hvNs {
				return fmt.Errorf("%s: phase %s, failure %s, placement %+v", mr.Name, got.Status.Phase, got.Status.FailureReason, p)
			}
		}
		if now := w.vmUIDs(w.hvNs); len(now) != 2 || now["keep-0"] != before["keep-0"] || now["keep-1"] != before["keep-1"] {
			return fmt.Errorf("VMs in the old namespace changed: %v, were %v", now, before)
		}
		if vms, pvcs, secrets := w.countIn(moved); vms+pvcs+secrets != 0 {
			return fmt.Errorf("%d VMs, %d PVCs, %d Secrets duplicated in the new namespace", vms, pvcs, secrets)
		}
		return nil
	})

	fresh := w.machineRequest("fresh-0")
	w.must(mgmt.Create(w.ctx, fresh))
	got := w.waitPhase(fresh, v1alpha1.MachinePhaseRunning)
	if p, _ := got.RecordedPlacement(); p == nil || p.Namespace != moved || w.vmUIDs(moved)["fresh-0"] == "" {
		t.Fatalf("new machine placed at %+v, want namespace %s", p, moved)
	}

	w.deleteAndWait(old[0])
	if vms, pvcs, secrets := w.countIn(w.hvNs); vms != 1 || pvcs != 1 || secrets != 1 {
		t.Fatalf("after deleting %s the old namespace holds %d VMs, %d PVCs, %d Secrets; want only %s's", old[0].Name, vms, pvcs, secrets, old[1].Name)
	}
	w.deleteAndWait(old[1])
	w.deleteAndWait(fresh)
	for _, ns := range []string{w.hvNs, moved} {
		if vms, pvcs, secrets := w.countIn(ns); vms+pvcs+secrets != 0 {
			t.Fatalf("left in %s: %d VMs, %d PVCs, %d Secrets", ns, vms, pvcs, secrets)
		}
	}
}

// spec.machineName and spec.providerRef cannot change once set; the API server says which field.
func TestMachineNameAndProviderRefImmutable(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("fixed-0")
	w.must(mgmt.Create(w.ctx, mr))
	change := func(spec string) error {
		return mgmt.Patch(w.ctx, w.get(mr), client.RawPatch(types.MergePatchType, []byte(`{"spec":`+spec+`}`)))
	}
	for field, spec := range map[string]string{
		"spec.machineName": `{"machineName":"renamed-0"}`,
		"spec.providerRef": `{"providerRef":{"name":"elsewhere"}}`,
	} {
		if err := change(spec); err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "cannot be changed") {
			t.Fatalf("changing %s: err = %v, want a rejection naming the field", field, err)
		}
	}
	w.must(change(`{"cpu":4}`)) // other fields still change
	w.deleteAndWait(mr)
}

// A data disk an operator hot-plugged into a machine's VM is not ours: deleting the machine
// leaves it, even when someone listed it in the VM's removed-claims annotation.
func TestHotPluggedVolumeSurvivesDeletion(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("plug-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)

	foreign := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "operator-data", Namespace: w.hvNs},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}},
		},
	}
	w.must(hv.Create(w.ctx, foreign))
	vm := &kubevirtv1.VirtualMachine{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "plug-0"}, vm))
	patch := client.MergeFrom(vm.DeepCopy())
	tmpl := &vm.Spec.Template.Spec
	tmpl.Domain.Devices.Disks = append(tmpl.Domain.Devices.Disks, kubevirtv1.Disk{Name: "hotplug-0", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusSCSI}}})
	tmpl.Volumes = append(tmpl.Volumes, kubevirtv1.Volume{Name: "hotplug-0", VolumeSource: kubevirtv1.VolumeSource{
		PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{Hotpluggable: true,
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: foreign.Name}},
	}})
	// As Harvester's UI would write it when asked to remove every disk with the VM.
	vm.Annotations[harvester.AnnotationRemovedPVCs] = "plug-0-disk-0," + foreign.Name
	w.must(hv.Patch(w.ctx, vm, patch))

	w.deleteAndWait(mr)
	after := &corev1.PersistentVolumeClaim{}
	w.must(hv.Get(w.ctx, client.ObjectKeyFromObject(foreign), after))
	if after.UID != foreign.UID || after.DeletionTimestamp != nil {
		t.Fatalf("the hot-plugged PVC was deleted (uid %s -> %s, deleting %v)", foreign.UID, after.UID, after.DeletionTimestamp)
	}
	if vms, pvcs, secrets := w.harvesterObjects(); vms != 0 || pvcs != 1 || secrets != 0 {
		t.Fatalf("left: %d VMs, %d PVCs, %d Secrets; want only the operator's PVC", vms, pvcs, secrets)
	}
	w.must(hv.Delete(w.ctx, after))
}

// A claim of ours left by an earlier attempt that no longer matches the spec (another size) is
// replaced, not mounted.
func TestLeftoverClaimReplacedWhenItNoLongerMatches(t *testing.T) {
	w := newWorld(t)
	w.image("slow", map[string]string{sim.AnnotationImportDelay: "3s"})
	mr := w.machineRequest("resize-0")
	mr.Spec.Image = w.hvNs + "/slow"
	w.must(mgmt.Create(w.ctx, mr))
	w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonImageNotReady)
	uid := w.get(mr).UID
	leftover := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "resize-0-disk-0", Namespace: w.hvNs,
			Labels:      map[string]string{harvester.LabelMachineRequestUID: string(uid), harvester.LabelManagedBy: harvester.ManagedByValue},
			Annotations: map[string]string{harvester.AnnotationImageID: w.hvNs + "/slow"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: ptrTo(w.imageClass("slow")),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
		},
	}
	w.must(hv.Create(w.ctx, leftover))

	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	pvc := &corev1.PersistentVolumeClaim{}
	w.must(hv.Get(w.ctx, client.ObjectKeyFromObject(leftover), pvc))
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if pvc.UID == leftover.UID || size.Cmp(resource.MustParse("20Gi")) != 0 {
		t.Fatalf("root disk uid %s (left-over %s), size %s: the 10Gi left-over was mounted instead of a 20Gi disk", pvc.UID, leftover.UID, size.String())
	}
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

// A ResourceQuota that refuses a disk makes the machine wait with QuotaExceeded naming the quota,
// not ask for a permission; once the quota is raised it comes up.
func TestQuotaExceededWaits(t *testing.T) {
	w := newWorld(t)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-storage", Namespace: w.hvNs},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("10Gi")}},
	}
	w.must(hv.Create(w.ctx, quota))
	// No kube-controller-manager runs here: play its quota controller, which fills the status
	// the quota admission plugin checks against.
	setQuota := func(hard string) {
		q := &corev1.ResourceQuota{}
		w.must(hv.Get(w.ctx, client.ObjectKeyFromObject(quota), q))
		q.Spec.Hard[corev1.ResourceRequestsStorage] = resource.MustParse(hard)
		w.must(hv.Update(w.ctx, q))
		q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("0")}}
		w.must(hv.Status().Update(w.ctx, q))
	}
	setQuota("10Gi")

	mr := w.machineRequest("quota-0")
	w.must(mgmt.Create(w.ctx, mr))
	c := w.waitMRCondition(mr, v1alpha1.ConditionDegraded, v1alpha1.ReasonQuotaExceeded)
	requireMentions(t, "Degraded message", c.Message, "ResourceQuota vm-storage", "requests.storage", "PersistentVolumeClaim "+w.hvNs+"/quota-0-disk-0")
	if got := w.get(mr); got.Status.Phase == v1alpha1.MachinePhaseFailed {
		t.Fatalf("a quota made the machine Failed: %s", got.Status.FailureMessage)
	}
	setQuota("100Gi")
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

// A disk Harvester's API rejects (an invalid storage class name) fails the machine with
// InvalidSpec naming the object, instead of retrying it forever as a Harvester outage.
func TestAdmissionRejectionIsInvalidSpec(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("bad-disk-0")
	mr.Spec.ExtraDisks = []v1alpha1.DiskSpec{{SizeGB: 5, StorageClass: "Not_A_Class"}}
	w.must(mgmt.Create(w.ctx, mr))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonInvalidSpec {
		t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
	}
	requireMentions(t, "failureMessage", got.Status.FailureMessage, "PersistentVolumeClaim "+w.hvNs+"/bad-disk-0-disk-1", "storageClassName")
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

// A problem only the user can fix (here the credentials Secret is missing) makes a machine with no
// VM wait, Degraded, then Failed with that reason after the grace period, so that the Butler
// bootstrap, which acts only on Failed, can act. Fixed (the Secret created), it is retried by
// itself and comes up. A Secret created within the grace period never fails the machine.
func TestConfigurationProblemFailsAfterGraceAndRetriesWhenFixed(t *testing.T) {
	w := newWorld(t)
	secret := &corev1.Secret{}
	w.must(mgmt.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "harvester-kubeconfig"}, secret))
	w.must(mgmt.Delete(w.ctx, secret))
	w.waitPCCondition(w.pc, v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonCredentialsUnavailable)

	mr := w.machineRequest("nocreds-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitMRCondition(mr, v1alpha1.ConditionDegraded, v1alpha1.ReasonCredentialsUnavailable)
	got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonCredentialsUnavailable || !strings.Contains(got.Status.FailureMessage, "--config-grace-period") {
		t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
	}
	if vms, pvcs, secrets := w.harvesterObjects(); vms+pvcs+secrets != 0 {
		t.Fatalf("created on Harvester without credentials: %d VMs, %d PVCs, %d Secrets", vms, pvcs, secrets)
	}

	w.must(mgmt.Create(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: w.ns},
		Data: map[string][]byte{"kubeconfig": harvesterConfig}}))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.waitEvent(mr, corev1.EventTypeNormal, "Retrying")
	w.deleteAndWait(mr)

	// Within the grace period: the Secret comes just after the MachineRequest.
	w.must(mgmt.Delete(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: w.ns}}))
	w.waitPCCondition(w.pc, v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonCredentialsUnavailable)
	late := w.machineRequest("latecreds-0")
	w.must(mgmt.Create(w.ctx, late))
	w.waitMRCondition(late, v1alpha1.ConditionDegraded, v1alpha1.ReasonCredentialsUnavailable)
	w.must(mgmt.Create(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: w.ns},
		Data: map[string][]byte{"kubeconfig": harvesterConfig}}))
	eventually(t, timeout, func() error {
		got := w.get(late)
		switch got.Status.Phase {
		case v1alpha1.MachinePhaseRunning:
			return nil
		case v1alpha1.MachinePhaseFailed:
			t.Fatalf("failed although the Secret came within the grace period: %s", got.Status.FailureMessage)
		}
		return fmt.Errorf("phase %s", got.Status.Phase)
	})
	w.deleteAndWait(late)
}

// A bootstrap run again after a failed one: the CLI deleted its management cluster, so the
// MachineRequest went without cleaning up, and a new one of the same namespace and name comes.
// The VM of the first run is taken over (with its disks and Secret), with a Warning event; a VM
// this provider made for a MachineRequest of another namespace stays a NameConflict.
func TestRerunTakesOverTheVMOfTheSameMachineRequestName(t *testing.T) {
	w := newWorld(t)
	first := w.machineRequest("rerun-0")
	w.must(mgmt.Create(w.ctx, first))
	w.waitPhase(first, v1alpha1.MachinePhaseRunning)
	vmUID := w.vmUIDs(w.hvNs)["rerun-0"]
	// As good as a deleted cluster: the MachineRequest goes, nothing is cleaned up.
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationSkipHarvesterCleanup + `":"true"}}}`)
	w.must(mgmt.Patch(w.ctx, w.get(first), client.RawPatch(types.MergePatchType, patch)))
	w.deleteAndWait(first)
	if w.vmUIDs(w.hvNs)["rerun-0"] != vmUID {
		t.Fatal("the first run's VM did not survive its MachineRequest")
	}

	again := w.machineRequest("rerun-0")
	w.must(mgmt.Create(w.ctx, again))
	got := w.waitPhase(again, v1alpha1.MachinePhaseRunning)
	if p, _ := got.RecordedPlacement(); got.Status.ProviderID != "harvester://"+string(vmUID) || p == nil || p.Name != "rerun-0" {
		t.Fatalf("providerID %s, placement %+v; want the first run's VM %s", got.Status.ProviderID, p, vmUID)
	}
	e := w.waitEvent(again, corev1.EventTypeWarning, v1alpha1.ReasonVMTakenOver)
	requireMentions(t, "event", e.Note, "VirtualMachine "+w.hvNs+"/rerun-0", "earlier MachineRequest "+w.ns+"/rerun-0")
	if vms, _, _ := w.harvesterObjects(); vms != 1 {
		t.Fatalf("%d VMs, want the one taken over", vms)
	}
	// Its disks and Secret are ours now too: deleting the machine removes everything.
	w.deleteAndWait(again)
	w.requireHarvesterEmpty("left on Harvester after deleting the machine that took over")

	// The same machine name from another namespace is someone else's machine.
	other := "other-" + rand.String(5)
	createNamespace(t, mgmt, other)
	mine := w.machineRequest("shared-0")
	w.must(mgmt.Create(w.ctx, mine))
	w.waitPhase(mine, v1alpha1.MachinePhaseRunning)
	pc := w.pc.DeepCopy()
	pc.ObjectMeta = metav1.ObjectMeta{Name: w.pc.Name, Namespace: other}
	w.must(mgmt.Create(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: other}, Data: map[string][]byte{"kubeconfig": harvesterConfig}}))
	w.must(mgmt.Create(w.ctx, pc))
	theirs := w.machineRequest("shared-0")
	theirs.Namespace = other
	w.must(mgmt.Create(w.ctx, theirs))
	failed := w.waitPhase(theirs, v1alpha1.MachinePhaseFailed)
	if failed.Status.FailureReason != v1alpha1.ReasonNameConflict {
		t.Fatalf("failure %s: %s", failed.Status.FailureReason, failed.Status.FailureMessage)
	}
	w.deleteAndWait(theirs)
	if got := w.get(mine); got.Status.Phase != v1alpha1.MachinePhaseRunning {
		t.Fatalf("the first machine is %s", got.Status.Phase)
	}
	w.deleteAndWait(mine)
}

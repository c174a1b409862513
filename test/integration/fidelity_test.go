package integration

// The provider under the simulator's faithful KubeVirt and Harvester (test/sim, the behaviours
// docs/simulator.md lists): start-up conditions that are no failure, clones that take time,
// metadata churn, lagging garbage collection, volumes Harvester refuses to delete, missing cloud-init
// Secrets, CDI images, quotas and the VM mutator.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// versionLog calls seen with every version of the objects of list's kind in namespace of the
// cluster at c's config, in order, until stop.
type versionLog struct {
	mu    sync.Mutex
	stop  func()
	done  chan struct{}
	items []client.Object
}

func recordVersions(t *testing.T, c client.WithWatch, list client.ObjectList, namespace string) *versionLog {
	t.Helper()
	w, err := c.Watch(t.Context(), list, client.InNamespace(namespace))
	if err != nil {
		t.Fatal(err)
	}
	r := &versionLog{stop: w.Stop, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(client.Object); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				r.mu.Lock()
				r.items = append(r.items, obj)
				r.mu.Unlock()
			}
		}
	}()
	t.Cleanup(r.end)
	return r
}

// end stops the recording and returns what it saw.
func (r *versionLog) end() {
	r.stop()
	<-r.done
}

func (r *versionLog) seen() []client.Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.items)
}

func watchClient(t *testing.T, harvesterSide bool) client.WithWatch {
	t.Helper()
	cfg, scheme := mgmtCfg, mgmt.Scheme()
	if harvesterSide {
		cfg, scheme = simulated.Config, hv.Scheme()
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// statusWrites counts the versions of a MachineRequest whose status differs from the one before.
func statusWrites(versions []client.Object) (writes int, reasons []string) {
	writes, reasons, _ = statusChanges(versions)
	return writes, reasons
}

// statusChanges is statusWrites with each changed status, as written, for a failure to show.
func statusChanges(versions []client.Object) (writes int, reasons []string, changed []string) {
	var last *v1alpha1.MachineRequestStatus
	for _, o := range versions {
		mr := o.(*v1alpha1.MachineRequest)
		if last != nil && !equality.Semantic.DeepEqual(*last, mr.Status) {
			writes++
			before, _ := json.Marshal(last)
			after, _ := json.Marshal(mr.Status)
			changed = append(changed, fmt.Sprintf("generation %d, deleting %t: %s -> %s", mr.Generation, mr.DeletionTimestamp != nil, before, after))
		}
		last = mr.Status.DeepCopy()
		if c := meta.FindStatusCondition(mr.Status.Conditions, v1alpha1.ConditionProgressing); c != nil && (len(reasons) == 0 || reasons[len(reasons)-1] != c.Reason) {
			reasons = append(reasons, c.Reason)
		}
	}
	return writes, reasons, changed
}

// warnings lists the reasons of the Warning events about the MachineRequest.
func (w *world) warnings(mr *v1alpha1.MachineRequest) []string {
	w.t.Helper()
	list := &corev1.EventList{}
	w.must(mgmt.List(w.ctx, list, client.InNamespace(w.ns)))
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == mr.Name && e.Type == corev1.EventTypeWarning {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

// A healthy boot on a faithful Harvester: the root disk is cloned (KubeVirt shows the VM
// WaitingForVolumeBinding, then ErrorUnschedulable while the scheduler waits for the disk),
// the VMI goes through Ready=False PodNotExists and GuestNotRunning, KubeVirt and Harvester
// rewrite the VM all along. None of it is a failure: no Warning event, no diagnosis, and the
// MachineRequest is written three times (its finalizer and placement, phase Creating with the VM's
// providerID, then Running) and its status not at all during
// a quick deletion. The VM keeps what Harvester's mutator gave it: the provider never
// rewrites its spec.
func TestHealthyBootIsQuiet(t *testing.T) {
	w := newWorld(t)
	vms := recordVersions(t, watchClient(t, true), &kubevirtv1.VirtualMachineList{}, w.hvNs)
	mrs := recordVersions(t, watchClient(t, false), &v1alpha1.MachineRequestList{}, w.ns)
	// A healthy boot starts from a ready ProviderConfig: its image imported (a machine created
	// earlier rightly waits, and says so, which is not what this test is about).
	w.waitPCCondition(w.pc, v1alpha1.ConditionImageReady, metav1.ConditionTrue, v1alpha1.ReasonCheckPassed)
	// The clone outlasts the provider's creates and KubeVirt's start even on a loaded machine (CI
	// runs this under -race), so that the start really goes through ErrorUnschedulable.
	w.annotateImage(w.imageName, sim.AnnotationCloneDelay, "3s")
	mr := w.machineRequest("quiet-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	mrs.end()
	vms.end()

	var printable []string
	for _, o := range vms.seen() {
		if s := string(o.(*kubevirtv1.VirtualMachine).Status.PrintableStatus); s != "" && (len(printable) == 0 || printable[len(printable)-1] != s) {
			printable = append(printable, s)
		}
	}
	t.Logf("KubeVirt's status of the VM: %v", printable)
	if !slices.Contains(printable, string(kubevirtv1.VirtualMachineStatusUnschedulable)) {
		t.Fatalf("the VM never showed ErrorUnschedulable while its disk was cloned (%v): the test does not test what it says", printable)
	}
	writes, reasons := statusWrites(mrs.seen())
	t.Logf("MachineRequest status writes until Running: %d, Progressing reasons %v", writes, reasons)
	for _, r := range reasons {
		if r != v1alpha1.ReasonPending && r != v1alpha1.ReasonVMCreating && r != v1alpha1.ReasonVMRunning {
			t.Errorf("Progressing went through %s on a healthy boot (%v)", r, reasons)
		}
	}
	if writes > 2 {
		t.Errorf("%d status writes until Running, want 2 (Creating with the VM's providerID, then Running)", writes)
	}
	// Every write of the MachineRequest, its metadata too: the finalizer and the placement go in
	// one write, before anything is created.
	if all := len(mrs.seen()) - 1; all > 3 {
		t.Errorf("%d writes of the MachineRequest until Running, want 3 (finalizer and placement, Creating, Running)", all)
	}
	if warnings := w.warnings(mr); len(warnings) > 0 {
		t.Errorf("Warning events on a healthy boot: %q", warnings)
	}
	// Harvester records the VM's MAC addresses once the VMI runs, on its own time: the machine may
	// be Running before it does.
	vm := &kubevirtv1.VirtualMachine{}
	eventually(t, 30*time.Second, func() error {
		if err := hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "quiet-0"}, vm); err != nil {
			return err
		}
		if vm.Annotations["harvesterhci.io/mac-address"] == "" {
			return fmt.Errorf("Harvester has not recorded the VM's MAC addresses yet (annotations %v)", vm.Annotations)
		}
		return nil
	})
	requests := vm.Spec.Template.Spec.Domain.Resources.Requests
	if vm.Generation != 1 || requests.Cpu().MilliValue() != 200 {
		t.Errorf("VM generation %d, requests %v: want Harvester's defaults, untouched", vm.Generation, requests)
	}
	// A deletion that goes as it should is not reported in the status (the API server's raise of
	// the generation included): the finalizer's removal is the only write.
	deletion := recordVersions(t, watchClient(t, false), &v1alpha1.MachineRequestList{}, w.ns)
	w.deleteAndWait(mr)
	deletion.end()
	if writes, reasons, changed := statusChanges(deletion.seen()); writes != 0 {
		t.Errorf("%d status writes during a quick deletion (Progressing reasons %v), want none:\n%s", writes, reasons, strings.Join(changed, "\n"))
	}
	w.requireHarvesterEmpty("left on Harvester")
}

// A start that takes longer than the start grace period is reported (VMNotStarting, with where it
// stands), and not before.
func TestSlowStartReportedAfterGracePeriod(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("slow-0")
	mr.Spec.Labels = map[string]string{sim.AnnotationFault: sim.FaultSlowBoot}
	w.must(mgmt.Create(w.ctx, mr))
	c := w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonVMNotStarting)
	requireMentions(t, "Progressing message", c.Message, "VirtualMachine "+w.hvNs+"/slow-0", "starting for more than "+startGrace.String(),
		"KubeVirt reports status Starting", "VirtualMachineInstance Schedul", "GuestNotRunning")
	e := w.waitEvent(mr, corev1.EventTypeWarning, v1alpha1.ReasonVMNotStarting)
	vm := &kubevirtv1.VirtualMachine{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "slow-0"}, vm))
	// Creation timestamps have 1s granularity.
	if took := e.EventTime.Sub(vm.CreationTimestamp.Time); took < startGrace-time.Second {
		t.Fatalf("VMNotStarting %s after the VM was created, before the start grace period %s", took, startGrace)
	}
	if n := len(w.warnings(mr)); n != 1 {
		t.Fatalf("%d Warning events, want the one VMNotStarting: %q (note %q)", n, w.warnings(mr), e.Note)
	}
	w.deleteAndWait(mr)
}

// (6) The provider creates the cloud-init Secret before the VM (which could not start without it),
// and recreates it if it goes while the VM starts; the machine comes up.
func TestCloudInitSecretBeforeTheVM(t *testing.T) {
	w := newWorld(t)
	c := watchClient(t, true)
	secrets := recordVersions(t, c, &corev1.SecretList{}, w.hvNs)
	vms := recordVersions(t, c, &kubevirtv1.VirtualMachineList{}, w.hvNs)
	mr := w.machineRequest("order-0")
	w.must(mgmt.Create(w.ctx, mr))
	var vmCreated time.Time
	eventually(t, timeout, func() error {
		if len(vms.seen()) == 0 {
			return fmt.Errorf("no VM yet")
		}
		vmCreated = time.Now()
		return nil
	})
	// Right away, before the kubelet could mount it.
	w.must(hv.Delete(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.hvNs, Name: "order-0-cloudinit"}}))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	secrets.end()
	vms.end()
	firstSecret := secrets.seen()[0].GetCreationTimestamp()
	firstVM := vms.seen()[0].GetCreationTimestamp()
	if firstSecret.After(firstVM.Time) {
		t.Fatalf("the VM (%s) was created before its cloud-init Secret (%s)", firstVM, firstSecret)
	}
	uids := map[string]bool{}
	for _, s := range secrets.seen() {
		uids[string(s.GetUID())] = true
	}
	if len(uids) != 2 {
		t.Fatalf("%d Secrets seen, want the first and the one recreated", len(uids))
	}
	t.Logf("Running %s after the VM was created, its Secret deleted and recreated meanwhile (IP %s)", time.Since(vmCreated).Round(time.Millisecond), got.Status.IPAddress)
	w.deleteAndWait(mr)
}

// Deletion waits until what it deletes is really gone: here the cloud-init Secret, held by a
// finalizer as a slow garbage collector would hold it. The machine is released only after.
func TestDeletionWaitsUntilTheSecretIsGone(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("gc-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	secret := &corev1.Secret{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "gc-0-cloudinit"}, secret))
	patch := client.MergeFrom(secret.DeepCopy())
	controllerutil.AddFinalizer(secret, "test.butlerlabs.dev/hold")
	w.must(hv.Patch(w.ctx, secret, patch))

	w.must(mgmt.Delete(w.ctx, mr))
	c := w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonDeleting)
	eventually(t, timeout, func() error {
		c = meta.FindStatusCondition(w.get(mr).Status.Conditions, v1alpha1.ConditionProgressing)
		if c == nil || !strings.Contains(c.Message, "Secret "+w.hvNs+"/gc-0-cloudinit") || strings.Contains(c.Message, "VirtualMachine") {
			return fmt.Errorf("Progressing = %+v, want it waiting for the Secret alone", c)
		}
		return nil
	})
	consistently(t, 2*time.Second, func() error {
		if err := mgmt.Get(w.ctx, client.ObjectKeyFromObject(mr), &v1alpha1.MachineRequest{}); err != nil {
			return fmt.Errorf("released while its Secret still exists: %w", err)
		}
		return nil
	})
	w.must(hv.Get(w.ctx, client.ObjectKeyFromObject(secret), secret))
	patch = client.MergeFrom(secret.DeepCopy())
	controllerutil.RemoveFinalizer(secret, "test.butlerlabs.dev/hold")
	w.must(hv.Patch(w.ctx, secret, patch))
	w.waitGone(&v1alpha1.MachineRequest{ObjectMeta: mr.ObjectMeta}, mgmt)
	w.requireHarvesterEmpty("left on Harvester")
}

// A disk of ours that another VM mounts is never deleted: the machine's VM goes, and the machine
// waits (DiskInUse, naming those VMs) instead of looping on Harvester's refusal; once they let go
// of the disk, deletion completes. One borrower is anyone's VM, the other carries our labels (of a
// machine of another management cluster): the provider finds VMs of both kinds in different caches.
func TestDiskAnotherVMUsesIsNeverDeleted(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("lend-0")
	mr.Spec.ExtraDisks = []v1alpha1.DiskSpec{{SizeGB: 5}}
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	borrower := func(name string, labels map[string]string) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.hvNs, Labels: labels},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptrTo(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				Spec: kubevirtv1.VirtualMachineInstanceSpec{Volumes: []kubevirtv1.Volume{{Name: "data", VolumeSource: kubevirtv1.VolumeSource{
					PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: "lend-0-disk-1"}}}}}},
			}},
		}
	}
	borrowers := []*kubevirtv1.VirtualMachine{
		borrower("borrower-anyone", nil),
		borrower("borrower-managed", map[string]string{harvester.LabelManagedBy: harvester.ManagedByValue, harvester.LabelMachineRequestUID: "of-another-management-cluster"}),
	}
	for _, b := range borrowers {
		w.must(hv.Create(w.ctx, b))
	}

	w.must(mgmt.Delete(w.ctx, mr))
	w.waitGone(&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: w.hvNs, Name: "lend-0"}}, hv)
	c := w.waitMRCondition(mr, v1alpha1.ConditionDegraded, v1alpha1.ReasonDiskInUse)
	requireMentions(t, "Degraded message", c.Message, "PersistentVolumeClaim "+w.hvNs+"/lend-0-disk-1", "VirtualMachine "+w.hvNs+"/borrower-anyone", "VirtualMachine "+w.hvNs+"/borrower-managed")
	w.waitEvent(mr, corev1.EventTypeWarning, v1alpha1.ReasonDiskInUse)
	consistently(t, 2*time.Second, func() error {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "lend-0-disk-1"}, pvc); err != nil {
			return fmt.Errorf("the disk the borrowers use: %w", err)
		}
		if pvc.DeletionTimestamp != nil {
			return fmt.Errorf("the disk the borrowers use is being deleted")
		}
		if n := len(w.warnings(mr)); n != 1 {
			return fmt.Errorf("%d Warning events, want the one DiskInUse: %q", n, w.warnings(mr))
		}
		return nil
	})
	for _, b := range borrowers {
		w.must(hv.Delete(w.ctx, b))
	}
	w.waitGone(&v1alpha1.MachineRequest{ObjectMeta: mr.ObjectMeta}, mgmt)
	for _, b := range borrowers {
		w.waitGone(b, hv)
	}
	w.requireHarvesterEmpty("left on Harvester")
}

// cdiImage creates a VirtualMachineImage of the CDI backend with its target storage class.
func (w *world) cdiImage(name string) string {
	w.t.Helper()
	class := "longhorn-cdi-" + rand.String(5)
	w.must(hv.Create(w.ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "driver.longhorn.io",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}))
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	img.SetNamespace(w.hvNs)
	img.SetName(name)
	_ = unstructured.SetNestedField(img.Object, "https://example.invalid/metal-amd64.qcow2", "spec", "url")
	_ = unstructured.SetNestedField(img.Object, harvester.BackendCDI, "spec", "backend")
	_ = unstructured.SetNestedField(img.Object, class, "spec", "targetStorageClassName")
	w.must(hv.Create(w.ctx, img))
	return class
}

// An image of the CDI backend: the preflight says so, the root disk is a DataVolume cloned from
// the image's PVC (as Harvester's UI creates it), the machine runs, and deletion removes the
// DataVolume and its PVC.
func TestCDIImageMachine(t *testing.T) {
	w := newWorld(t)
	class := w.cdiImage("talos-cdi")
	pc := w.otherPC("cdi", func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.ImageName = w.hvNs + "/talos-cdi" })
	c := w.waitPCCondition(pc, v1alpha1.ConditionImageReady, metav1.ConditionTrue, v1alpha1.ReasonCheckPassed)
	requireMentions(t, "ImageReady message", c.Message, "backend cdi", "DataVolumes", class)
	w.waitPCCondition(pc, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAllChecksPassed)

	mr := w.machineRequest("cdi-0")
	mr.Spec.ProviderRef.Name = pc.Name
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	dv := &cdiv1.DataVolume{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "cdi-0-disk-0"}, dv))
	if dv.Labels[harvester.LabelMachineRequestUID] != string(w.get(mr).UID) || dv.Spec.Source == nil || dv.Spec.Source.PVC == nil ||
		dv.Spec.Source.PVC.Name != "talos-cdi" || ptr.Deref(dv.Spec.Storage.StorageClassName, "") != class || dv.Status.Phase != cdiv1.Succeeded {
		t.Fatalf("root disk DataVolume: labels %v, spec %+v, phase %s", dv.Labels, dv.Spec, dv.Status.Phase)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "cdi-0-disk-0"}, pvc))
	if owner := metav1.GetControllerOf(pvc); owner == nil || owner.UID != dv.UID || pvc.Annotations[harvester.AnnotationImageID] != "" {
		t.Fatalf("root disk PVC: controller %+v, annotations %v", owner, pvc.Annotations)
	}
	if warnings := w.warnings(mr); len(warnings) > 0 {
		t.Errorf("Warning events: %q", warnings)
	}
	w.deleteAndWait(mr)
	for _, o := range []client.Object{&cdiv1.DataVolume{}, &corev1.PersistentVolumeClaim{}} {
		if err := hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "cdi-0-disk-0"}, o); err == nil {
			t.Fatalf("%T cdi-0-disk-0 left on Harvester", o)
		}
	}
	if vms, _, secrets := w.harvesterObjects(); vms+secrets != 0 {
		t.Fatalf("left: %d VMs, %d Secrets", vms, secrets)
	}
}

// An image of a backend the provider cannot clone from fails the preflight and the machine at
// once, with the backend named, and nothing is created.
func TestUnsupportedImageBackendFailsAtOnce(t *testing.T) {
	w := newWorld(t)
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	img.SetNamespace(w.hvNs)
	img.SetName("future")
	_ = unstructured.SetNestedField(img.Object, "https://example.invalid/metal-amd64.raw", "spec", "url")
	_ = unstructured.SetNestedField(img.Object, "objectstore", "spec", "backend")
	w.must(hv.Create(w.ctx, img))
	pc := w.otherPC("future", func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.ImageName = w.hvNs + "/future" })
	c := w.waitPCCondition(pc, v1alpha1.ConditionImageReady, metav1.ConditionFalse, v1alpha1.ReasonImageBackendUnsupported)
	requireMentions(t, "ImageReady message", c.Message, w.hvNs+"/future", `"objectstore"`, "backingimage", "cdi")

	mr := w.machineRequest("future-0")
	mr.Spec.Image = w.hvNs + "/future"
	w.must(mgmt.Create(w.ctx, mr))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonImageBackendUnsupported {
		t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
	}
	w.requireHarvesterEmpty("created on Harvester for an image that cannot work")
	w.deleteAndWait(mr)
}

// A ResourceQuota that counts VirtualMachines refuses the VM (403): the machine waits with
// QuotaExceeded naming the quota and the VM, and comes up once the quota allows.
func TestVMQuotaExceededWaits(t *testing.T) {
	w := newWorld(t)
	quota := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-count", Namespace: w.hvNs},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/virtualmachines.kubevirt.io": resource.MustParse("0")}},
	}
	w.must(hv.Create(w.ctx, quota))
	setQuota := func(hard string) {
		q := &corev1.ResourceQuota{}
		w.must(hv.Get(w.ctx, client.ObjectKeyFromObject(quota), q))
		q.Spec.Hard["count/virtualmachines.kubevirt.io"] = resource.MustParse(hard)
		w.must(hv.Update(w.ctx, q))
		q.Status = corev1.ResourceQuotaStatus{Hard: q.Spec.Hard, Used: corev1.ResourceList{"count/virtualmachines.kubevirt.io": resource.MustParse("0")}}
		w.must(hv.Status().Update(w.ctx, q))
	}
	setQuota("0")
	mr := w.machineRequest("counted-0")
	w.must(mgmt.Create(w.ctx, mr))
	c := w.waitMRCondition(mr, v1alpha1.ConditionDegraded, v1alpha1.ReasonQuotaExceeded)
	requireMentions(t, "Degraded message", c.Message, "ResourceQuota vm-count", "count/virtualmachines.kubevirt.io", "VirtualMachine "+w.hvNs+"/counted-0")
	setQuota("1")
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

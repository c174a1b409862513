package sim

// The behaviours of KubeVirt and Harvester the provider depends on, one test each, as
// docs/simulator.md lists them with the upstream source each follows.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// events returns the events about the object named name in the fixture's namespace.
func (f *fixture) events(name string) []corev1.Event {
	f.t.Helper()
	return f.eventsAbout(func(o corev1.ObjectReference) bool { return o.Name == name })
}

// eventsAbout returns the events in the fixture's namespace about the objects about selects.
func (f *fixture) eventsAbout(about func(corev1.ObjectReference) bool) []corev1.Event {
	f.t.Helper()
	list := &corev1.EventList{}
	f.must(f.hv.Client.List(f.ctx, list, client.InNamespace(f.ns)))
	var out []corev1.Event
	for _, e := range list.Items {
		if about(e.InvolvedObject) {
			out = append(out, e)
		}
	}
	return out
}

// findEvent returns the event of that type and reason about name, nil if there is none.
func (f *fixture) findEvent(name, eventType, reason string) *corev1.Event {
	for _, e := range f.events(name) {
		if e.Type == eventType && e.Reason == reason {
			return &e
		}
	}
	return nil
}

func (f *fixture) getVM(name string) *kubevirtv1.VirtualMachine {
	f.t.Helper()
	vm := &kubevirtv1.VirtualMachine{}
	f.must(f.hv.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, vm))
	return vm
}

// watch calls seen with every version of the objects of the lists' kinds in the fixture's
// namespace, in order, until the returned function is called (which waits for seen to return).
func (f *fixture) watch(seen func(client.Object), lists ...client.ObjectList) (stop func()) {
	f.t.Helper()
	c, err := client.NewWithWatch(f.hv.Config, client.Options{Scheme: Scheme()})
	f.must(err)
	events := make(chan client.Object)
	var watches []watch.Interface
	var forwarders sync.WaitGroup
	for _, l := range lists {
		w, err := c.Watch(f.ctx, l, client.InNamespace(f.ns))
		f.must(err)
		watches = append(watches, w)
		forwarders.Go(func() {
			for ev := range w.ResultChan() {
				if obj, ok := ev.Object.(client.Object); ok {
					events <- obj
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for obj := range events {
			seen(obj)
		}
	}()
	return func() {
		for _, w := range watches {
			w.Stop()
		}
		forwarders.Wait()
		close(events)
		<-done
	}
}

// appendNew appends s to seen unless it is seen's last element.
func appendNew(seen []string, s string) []string {
	if len(seen) == 0 || seen[len(seen)-1] != s {
		return append(seen, s)
	}
	return seen
}

// (1) virt-controller's start-up conditions: Ready=False PodNotExists before the launcher pod
// exists, GuestNotRunning while it starts, the pod's PodScheduled=False copied while the scheduler
// cannot place it (its root disk is still being cloned), Ready=True once running; the VM's
// printable status and status fields follow.
func TestVMIStartupConditionsFollowVirtController(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	pvc := f.rootDisk("cp-0-disk-0", "talos", f.classOf("talos"))
	f.must(h.Client.Create(f.ctx, pvc))
	var printable, readiness, unschedulable []string
	stop := f.watch(func(obj client.Object) {
		switch o := obj.(type) {
		case *kubevirtv1.VirtualMachine:
			printable = appendNew(printable, string(o.Status.PrintableStatus))
		case *kubevirtv1.VirtualMachineInstance:
			ready := vmiCondition(o, kubevirtv1.VirtualMachineInstanceReady)
			readiness = appendNew(readiness, fmt.Sprintf("%s/%s/%s: %s", o.Status.Phase, ready.Status, ready.Reason, ready.Message))
			if c := vmiCondition(o, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c.Status == corev1.ConditionFalse {
				unschedulable = appendNew(unschedulable, c.Reason+": "+c.Message)
			}
		}
	}, &kubevirtv1.VirtualMachineList{}, &kubevirtv1.VirtualMachineInstanceList{})
	f.vm("cp-0", pvc.Name, "vlan40", nil)
	f.eventually("running with an IP", func() error {
		vmi, err := f.getVMI("cp-0")
		if err != nil {
			return err
		}
		if !hasIPv4(vmi.Status.Interfaces) {
			return fmt.Errorf("no IP yet (phase %s)", vmi.Status.Phase)
		}
		return nil
	})
	stop()
	t.Logf("VM printableStatus: %v", printable)
	t.Logf("VMI phase/Ready: %q", readiness)
	for _, want := range []string{
		"Pending/False/PodNotExists: virt-launcher pod has not yet been scheduled",
		"Scheduling/False/GuestNotRunning: Guest VM is not reported as running",
		"Scheduled/False/GuestNotRunning: Guest VM is not reported as running",
		"Running/True/: ",
	} {
		if !slices.Contains(readiness, want) {
			t.Errorf("VMI never %q (saw %q)", want, readiness)
		}
	}
	// kube-scheduler's words, with the simulator's three nodes.
	const unbound = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
	if want := []string{corev1.PodReasonUnschedulable + ": " + unbound}; !slices.Equal(unschedulable, want) {
		t.Errorf("PodScheduled=False while the disk was cloned: %q, want %q", unschedulable, want)
	}
	// Starting comes after ErrorUnschedulable (the clone) and before Running; nothing after Running.
	errIdx, startIdx := slices.Index(printable, string(kubevirtv1.VirtualMachineStatusUnschedulable)), slices.Index(printable, string(kubevirtv1.VirtualMachineStatusStarting))
	if errIdx < 0 || startIdx < errIdx || printable[len(printable)-1] != string(kubevirtv1.VirtualMachineStatusRunning) {
		t.Errorf("printableStatus sequence %v: want ErrorUnschedulable, then Starting, then Running", printable)
	}
	vm := f.getVM("cp-0")
	if !vm.Status.Created || !vm.Status.Ready || vm.Status.RunStrategy != kubevirtv1.RunStrategyAlways {
		t.Errorf("VM status created=%v ready=%v runStrategy=%q", vm.Status.Created, vm.Status.Ready, vm.Status.RunStrategy)
	}
	// The VM's conditions follow the VMI's in a later status write (the guest agent connects after
	// the VMI runs): wait for it rather than read once.
	f.eventually("VM conditions copied from the VMI", func() error {
		conds := map[kubevirtv1.VirtualMachineConditionType]corev1.ConditionStatus{}
		for _, c := range f.getVM("cp-0").Status.Conditions {
			conds[c.Type] = c.Status
		}
		if conds[kubevirtv1.VirtualMachineReady] != corev1.ConditionTrue || conds[kubevirtv1.VirtualMachineConditionType(kubevirtv1.VirtualMachineInstanceAgentConnected)] != corev1.ConditionTrue ||
			conds[kubevirtv1.VirtualMachineConditionType(corev1.PodScheduled)] != "" {
			return fmt.Errorf("VM conditions %v: want Ready and AgentConnected copied from the VMI, PodScheduled gone", conds)
		}
		return nil
	})
	vmi, _ := f.getVMI("cp-0")
	var phases []kubevirtv1.VirtualMachineInstancePhase
	for _, p := range vmi.Status.PhaseTransitionTimestamps {
		phases = append(phases, p.Phase)
	}
	if !slices.Equal(phases, []kubevirtv1.VirtualMachineInstancePhase{kubevirtv1.Pending, kubevirtv1.Scheduling, kubevirtv1.Scheduled, kubevirtv1.Running}) {
		t.Errorf("phase transitions %v", phases)
	}
	if len(vmi.Status.ActivePods) != 1 || vmi.Labels[kubevirtv1.NodeNameLabel] != nodeName(1) {
		t.Errorf("activePods %v, labels %v", vmi.Status.ActivePods, vmi.Labels)
	}
	for _, e := range f.events("cp-0") {
		if e.Type == corev1.EventTypeWarning {
			t.Errorf("Warning event on a healthy start: %s %s", e.Reason, e.Message)
		}
	}
}

// (2) A root disk cloned from an image stays Pending for the clone delay, with the Normal events
// the PV controller and Longhorn's CSI provisioner record; a blank disk does not wait for a clone.
func TestRootDiskCloneTakesTime(t *testing.T) {
	f := newFixture(t)
	f.image("talos", nil)
	sc := f.classOf("talos")
	f.waitImported("talos")
	pvc := f.rootDisk("cp-0-disk-0", "talos", sc)
	blank := f.rootDisk("cp-0-disk-1", "talos", "")
	blank.Annotations, blank.Spec.StorageClassName = nil, nil
	start := time.Now()
	f.must(h.Client.Create(f.ctx, pvc))
	f.must(h.Client.Create(f.ctx, blank))
	f.waitBound(blank)
	if took := time.Since(start); took >= cloneDelay {
		t.Errorf("a blank disk took %s to bind, as long as a clone (%s)", took, cloneDelay)
	}
	got := &corev1.PersistentVolumeClaim{}
	f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(pvc), got))
	if got.Status.Phase != corev1.ClaimPending {
		t.Fatalf("the root disk is %q before its clone delay", got.Status.Phase)
	}
	f.waitBound(pvc)
	if took := time.Since(start); took < cloneDelay {
		t.Errorf("the root disk bound after %s, before the clone delay %s", took, cloneDelay)
	}
	f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(pvc), got))
	if got.Spec.VolumeName != "pvc-"+string(got.UID) || got.Annotations[annotationStorageProvisioner] != longhornProvisioner {
		t.Errorf("bound PVC: volumeName %q, annotations %v", got.Spec.VolumeName, got.Annotations)
	}
	for reason, want := range map[string]string{
		"ExternalProvisioning":  "Waiting for a volume to be created either by the external provisioner 'driver.longhorn.io' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.",
		"Provisioning":          fmt.Sprintf("External provisioner is provisioning volume for claim %q", f.ns+"/cp-0-disk-0"),
		"ProvisioningSucceeded": "Successfully provisioned volume pvc-" + string(got.UID),
	} {
		e := f.findEvent(pvc.Name, corev1.EventTypeNormal, reason)
		if e == nil || e.Message != want {
			t.Errorf("event %s: %+v, want message %q", reason, e, want)
		}
	}
	if e := f.findEvent(pvc.Name, corev1.EventTypeNormal, "ExternalProvisioning"); e != nil && e.Source.Component != componentPVC {
		t.Errorf("ExternalProvisioning recorded by %q", e.Source.Component)
	}
	for _, e := range f.events(pvc.Name) {
		if e.Type == corev1.EventTypeWarning {
			t.Errorf("Warning event while cloning: %s %s", e.Reason, e.Message)
		}
	}
}

func (f *fixture) waitImported(image string) {
	f.t.Helper()
	f.eventually("image "+image+" imported", func() error {
		img := &unstructured.Unstructured{}
		img.SetGroupVersionKind(VirtualMachineImageGVK)
		if err := f.hv.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: image}, img); err != nil {
			return err
		}
		if !imageImported(img) {
			return fmt.Errorf("conditions %v", conditionsOf(img))
		}
		return nil
	})
}

// (3) KubeVirt and Harvester rewrite VMs and VMIs on their own, with updates that carry a
// resourceVersion: a writer holding a copy read before gets a 409, a merge patch does not.
func TestMetadataChurnMakesStaleWritesConflict(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	pvc := f.rootDisk("cp-0-disk-0", "talos", f.classOf("talos"))
	f.must(h.Client.Create(f.ctx, pvc))
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Namespace: f.ns},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain:   kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{Interfaces: []kubevirtv1.Interface{{Name: "nic-1"}}}},
					Networks: []kubevirtv1.Network{{Name: "nic-1", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: f.ns + "/vlan40"}}}},
					Volumes: []kubevirtv1.Volume{{Name: "disk-0", VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
						PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}}},
				},
			},
		},
	}
	f.must(h.Client.Create(f.ctx, vm))
	stale := vm.DeepCopy()
	f.eventually("KubeVirt and Harvester annotated the running VM", func() error {
		got := f.getVM("cp-0")
		for _, k := range []string{kubevirtv1.ControllerAPILatestVersionObservedAnnotation, kubevirtv1.ControllerAPIStorageVersionObservedAnnotation, annotationRunStrategy, annotationMACAddress} {
			if got.Annotations[k] == "" {
				return fmt.Errorf("no annotation %s yet: %v", k, got.Annotations)
			}
		}
		if !slices.Contains(got.Finalizers, kubevirtv1.VirtualMachineControllerFinalizer) || !slices.Contains(got.Finalizers, harvesterVMFinalizer) {
			return fmt.Errorf("finalizers %v", got.Finalizers)
		}
		return nil
	})
	got := f.getVM("cp-0")
	macs := map[string]string{}
	f.must(json.Unmarshal([]byte(got.Annotations[annotationMACAddress]), &macs))
	if macs["nic-1"] == "" || macs["nic-1"] != got.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress {
		t.Errorf("mac-address annotation %v, the NIC's MAC %q", macs, got.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress)
	}
	if got.Annotations[annotationRunStrategy] != string(kubevirtv1.RunStrategyAlways) {
		t.Errorf("%s = %q", annotationRunStrategy, got.Annotations[annotationRunStrategy])
	}

	stale.Labels = map[string]string{"team": "platform"}
	if err := h.Client.Update(f.ctx, stale); !apierrors.IsConflict(err) {
		t.Fatalf("an update from a copy read before KubeVirt's and Harvester's writes: %v, want a Conflict", err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"platform"}},"spec":{"template":{"metadata":{"labels":{"tier":"gold"}}}}}`))
	f.must(h.Client.Patch(f.ctx, f.getVM("cp-0"), patch))
	f.eventually("template labels synced to the VMI", func() error {
		vmi, err := f.getVMI("cp-0")
		if err != nil {
			return err
		}
		if vmi.Labels["tier"] != "gold" || vmi.Labels["app"] != "db" || vmi.Labels[kubevirtv1.NodeNameLabel] != nodeName(1) {
			return fmt.Errorf("VMI labels %v", vmi.Labels)
		}
		return nil
	})
	vmi, err := f.getVMI("cp-0")
	f.must(err)
	staleVMI := vmi.DeepCopy()
	patch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"metadata":{"labels":{"tier":"silver"}}}}}`))
	f.must(h.Client.Patch(f.ctx, f.getVM("cp-0"), patch))
	f.eventually("the VMI relabelled", func() error {
		vmi, err := f.getVMI("cp-0")
		if err != nil {
			return err
		}
		if vmi.Labels["tier"] != "silver" {
			return fmt.Errorf("VMI labels %v", vmi.Labels)
		}
		return nil
	})
	staleVMI.Annotations = map[string]string{"mine": "x"}
	if err := h.Client.Update(f.ctx, staleVMI); !apierrors.IsConflict(err) {
		t.Fatalf("a stale update of the VMI: %v, want a Conflict", err)
	}
}

// (4) The garbage collector deletes a Secret the VM owns after the VM is gone, with a lag, not in
// the same instant; a Secret nobody owns stays.
func TestOwnedSecretCollectedWithLag(t *testing.T) {
	f := newFixture(t)
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Namespace: f.ns},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}
	f.must(h.Client.Create(f.ctx, vm))
	owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cp-0-cloudinit", Namespace: f.ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID}}}}
	unowned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keep-me", Namespace: f.ns}}
	f.must(h.Client.Create(f.ctx, owned))
	f.must(h.Client.Create(f.ctx, unowned))
	f.eventually("VM finalized by KubeVirt and Harvester", func() error {
		if got := f.getVM("cp-0"); len(got.Finalizers) < 2 {
			return fmt.Errorf("finalizers %v", got.Finalizers)
		}
		return nil
	})
	f.must(h.Client.Delete(f.ctx, vm))
	f.eventually("VM gone", func() error {
		err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(vm), &kubevirtv1.VirtualMachine{})
		switch {
		case err == nil:
			return errors.New("the VM still exists")
		case !apierrors.IsNotFound(err):
			return err
		}
		return nil
	})
	vmGone := time.Now()
	if err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(owned), &corev1.Secret{}); err != nil {
		t.Fatalf("the owned Secret went with its VM, in the same instant: %v", err)
	}
	f.eventually("owned Secret collected", func() error {
		err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(owned), &corev1.Secret{})
		switch {
		case err == nil:
			return errors.New("the owned Secret still exists")
		case !apierrors.IsNotFound(err):
			return err
		}
		return nil
	})
	if lag := time.Since(vmGone); lag < gcDelay/2 {
		t.Errorf("collected %s after its owner, want about %s", lag, gcDelay)
	}
	f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(unowned), &corev1.Secret{}))
}

// (5) Harvester's PVC webhook refuses to delete a volume a VM uses (409 and its message, since
// v1.8.0) instead of leaving it Terminating; once the VM goes the volume can go, and the garbage
// collector is never refused.
func TestVolumeInUseCannotBeDeleted(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	f.readyMachine("cp-0")
	root := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cp-0-disk-0"}}
	err := h.Client.Delete(f.ctx, root)
	want := fmt.Sprintf(`admission webhook "%s" denied the request: can not delete the volume cp-0-disk-0 which is currently attached to VM: %s/cp-0`, validatorName, f.ns)
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("deleting a volume a VM uses: %v, want a Conflict %q", err, want)
	}
	f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(root), root))
	if root.DeletionTimestamp != nil {
		t.Fatal("the refused volume is Terminating")
	}

	// A volume a VM owns is refused with 422.
	vm := f.getVM("cp-0")
	owned := f.rootDisk("cp-0-owned", "talos", "")
	owned.Annotations, owned.Spec.StorageClassName = nil, nil
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID}}
	f.must(h.Client.Create(f.ctx, owned))
	if err := h.Client.Delete(f.ctx, owned); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "currently owned by these VMs: cp-0") {
		t.Fatalf("deleting a volume a VM owns: %v", err)
	}
	// The garbage collector may delete anything.
	spare := f.rootDisk("spare", "talos", "")
	spare.Annotations, spare.Spec.StorageClassName = nil, nil
	spare.OwnerReferences = owned.OwnerReferences
	f.must(h.Client.Create(f.ctx, spare))
	f.must(h.Sim.gcClient.Delete(f.ctx, spare))

	patch := client.MergeFrom(vm.DeepCopy())
	vm.Annotations[harvester.AnnotationRemovedPVCs] = "cp-0-disk-0"
	f.must(h.Client.Patch(f.ctx, vm, patch))
	f.must(h.Client.Delete(f.ctx, vm))
	f.eventually("the volume removed with its VM", func() error {
		err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(root), &corev1.PersistentVolumeClaim{})
		switch {
		case err == nil:
			return errors.New("the root disk still exists")
		case !apierrors.IsNotFound(err):
			return err
		}
		return nil
	})
}

// (6) A VM whose cloud-init Secret does not exist does not start: the launcher pod waits for its
// volume (the kubelet's FailedMount), the VMI stays Scheduling with Ready=False GuestNotRunning,
// and it starts once the Secret exists.
func TestVMWithoutCloudInitSecretDoesNotStart(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	pvc := f.rootDisk("cp-0-disk-0", "talos", f.classOf("talos"))
	f.must(h.Client.Create(f.ctx, pvc))
	f.waitBound(pvc)
	vm := f.vmObject("cp-0", pvc.Name, "vlan40", nil)
	vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, kubevirtv1.Volume{Name: "cloudinitdisk", VolumeSource: kubevirtv1.VolumeSource{
		CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: &corev1.LocalObjectReference{Name: "cp-0-cloudinit"}}}})
	f.must(h.Client.Create(f.ctx, vm))

	var pod string
	f.eventually("FailedMount on the launcher pod", func() error {
		list := &corev1.EventList{}
		f.must(h.Client.List(f.ctx, list, client.InNamespace(f.ns)))
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Pod" && strings.HasPrefix(e.InvolvedObject.Name, "virt-launcher-cp-0-") && e.Reason == "FailedMount" {
				if want := `MountVolume.SetUp failed for volume "cloudinitdisk-udata" : secret "cp-0-cloudinit" not found`; e.Message != want || e.Type != corev1.EventTypeWarning || e.Source.Component != componentKubelet {
					t.Fatalf("FailedMount event %+v, want a kubelet Warning %q", e, want)
				}
				pod = e.InvolvedObject.Name
				return nil
			}
		}
		return fmt.Errorf("no FailedMount event")
	})
	time.Sleep(3 * bootDelay)
	vmi, err := f.getVMI("cp-0")
	f.must(err)
	ready := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceReady)
	if vmi.Status.Phase != kubevirtv1.Scheduling || ready.Reason != kubevirtv1.GuestNotRunningReason || f.getVM("cp-0").Status.PrintableStatus != kubevirtv1.VirtualMachineStatusStarting {
		t.Fatalf("without its Secret: VMI %s, Ready %+v, VM %s", vmi.Status.Phase, ready, f.getVM("cp-0").Status.PrintableStatus)
	}
	t.Logf("launcher pod %s waits for its Secret", pod)
	f.must(h.Client.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cp-0-cloudinit", Namespace: f.ns}, Data: map[string][]byte{"userdata": []byte("#cloud-config\n")}}))
	f.eventually("running once the Secret exists", func() error {
		vmi, err := f.getVMI("cp-0")
		if err != nil {
			return err
		}
		if vmi.Status.Phase != kubevirtv1.Running {
			return fmt.Errorf("VMI %s", vmi.Status.Phase)
		}
		return nil
	})
}

// (7) Images get the storage class Harvester names lh-<image uid>, Longhorn's way of shortening
// a name applies to longer ones, and volumes cloned from an image must use it.
func TestImageStorageClassIsNamedAfterItsUID(t *testing.T) {
	f := newFixture(t)
	img := f.image("talos", nil)
	sc := f.classOf("talos")
	f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(img), img))
	if sc != "lh-"+string(img.GetUID()) {
		t.Fatalf("status.storageClassName %q, want lh-%s", sc, img.GetUID())
	}
	class := &storagev1.StorageClass{}
	f.must(h.Client.Get(f.ctx, client.ObjectKey{Name: sc}, class))
	if class.Provisioner != longhornProvisioner || class.Parameters["backingImage"] != "vmi-"+string(img.GetUID()) {
		t.Fatalf("storage class %s: provisioner %s, parameters %v", sc, class.Provisioner, class.Parameters)
	}
	for name, want := range map[string]string{
		"lh-0d2c1a7e-4a8e-4a4c-9d47-8c0f1b2a3c4d":      "lh-0d2c1a7e-4a8e-4a4c-9d47-8c0f1b2a3c4d",
		"lh-restored-image-with-a-rather-long-name-01": "lh-restored-image-with-a-rather-", // and 8 hex digits
		"LH-Upper": "lh-upper",
	} {
		if got := longhornName(name); !strings.HasPrefix(got, want) || len(got) > longhornNameMaxLength {
			t.Errorf("longhornName(%q) = %q, want %q... of at most %d characters", name, got, want, longhornNameMaxLength)
		}
	}
	wrong := f.rootDisk("wrong", "talos", "longhorn-talos")
	if err := h.Client.Create(f.ctx, wrong); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), sc) {
		t.Fatalf("a volume of image talos of another class: %v", err)
	}
}

// Harvester v0.3.0 to v1.7.x named an image's storage class longhorn-<image name> (and reported it
// in status.storageClassName): a Harvester simulated with LegacyImageStorageClassNames does, so a
// root disk of that class, as the published provider guesses it, binds; one of the lh-<uid>
// class of later versions is refused.
func TestLegacyImageStorageClassNames(t *testing.T) {
	legacy, err := StartHarvester(t.Context(), Options{Sim: Config{CloneDelay: cloneDelay, LegacyImageStorageClassNames: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = legacy.Stop() })
	f := newFixtureOn(t, legacy)
	img := f.image("talos-1-9", nil)
	if sc := f.classOf("talos-1-9"); sc != "longhorn-talos-1-9" {
		t.Fatalf("status.storageClassName %q, want longhorn-talos-1-9", sc)
	}
	f.must(legacy.Client.Get(f.ctx, client.ObjectKeyFromObject(img), img))
	class := &storagev1.StorageClass{}
	f.must(legacy.Client.Get(f.ctx, client.ObjectKey{Name: "longhorn-talos-1-9"}, class))
	if class.Provisioner != longhornProvisioner || class.Parameters["backingImage"] != "vmi-"+string(img.GetUID()) {
		t.Fatalf("storage class longhorn-talos-1-9: provisioner %s, parameters %v", class.Provisioner, class.Parameters)
	}
	newer := longhornName("lh-" + string(img.GetUID()))
	if err := legacy.Client.Create(f.ctx, f.rootDisk("newer", "talos-1-9", newer)); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "longhorn-talos-1-9") {
		t.Fatalf("a volume of image talos-1-9 in class %s: %v", newer, err)
	}
	guessed := f.rootDisk("guessed", "talos-1-9", "longhorn-talos-1-9")
	f.must(legacy.Client.Create(f.ctx, guessed))
	f.waitBound(guessed)
}

// (7) Images of the CDI backend import into a DataVolume of their target storage class, and a
// root disk is a DataVolume cloned from the image's PVC, as Harvester's VM controller creates it:
// a plain annotated PVC is refused. KubeVirt starts no launcher pod until the clone has succeeded.
func TestCDIImagesCloneThroughDataVolumes(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	target := "longhorn-cdi-" + f.ns
	f.must(h.Client.Create(f.ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: target}, Provisioner: longhornProvisioner,
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)}))
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(VirtualMachineImageGVK)
	img.SetNamespace(f.ns)
	img.SetName("talos-cdi")
	_ = unstructured.SetNestedField(img.Object, "https://example.invalid/talos.raw", "spec", "url")
	_ = unstructured.SetNestedField(img.Object, backendCDI, "spec", "backend")
	_ = unstructured.SetNestedField(img.Object, target, "spec", "targetStorageClassName")
	f.must(h.Client.Create(f.ctx, img))
	f.waitImported("talos-cdi")
	if sc := f.classOf("talos-cdi"); sc != target {
		t.Fatalf("CDI image storage class %q, want its target %q", sc, target)
	}
	imageDV, err := h.Sim.getDataVolume(f.ctx, f.ns, "talos-cdi")
	f.must(err)
	imagePVC := &corev1.PersistentVolumeClaim{}
	f.must(h.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "talos-cdi"}, imagePVC))
	if imageDV.Status.Phase != cdiv1.Succeeded || imagePVC.Status.Phase != corev1.ClaimBound || metav1.GetControllerOf(imagePVC).UID != imageDV.UID {
		t.Fatalf("image DataVolume %s, PVC %s owned by %+v", imageDV.Status.Phase, imagePVC.Status.Phase, metav1.GetControllerOf(imagePVC))
	}

	annotated := f.rootDisk("plain", "talos-cdi", target)
	if err := h.Client.Create(f.ctx, annotated); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "DataVolume") {
		t.Fatalf("an annotated PVC of a CDI image: %v", err)
	}
	dv := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-0-disk-0", Namespace: f.ns, Labels: map[string]string{"owner": "me"}, Annotations: map[string]string{"note": "x"}},
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: f.ns, Name: "talos-cdi"}},
			Storage: &cdiv1.StorageSpec{StorageClassName: ptr.To(target), Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}}},
		},
	}
	start := time.Now()
	f.must(h.Client.Create(f.ctx, dv))
	f.vm("cp-0", dv.Name, "vlan40", nil)
	var phases, printable []string
	f.eventually("running from the cloned disk", func() error {
		// The VMI (and its launcher pod) first: the DataVolume read after it is as new.
		vmi, err := f.getVMI("cp-0")
		if err != nil {
			return err
		}
		launcher := h.Sim.launcherOf(vmi)
		got := &cdiv1.DataVolume{}
		if err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(dv), got); err != nil {
			return err
		}
		phases = appendNew(phases, string(got.Status.Phase))
		printable = appendNew(printable, string(f.getVM("cp-0").Status.PrintableStatus))
		if launcher != nil && got.Status.Phase != cdiv1.Succeeded {
			t.Fatalf("a launcher pod before the clone succeeded: VMI %s, DataVolume %s", vmi.Status.Phase, got.Status.Phase)
		}
		if vmi.Status.Phase != kubevirtv1.Running {
			return fmt.Errorf("VMI %s, DataVolume %s", vmi.Status.Phase, got.Status.Phase)
		}
		return nil
	})
	if took := time.Since(start); took < cloneDelay {
		t.Errorf("running %s after the clone started, before the clone delay %s", took, cloneDelay)
	}
	if !slices.Contains(phases, string(cdiv1.CloneInProgress)) || phases[len(phases)-1] != string(cdiv1.Succeeded) {
		t.Errorf("DataVolume phases %v", phases)
	}
	if !slices.Contains(printable, string(kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding)) {
		t.Errorf("printableStatus %v: want WaitingForVolumeBinding while the clone runs", printable)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	f.must(h.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: dv.Name}, pvc))
	owner := metav1.GetControllerOf(pvc)
	if owner == nil || owner.Kind != "DataVolume" || pvc.Labels["owner"] != "me" || pvc.Labels[cdiLabelKey] != cdiLabelValue ||
		pvc.Annotations["note"] != "x" || ptr.Deref(pvc.Spec.StorageClassName, "") != target {
		t.Fatalf("the DataVolume's PVC: owner %+v, labels %v, annotations %v, class %v", owner, pvc.Labels, pvc.Annotations, pvc.Spec.StorageClassName)
	}
	if e := f.findEvent(dv.Name, corev1.EventTypeNormal, "CloneSucceeded"); e == nil {
		t.Error("no CloneSucceeded event")
	}
}

// (8) Harvester's VM mutator derives requests and guest memory from the limits with its default
// overcommit settings, and fills in the CPU topology, the termination grace period and a MAC
// address; the API server's quota admission refuses what exceeds a ResourceQuota (403).
func TestVMMutatorDefaultsAndQuotaRejections(t *testing.T) {
	f := newFixture(t)
	vm := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Namespace: f.ns},
		Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Domain: kubevirtv1.DomainSpec{
				CPU: &kubevirtv1.CPU{Cores: 4},
				Resources: kubevirtv1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}},
				Devices: kubevirtv1.Devices{Interfaces: []kubevirtv1.Interface{{Name: "nic-1"}}},
			},
		}}},
	}
	f.must(h.Client.Create(f.ctx, vm))
	d := vm.Spec.Template.Spec.Domain
	requests := d.Resources.Requests
	// 4 CPUs at 1000% overcommit; 16Gi at 150%, truncated to MiB.
	if cpu, mem := requests.Cpu(), requests.Memory(); cpu.MilliValue() != 400 || mem.Value() != 16*(1<<30)*100/150/(1<<20)*(1<<20) {
		t.Errorf("requests %v", requests)
	}
	if d.Memory == nil || d.Memory.Guest == nil || d.Memory.Guest.Cmp(resource.MustParse("16Gi")) != 0 {
		t.Errorf("guest memory %+v, want the limit", d.Memory)
	}
	if d.CPU.Cores != 4 || d.CPU.Sockets != 1 || d.CPU.Threads != 1 || d.CPU.MaxSockets != 1 {
		t.Errorf("CPU %+v", d.CPU)
	}
	if ptr.Deref(vm.Spec.Template.Spec.TerminationGracePeriodSeconds, 0) != defaultTerminationGracePeriod {
		t.Errorf("terminationGracePeriodSeconds %v", vm.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}
	if mac := d.Devices.Interfaces[0].MacAddress; len(mac) != 17 || mac[1] != '2' && mac[1] != '6' && mac[1] != 'a' && mac[1] != 'e' {
		t.Errorf("MAC %q: want a locally administered unicast address", mac)
	}

	// Quotas are enforced by the API server once their status is filled in (the quota
	// controller's part, which nothing here plays).
	quota := func(name string, hard corev1.ResourceList) {
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
		f.must(h.Client.Create(f.ctx, q))
		used := corev1.ResourceList{}
		for k := range hard {
			used[k] = resource.MustParse("0")
		}
		if _, counted := hard["count/virtualmachines.kubevirt.io"]; counted {
			used["count/virtualmachines.kubevirt.io"] = resource.MustParse("1")
		}
		q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
		f.must(h.Client.Status().Update(f.ctx, q))
	}
	quota("vm-count", corev1.ResourceList{"count/virtualmachines.kubevirt.io": resource.MustParse("1")})
	quota("vm-storage", corev1.ResourceList{corev1.ResourceRequestsStorage: resource.MustParse("5Gi")})
	second := vm.DeepCopy()
	second.ObjectMeta = metav1.ObjectMeta{Name: "cp-1", Namespace: f.ns}
	second.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress = ""
	if err := h.Client.Create(f.ctx, second); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: vm-count") {
		t.Fatalf("a VM over the count quota: %v", err)
	}
	disk := f.rootDisk("big", "talos", "")
	disk.Annotations, disk.Spec.StorageClassName = nil, nil
	if err := h.Client.Create(f.ctx, disk); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: vm-storage, requested: requests.storage=10Gi") {
		t.Fatalf("a PVC over the storage quota: %v", err)
	}
}

// (1) A VMI whose PVC does not exist (yet) stays Pending: virt-controller creates no pod, says so in
// Synchronized=False and PodScheduled=False FailedPvcNotFound and a Normal event, and KubeVirt shows
// the VM FailedPvcNotFound; once the PVC appears, the VM starts.
func TestVMIWaitsForItsPVCToAppear(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	f.vm("cp-0", "cp-0-disk-0", "vlan40", nil)
	want := fmt.Sprintf("PVC %s/cp-0-disk-0 does not exist, waiting for it to appear", f.ns)
	f.eventually("VMI waiting for its PVC", func() error {
		vmi, err := f.getVMI("cp-0")
		if err != nil {
			return err
		}
		synced := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceSynchronized)
		scheduled := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
		if vmi.Status.Phase != kubevirtv1.Pending || synced.Reason != reasonFailedPVCNotFound || synced.Message != want ||
			scheduled.Reason != corev1.PodReasonUnschedulable || scheduled.Message != want || h.Sim.launcherOf(vmi) != nil {
			return fmt.Errorf("VMI %s, conditions %+v", vmi.Status.Phase, vmi.Status.Conditions)
		}
		if got := f.getVM("cp-0").Status.PrintableStatus; got != kubevirtv1.VirtualMachineStatusPvcNotFound {
			return fmt.Errorf("VM %s", got)
		}
		if e := f.findEvent("cp-0", corev1.EventTypeNormal, reasonFailedPVCNotFound); e == nil || e.Message != want || e.InvolvedObject.Kind != "VirtualMachineInstance" {
			return fmt.Errorf("event %+v", e)
		}
		return nil
	})
	f.must(h.Client.Create(f.ctx, f.rootDisk("cp-0-disk-0", "talos", f.classOf("talos"))))
	f.eventually("running once the PVC exists", func() error {
		vmi, err := f.getVMI("cp-0")
		if err != nil {
			return err
		}
		if vmi.Status.Phase != kubevirtv1.Running {
			return fmt.Errorf("VMI %s", vmi.Status.Phase)
		}
		if c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceSynchronized); c.Status != "" {
			return fmt.Errorf("Synchronized still %+v", c)
		}
		return nil
	})
}

// (n) The scheduler places a virt-launcher pod only on a node its node selection fits: the VMI's
// required node affinity and nodeSelector, and KubeVirt's kubevirt.io/schedulable=true, judged as
// kube-scheduler's NodeAffinity filter judges them. A VMI no node fits stays Scheduling with the
// scheduler's PodScheduled=False Unschedulable copied in, the VM shows ErrorUnschedulable, and the
// pod gets FailedScheduling events; once a node is labelled to fit, the pod is placed there.
func TestVMIsPlacedOnANodeItsSelectionFits(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	sc := f.classOf("talos")
	const zone = "topology.kubernetes.io/zone"
	label := func(node, value string) { f.labelNode(node, zone, value) }
	// Nodes are the cluster's, shared by every test: put them back as they were.
	t.Cleanup(func() { label("harvester-node-2", ""); label("harvester-node-3", "") })
	label("harvester-node-2", "zone-b")
	inZone := func(name, value string, mutate func(*kubevirtv1.VirtualMachineInstanceSpec)) *kubevirtv1.VirtualMachine {
		pvc := f.rootDisk(name+"-disk-0", "talos", sc)
		f.must(h.Client.Create(f.ctx, pvc))
		f.waitBound(pvc) // the scheduler's first word is then about the node selection
		vm := f.vmObject(name, pvc.Name, "vlan40", nil)
		vm.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zone, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}}}},
		}}}
		if mutate != nil {
			mutate(&vm.Spec.Template.Spec)
		}
		f.must(h.Client.Create(f.ctx, vm))
		return vm
	}
	runsOn := func(name, node string) {
		f.eventually(name+" running on "+node, func() error {
			vmi, err := f.getVMI(name)
			if err != nil {
				return err
			}
			if vmi.Status.Phase != kubevirtv1.Running || vmi.Status.NodeName != node || vmi.Labels[kubevirtv1.NodeNameLabel] != node {
				return fmt.Errorf("VMI %s on node %q (label %q)", vmi.Status.Phase, vmi.Status.NodeName, vmi.Labels[kubevirtv1.NodeNameLabel])
			}
			for _, n := range vmi.Status.ActivePods {
				if n != node {
					return fmt.Errorf("activePods %v", vmi.Status.ActivePods)
				}
			}
			return nil
		})
	}

	inZone("in-zone-b", "zone-b", nil)
	runsOn("in-zone-b", "harvester-node-2")

	// A nodeSelector is honoured with the affinity: zone-b and the host node-3 fit no node.
	inZone("pinned", "zone-b", func(s *kubevirtv1.VirtualMachineInstanceSpec) {
		s.NodeSelector = map[string]string{corev1.LabelHostname: "harvester-node-3"}
	})

	inZone("in-zone-d", "zone-d", nil)
	const noFit = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
	for _, name := range []string{"in-zone-d", "pinned"} {
		f.eventually(name+" unschedulable", func() error {
			vmi, err := f.getVMI(name)
			if err != nil {
				return err
			}
			c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled))
			if vmi.Status.Phase != kubevirtv1.Scheduling || vmi.Status.NodeName != "" || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || c.Message != noFit {
				return fmt.Errorf("VMI %s on %q, PodScheduled %+v", vmi.Status.Phase, vmi.Status.NodeName, c)
			}
			if s := f.getVM(name).Status.PrintableStatus; s != kubevirtv1.VirtualMachineStatusUnschedulable {
				return fmt.Errorf("VM printableStatus %s", s)
			}
			for _, e := range f.launcherEvents(name) {
				if e.Type == corev1.EventTypeWarning && e.Reason == "FailedScheduling" && e.Message == noFit && e.Source.Component == "default-scheduler" {
					return nil
				}
			}
			return fmt.Errorf("no FailedScheduling event on the virt-launcher pod: %v", f.launcherEvents(name))
		})
	}

	// A node labelled into zone-d takes the waiting pod, and KubeVirt drops PodScheduled.
	label("harvester-node-3", "zone-d")
	runsOn("in-zone-d", "harvester-node-3")
	vmi, _ := f.getVMI("in-zone-d")
	if c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)); c.Status != "" {
		t.Errorf("PodScheduled %+v kept once the pod was placed", c)
	}
	if vmi, _ := f.getVMI("pinned"); vmi.Status.NodeName != "" {
		t.Errorf("a VMI that requires zone-b and host node-3 runs on %s", vmi.Status.NodeName)
	}
}

// launcherEvents returns the events about the virt-launcher pod of the VMI named vmi.
func (f *fixture) launcherEvents(vmi string) []corev1.Event {
	f.t.Helper()
	return f.eventsAbout(func(o corev1.ObjectReference) bool {
		return o.Kind == "Pod" && strings.HasPrefix(o.Name, "virt-launcher-"+vmi+"-")
	})
}

// kube-scheduler's FailedScheduling messages as the simulator writes them: reasons counted per
// node and sorted, then preemption's verdict per node (one per node, however many resources it
// lacks).
func TestFitErrorSaysWhatTheSchedulerSays(t *testing.T) {
	selection, memory, gpu := []string{reasonNodeSelection}, []string{reasonNoMemory}, []string{reasonInsufficient + "nvidia.com/GA102GL_A10"}
	for _, tc := range []struct {
		perNode [][]string
		want    string
	}{
		{[][]string{memory, memory, memory},
			"0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."},
		{[][]string{selection, selection, selection},
			"0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."},
		{[][]string{selection, memory, selection},
			"0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."},
		{[][]string{gpu, append(slices.Clone(memory), gpu...), selection},
			"0/3 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/GA102GL_A10. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."},
	} {
		if got := fitError(3, tc.perNode); got != tc.want {
			t.Errorf("fitError(%v) =\n%q, want\n%q", tc.perNode, got, tc.want)
		}
	}
}

// (p) Dedicated CPUs: Harvester's VM mutator gives a VM with dedicatedCpuPlacement its limits as
// requests (no overcommit) and adds the CPU manager label to each required node-affinity term
// (a new term where there is none), so the VMI runs only on a node whose CPU manager is on;
// KubeVirt refuses pinned CPUs that are not whole.
func TestVMMutatorPinsDedicatedCPUs(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	sc := f.classOf("talos")
	const zone = "topology.kubernetes.io/zone"
	label := f.labelNode
	t.Cleanup(func() { label("harvester-node-2", zone, ""); label("harvester-node-3", kubevirtv1.CPUManager, "") })
	label("harvester-node-2", zone, "zone-b")
	pinned := corev1.NodeSelectorRequirement{Key: kubevirtv1.CPUManager, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}
	dedicated := func(name string, zoned bool, cpu string) (*kubevirtv1.VirtualMachine, error) {
		pvc := f.rootDisk(name+"-disk-0", "talos", sc)
		f.must(h.Client.Create(f.ctx, pvc))
		vm := f.vmObject(name, pvc.Name, "vlan40", nil)
		d := &vm.Spec.Template.Spec.Domain
		d.CPU = &kubevirtv1.CPU{Cores: 2, DedicatedCPUPlacement: true}
		d.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("2Gi")}
		if zoned {
			vm.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-b"}}}}},
			}}}
		}
		return vm, h.Client.Create(f.ctx, vm)
	}

	vm, err := dedicated("pinned", false, "2")
	f.must(err)
	d := vm.Spec.Template.Spec.Domain
	if !equality.Semantic.DeepEqual(d.Resources.Requests, d.Resources.Limits) {
		t.Errorf("requests %v, want the limits %v: no overcommit for dedicated CPUs", d.Resources.Requests, d.Resources.Limits)
	}
	terms := vm.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || !equality.Semantic.DeepEqual(terms[0].MatchExpressions, []corev1.NodeSelectorRequirement{pinned}) {
		t.Errorf("required terms %+v, want one with the CPU manager label alone", terms)
	}
	zoned, err := dedicated("pinned-in-zone-b", true, "2")
	f.must(err)
	terms = zoned.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchExpressions) != 2 || terms[0].MatchExpressions[0].Key != zone || !equality.Semantic.DeepEqual(terms[0].MatchExpressions[1], pinned) {
		t.Errorf("required terms %+v, want the zone and the CPU manager label in one term", terms)
	}

	// No node has its CPU manager on: both wait; node-3 turned on takes the one without a zone.
	for _, name := range []string{"pinned", "pinned-in-zone-b"} {
		f.eventually(name+" unschedulable", func() error {
			if s := f.getVM(name).Status.PrintableStatus; s != kubevirtv1.VirtualMachineStatusUnschedulable {
				return fmt.Errorf("VM printableStatus %s", s)
			}
			return nil
		})
	}
	label("harvester-node-3", kubevirtv1.CPUManager, "true")
	f.eventually("pinned running on harvester-node-3", func() error {
		vmi, err := f.getVMI("pinned")
		if err != nil {
			return err
		}
		if vmi.Status.Phase != kubevirtv1.Running || vmi.Status.NodeName != "harvester-node-3" {
			return fmt.Errorf("VMI %s on %q", vmi.Status.Phase, vmi.Status.NodeName)
		}
		return nil
	})
	if vmi, _ := f.getVMI("pinned-in-zone-b"); vmi.Status.NodeName != "" {
		t.Errorf("a VMI that requires zone-b and the CPU manager runs on %s", vmi.Status.NodeName)
	}

	// Pinned CPUs must be whole.
	if _, err := dedicated("half-a-cpu", false, "1500m"); err == nil || !strings.Contains(err.Error(), "provided resources CPU requests must be an interger") {
		t.Errorf("a VM pinning 1.5 CPUs: %v, want KubeVirt's refusal", err)
	}
}

// labelNode sets the label key of a node to value, or removes it when value is empty. Nodes are
// the cluster's, shared by every test: put them back as they were.
func (f *fixture) labelNode(node, key, value string) {
	f.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if value == "" {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, key)
	}
	f.must(h.Client.Patch(f.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch))))
}

// A VM with a persistent TPM gets KubeVirt's state PVC before its launcher pod: labelled with the
// VM's name, 10Mi of vmstate-persistence, owned by the VM, named in the VMI's volume status, and
// collected with the VM.
func TestPersistentTPMStateClaim(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	sc := f.classOf("talos")
	withTPM := func(name string) *kubevirtv1.VirtualMachine {
		pvc := f.rootDisk(name+"-disk-0", "talos", sc)
		f.must(h.Client.Create(f.ctx, pvc))
		vm := f.vmObject(name, pvc.Name, "vlan40", nil)
		vm.Spec.Template.Spec.Domain.Devices.TPM = &kubevirtv1.TPMDevice{Persistent: ptr.To(true)}
		f.must(h.Client.Create(f.ctx, vm))
		return vm
	}
	stateClaims := func(vm string) []corev1.PersistentVolumeClaim {
		list := &corev1.PersistentVolumeClaimList{}
		f.must(h.Client.List(f.ctx, list, client.InNamespace(f.ns), client.MatchingLabels{StateClaimLabel: vm}))
		return list.Items
	}
	vm := withTPM("sealed")
	var claim corev1.PersistentVolumeClaim
	f.eventually("the VMI running on its state claim", func() error {
		vmi, err := f.getVMI("sealed")
		if err != nil {
			return err
		}
		claims := stateClaims("sealed")
		if len(claims) != 1 || vmi.Status.Phase != kubevirtv1.Running {
			return fmt.Errorf("VMI %s with %d state claims", vmi.Status.Phase, len(claims))
		}
		claim = claims[0]
		for _, v := range vmi.Status.VolumeStatus {
			if v.PersistentVolumeClaimInfo != nil && v.PersistentVolumeClaimInfo.ClaimName == claim.Name {
				return nil
			}
		}
		return fmt.Errorf("the VMI's volume status %+v does not name %s", vmi.Status.VolumeStatus, claim.Name)
	})
	owner := metav1.GetControllerOf(&claim)
	if !strings.HasPrefix(claim.Name, "persistent-state-for-sealed-") || owner == nil || owner.Kind != "VirtualMachine" || owner.UID != vm.UID ||
		ptr.Deref(claim.Spec.StorageClassName, "") != StateStorageClass || !claim.Spec.Resources.Requests.Storage().Equal(resource.MustParse("10Mi")) {
		t.Errorf("state claim %s: owner %+v, class %v, size %v", claim.Name, owner, ptr.Deref(claim.Spec.StorageClassName, ""), claim.Spec.Resources.Requests.Storage())
	}

	// No state claim for a VM without persistent state.
	plainDisk := f.rootDisk("plain-disk-0", "talos", sc)
	f.must(h.Client.Create(f.ctx, plainDisk))
	plain := f.vm("plain", plainDisk.Name, "vlan40", nil)
	f.eventually("plain running", func() error {
		vmi, err := f.getVMI(plain.Name)
		if err != nil {
			return err
		}
		if vmi.Status.Phase != kubevirtv1.Running {
			return fmt.Errorf("VMI %s", vmi.Status.Phase)
		}
		return nil
	})
	if claims := stateClaims(plain.Name); len(claims) != 0 {
		t.Errorf("a VM without persistent state has state claims %v", claims)
	}

	f.must(h.Client.Delete(f.ctx, vm))
	f.eventually("the state claim collected with its VM", func() error {
		if claims := stateClaims("sealed"); len(claims) > 0 {
			return fmt.Errorf("%d left", len(claims))
		}
		return nil
	})
}

// KubeVirt refuses Secure Boot without SMM (an EFI bootloader with secureBoot unset is Secure
// Boot), and, without its VMPersistentState gate, persistent TPM and EFI.
func TestFirmwareRefusal(t *testing.T) {
	efi := func(secureBoot *bool, persistent bool) *kubevirtv1.Firmware {
		e := &kubevirtv1.EFI{SecureBoot: secureBoot}
		if persistent {
			e.Persistent = ptr.To(true)
		}
		return &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: e}}
	}
	smm := &kubevirtv1.Features{SMM: &kubevirtv1.FeatureState{}}
	for name, tc := range map[string]struct {
		firmware *kubevirtv1.Firmware
		features *kubevirtv1.Features
		tpm      *kubevirtv1.TPMDevice
		gateOff  bool
		want     string
	}{
		"BIOS":                            {},
		"plain UEFI":                      {firmware: efi(ptr.To(false), false)},
		"secureBoot unset is Secure Boot": {firmware: efi(nil, false), want: "SecureBoot requires SMM"},
		"Secure Boot with SMM":            {firmware: efi(ptr.To(true), false), features: smm},
		"SMM turned off":                  {firmware: efi(ptr.To(true), false), features: &kubevirtv1.Features{SMM: &kubevirtv1.FeatureState{Enabled: ptr.To(false)}}, want: "SecureBoot requires SMM"},
		"persistent EFI, gate on":         {firmware: efi(ptr.To(false), true)},
		"persistent EFI, gate off":        {firmware: efi(ptr.To(false), true), gateOff: true, want: "VMPersistentState feature gate is not enabled"},
		"persistent TPM, gate off":        {tpm: &kubevirtv1.TPMDevice{Persistent: ptr.To(true)}, gateOff: true, want: "VMPersistentState feature gate is not enabled"},
		"an ephemeral TPM needs no gate":  {tpm: &kubevirtv1.TPMDevice{}, gateOff: true},
	} {
		t.Run(name, func(t *testing.T) {
			vm := &kubevirtv1.VirtualMachine{Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
			d := &vm.Spec.Template.Spec.Domain
			d.Firmware, d.Features, d.Devices.TPM = tc.firmware, tc.features, tc.tpm
			got := firmwareRefusal(vm, tc.gateOff)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("firmwareRefusal = %q, want %q", got, tc.want)
			}
		})
	}
}

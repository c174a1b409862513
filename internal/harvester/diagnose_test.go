package harvester

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// diagnosisCluster is a Harvester of objs whose event lists may select by involved object, as the
// API server's field selectors do.
func diagnosisCluster(t *testing.T, objs ...client.Object) *engine {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(objs...).
		WithIndex(&corev1.Event{}, "involvedObject.name", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Name} }).
		WithIndex(&corev1.Event{}, "involvedObject.uid", func(o client.Object) []string { return []string{string(o.(*corev1.Event).InvolvedObject.UID)} }).
		Build()
	return newTestCluster(c)
}

func TestDiagnoseOnlyFromRealFailureSignals(t *testing.T) {
	spec := testSpec()
	vm := BuildVirtualMachine(spec)
	vm.UID = "vm-uid"
	claim := func(phase corev1.PersistentVolumeClaimPhase) *corev1.PersistentVolumeClaim {
		pvc := BuildRootDiskClaim(spec, ImageInfo{Ref: spec.Image, StorageClassName: "lh-1"})
		pvc.UID, pvc.Status.Phase = "pvc-uid", phase
		return pvc
	}
	vmi := func(phase kubevirtv1.VirtualMachineInstancePhase, conds ...kubevirtv1.VirtualMachineInstanceCondition) *kubevirtv1.VirtualMachineInstance {
		return &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Namespace: vm.Namespace},
			Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: phase, Conditions: conds, ActivePods: map[types.UID]string{"pod-uid": ""}}}
	}
	cond := func(t, reason, message string) kubevirtv1.VirtualMachineInstanceCondition {
		return kubevirtv1.VirtualMachineInstanceCondition{Type: kubevirtv1.VirtualMachineInstanceConditionType(t), Status: corev1.ConditionFalse, Reason: reason, Message: message}
	}
	event := func(name string, uid types.UID, reason, message string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name + "." + reason, Namespace: vm.Namespace}, Type: corev1.EventTypeWarning, Reason: reason, Message: message,
			InvolvedObject: corev1.ObjectReference{Name: name, UID: uid}, LastTimestamp: metav1.Now()}
	}
	const unbound = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
	halted := vm.DeepCopy()
	halted.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
	halted.Annotations[annotationInsufficientResourceQuota] = `pods "virt-launcher-x" is forbidden: exceeded quota: project-quota, requested: limits.memory=4Gi, used: limits.memory=30Gi, limited: limits.memory=32Gi`
	zonedSpec := testSpec()
	zonedSpec.NodeSelector = map[string]string{"zone": "zone-d"}
	zoned := BuildVirtualMachine(zonedSpec)
	failing := vm.DeepCopy()
	failing.Status.Conditions = []kubevirtv1.VirtualMachineCondition{{Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: "Error creating VMI"}}
	// How long the VMI has already been seen with its disks bound and the scheduler's stale
	// "unbound PVCs" reason.
	unscheduledFor := map[string]time.Duration{
		"no room once the disk is bound":                            schedulingGrace,
		"disk just bound: the scheduler has not had its chance yet": schedulingGrace / 2,
	}
	for name, tc := range map[string]struct {
		vm      *kubevirtv1.VirtualMachine
		vmi     *kubevirtv1.VirtualMachineInstance
		objs    []client.Object
		reason  string // "" for no diagnosis
		mention string
	}{
		"no launcher pod yet": {vm, vmi(kubevirtv1.Pending, cond("Ready", kubevirtv1.PodNotExistsReason, "virt-launcher pod has not yet been scheduled")),
			[]client.Object{claim(corev1.ClaimBound)}, "", ""},
		"guest not running yet": {vm, vmi(kubevirtv1.Scheduled, cond("Ready", kubevirtv1.GuestNotRunningReason, "Guest VM is not reported as running")),
			[]client.Object{claim(corev1.ClaimBound)}, "", ""},
		"disk being cloned": {vm, vmi(kubevirtv1.Scheduling, cond("PodScheduled", corev1.PodReasonUnschedulable, unbound)),
			[]client.Object{claim(corev1.ClaimPending)}, "", ""},
		"disk that cannot bind": {vm, vmi(kubevirtv1.Scheduling, cond("PodScheduled", corev1.PodReasonUnschedulable, unbound)),
			[]client.Object{claim(corev1.ClaimPending), event(spec.Name+"-disk-0", "pvc-uid", "ProvisioningFailed", `storageclass.storage.k8s.io "lh-1" not found`)},
			reasons.VolumeNotBound, `"lh-1" not found`},
		"no room": {vm, vmi(kubevirtv1.Scheduling, cond("PodScheduled", corev1.PodReasonUnschedulable, "0/3 nodes are available: 3 Insufficient memory.")),
			[]client.Object{claim(corev1.ClaimBound)}, reasons.VMUnschedulable, "Insufficient memory"},
		// KubeVirt keeps the first reason it copied; the pod's latest event has the current one,
		// read once the scheduler has had schedulingGrace to place the pod.
		"no room once the disk is bound": {vm, vmi(kubevirtv1.Scheduling, cond("PodScheduled", corev1.PodReasonUnschedulable, unbound)),
			[]client.Object{claim(corev1.ClaimBound), event("virt-launcher-x", "pod-uid", "FailedScheduling", "0/3 nodes are available: 3 Insufficient cpu.")},
			reasons.VMUnschedulable, "Insufficient cpu"},
		"disk just bound: the scheduler has not had its chance yet": {vm, vmi(kubevirtv1.Scheduling, cond("PodScheduled", corev1.PodReasonUnschedulable, unbound)),
			[]client.Object{claim(corev1.ClaimBound), event("virt-launcher-x", "pod-uid", "FailedScheduling", "0/3 nodes are available: 3 Insufficient cpu.")},
			"", ""},
		"no node carries the VM's labels": {zoned, vmi(kubevirtv1.Scheduling, cond("PodScheduled", corev1.PodReasonUnschedulable,
			"0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")),
			[]client.Object{claim(corev1.ClaimBound)}, reasons.VMUnschedulable, "labels the VM requires (zone=zone-d): label the nodes"},
		"KubeVirt's Failure condition": {failing, nil, []client.Object{claim(corev1.ClaimBound)}, reasons.VMNotStarting, "FailedCreate: Error creating VMI"},
		"launcher pod over quota": {vm, vmi(kubevirtv1.Pending, cond("Synchronized", "FailedCreate",
			`failed to create virtual machine pod: pods "virt-launcher-x" is forbidden: exceeded quota: vm-quota, requested: limits.memory=4Gi, used: limits.memory=0, limited: limits.memory=1Gi`)),
			[]client.Object{claim(corev1.ClaimBound)}, reasons.QuotaExceeded, "ResourceQuota vm-quota"},
		"disk deleted": {vm, vmi(kubevirtv1.Pending), nil, reasons.VolumeMissing, "was deleted outside the provider"},
		"stopped by Harvester for its quota": {halted, nil, []client.Object{claim(corev1.ClaimBound)}, reasons.QuotaExceeded,
			"Raise ResourceQuota project-quota"},
	} {
		t.Run(name, func(t *testing.T) {
			m := diagnosisCluster(t, tc.objs...)
			ctx := context.Background()
			if seen, ok := unscheduledFor[name]; ok {
				m.staleUnschedulable.store(tc.vmi, time.Now().Add(-seen))
			}
			d := m.diagnose(ctx, tc.vm, tc.vmi, m.pendingDisks(ctx, tc.vm))
			switch {
			case tc.reason == "" && d != nil:
				t.Fatalf("diagnosis %+v of a normal start", d)
			case tc.reason != "" && (d == nil || d.Reason != tc.reason || !strings.Contains(d.Message, tc.mention)):
				t.Fatalf("diagnosis %+v, want %s mentioning %q", d, tc.reason, tc.mention)
			}
		})
	}
}

func TestStartingSaysWhereTheStartStands(t *testing.T) {
	vm := &kubevirtv1.VirtualMachine{Status: kubevirtv1.VirtualMachineStatus{PrintableStatus: kubevirtv1.VirtualMachineStatusStarting}}
	vmi := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Scheduling, Conditions: []kubevirtv1.VirtualMachineInstanceCondition{
		{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse, Reason: "GuestNotRunning", Message: "Guest VM is not reported as running"},
	}}}
	got := starting(vm, vmi, []string{"PersistentVolumeClaim vms/cp-0-disk-1"})
	want := "KubeVirt reports status Starting; VirtualMachineInstance Scheduling, Ready=False GuestNotRunning: Guest VM is not reported as running; disks not bound yet: PersistentVolumeClaim vms/cp-0-disk-1"
	if got != want {
		t.Fatalf("starting = %q\nwant       %q", got, want)
	}
	if got := starting(&kubevirtv1.VirtualMachine{}, nil, nil); got != "KubeVirt reports status (none yet); no VirtualMachineInstance yet" {
		t.Fatalf("starting without a VMI = %q", got)
	}
}

// Harvester's PVC webhook refuses to delete a volume in use with 409 (v1.8.0+) or 422 (before);
// either is recognised, and a conflict of another kind is not.
func TestInUseRefusal(t *testing.T) {
	refusal := func(code int32, reason metav1.StatusReason) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason,
			Message: `admission webhook "validator.harvesterhci.io" denied the request: can not delete the volume cp-0-disk-1 which is currently attached to VM: vms/other`}}
	}
	for name, err := range map[string]error{"v1.8.0+": refusal(http.StatusConflict, metav1.StatusReasonConflict), "v1.7": refusal(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid)} {
		if got := inUseRefusal(err); !strings.HasPrefix(got, "Harvester refuses to delete it: can not delete the volume cp-0-disk-1") || !strings.Contains(got, "vms/other") {
			t.Errorf("%s: inUseRefusal = %q", name, got)
		}
	}
	if got := inUseRefusal(apierrors.NewConflict(corev1.Resource("persistentvolumeclaims"), "cp-0-disk-1", nil)); got != "" {
		t.Errorf("an optimistic-locking conflict taken for a refusal: %q", got)
	}
}

func TestBuildRootDiskDataVolume(t *testing.T) {
	spec := testSpec()
	image := ImageInfo{Ref: ObjectRef{Namespace: "images", Name: "talos-cdi"}, Backend: BackendCDI, StorageClassName: "longhorn-cdi"}
	dv := BuildRootDiskDataVolume(spec, image)
	claim := BuildRootDiskClaim(spec, image)
	size := dv.Spec.Storage.Resources.Requests[corev1.ResourceStorage]
	if dv.Name != claim.Name || dv.Namespace != claim.Namespace || dv.Labels[LabelMachineRequestUID] != string(spec.Owner.UID) ||
		dv.Annotations[AnnotationImageID] != "" || dv.Spec.Source.PVC.Namespace != "images" || dv.Spec.Source.PVC.Name != "talos-cdi" ||
		*dv.Spec.Storage.StorageClassName != "longhorn-cdi" || size.Value() != spec.DiskGB<<30 || *dv.Spec.Storage.VolumeMode != corev1.PersistentVolumeBlock {
		t.Fatalf("DataVolume %+v", dv)
	}
	if got := dataVolumeMismatch(dv, BuildRootDiskDataVolume(spec, image)); got != "" {
		t.Fatalf("mismatch with itself: %s", got)
	}
	other := image
	other.Ref.Name = "talos-2"
	if got := dataVolumeMismatch(dv, BuildRootDiskDataVolume(spec, other)); !strings.Contains(got, `is cloned from "images/talos-cdi", not "images/talos-2"`) {
		t.Fatalf("mismatch = %q", got)
	}
}

// An image whose backend the provider cannot clone from is refused before anything is created.
func TestCheckImageBackend(t *testing.T) {
	for backend, ok := range map[string]bool{BackendBackingImage: true, BackendCDI: true, "objectstore": false} {
		err := checkImageUsable(ImageInfo{Ref: ObjectRef{"default", "img"}, Backend: backend, Imported: true}, 10)
		if p, failed := errkind.AsPermanent(err); ok == failed || (!ok && (p.Reason != reasons.ImageBackendUnsupported || !strings.Contains(p.Message, `"objectstore"`))) {
			t.Errorf("backend %s: %v", backend, err)
		}
	}
}

// A new disk is Pending while its image is cloned: its events are read only once it has been
// Pending for claimEventsGrace, then at most every claimEventsInterval, and the observation says
// when to look again.
func TestPendingDiskEventsAreReadAfterTheirGrace(t *testing.T) {
	spec := testSpec()
	vm := BuildVirtualMachine(spec)
	pvc := BuildRootDiskClaim(spec, ImageInfo{Ref: spec.Image, StorageClassName: "lh-1"})
	pvc.UID, pvc.Status.Phase, pvc.CreationTimestamp = "pvc-uid", corev1.ClaimPending, metav1.Now()
	warning := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: pvc.Name + ".1", Namespace: vm.Namespace}, Type: corev1.EventTypeWarning,
		Reason: "ProvisioningFailed", Message: `storageclass.storage.k8s.io "lh-1" not found`, InvolvedObject: corev1.ObjectReference{Name: pvc.Name, UID: pvc.UID}, LastTimestamp: metav1.Now()}
	m := diagnosisCluster(t, pvc, warning)
	ctx := context.Background()
	if d := m.diagnoseDisks(ctx, vm); d != nil {
		t.Fatalf("diagnosis %+v of a disk created just now", d)
	}
	if at := claimsWorthDiagnosingAt(m.pendingDisks(ctx, vm)); at.Before(time.Now()) || at.After(time.Now().Add(claimEventsGrace)) {
		t.Fatalf("look again at %s, want within %s", at, claimEventsGrace)
	}

	pvc.CreationTimestamp = metav1.NewTime(time.Now().Add(-claimEventsGrace))
	m = diagnosisCluster(t, pvc, warning)
	if d := m.diagnoseDisks(ctx, vm); d == nil || d.Reason != reasons.VolumeNotBound {
		t.Fatalf("diagnosis %+v of a disk Pending for %s with a warning, want %s", d, claimEventsGrace, reasons.VolumeNotBound)
	}
	if !claimsWorthDiagnosingAt(m.pendingDisks(ctx, vm)).IsZero() {
		t.Fatal("a disk past its grace still asks to be looked at again")
	}
	if m.claimEventsWorthReading(pvc) {
		t.Fatalf("events read again within %s", claimEventsInterval)
	}
}

// What the diagnosis remembers of a VMI or a disk belongs to that very object: one recreated under
// the same name starts afresh, and a deleted machine's VMI and disks are forgotten.
func TestDiagnosisMemoryIsPerObjectAndForgottenWithTheMachine(t *testing.T) {
	m := &machines{}
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "cp-0"}}
	vm.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{}
	for _, claim := range []string{"cp-0-disk-0", "cp-0-disk-1"} {
		vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, kubevirtv1.Volume{Name: claim, VolumeSource: kubevirtv1.VolumeSource{
			PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}})
	}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "cp-0", UID: "vmi-1"}}
	disk := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "cp-0-disk-1", UID: "pvc-1"}}
	at := time.Now().Add(-time.Minute)
	m.staleUnschedulable.store(vmi, at)
	m.claimEventsRead.store(disk, at)

	if got, ok := m.claimEventsRead.load(disk); !ok || !got.Equal(at) {
		t.Fatalf("claimEventsRead.load = %v, %v; want %v", got, ok, at)
	}
	recreated := disk.DeepCopy()
	recreated.UID = "pvc-2"
	if _, ok := m.claimEventsRead.load(recreated); ok {
		t.Error("a disk recreated under the same name inherits what was remembered of the old one")
	}
	if first, seen := m.staleUnschedulable.loadOrStore(vmi, time.Now()); !seen || !first.Equal(at) {
		t.Errorf("staleUnschedulable.loadOrStore = %v, %v; want the first time %v", first, seen, at)
	}

	m.forgetDiagnosis(vm)
	if _, ok := m.staleUnschedulable.load(vmi); ok {
		t.Error("the deleted machine's VMI is still remembered")
	}
	if _, ok := m.claimEventsRead.load(disk); ok {
		t.Error("the deleted machine's disk is still remembered")
	}
}

// Warning events are read from their cache once it serves (one watch per cluster), and listed live
// otherwise (credentials without watch on events).
func TestWarningsReadFromTheirCacheWhenItServes(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "cp-0-disk-0", UID: "pvc-uid"}}
	event := func(msg string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "cp-0-disk-0." + msg}, Type: corev1.EventTypeWarning, Message: msg,
			InvolvedObject: corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "vms", Name: pvc.Name, UID: pvc.UID}}
	}
	byUID := func(o client.Object) []string { return []string{string(o.(*corev1.Event).InvolvedObject.UID)} }
	live := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(event("live")).WithIndex(&corev1.Event{}, eventsByObjectUID, byUID).Build()
	cached := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(event("cached")).WithIndex(&corev1.Event{}, eventsByObjectUID, byUID).Build()
	for name, tc := range map[string]struct {
		caches map[string]client.Reader
		want   string
	}{
		"cache serves":         {map[string]client.Reader{warningsCache: cached}, "cached"},
		"no watch on events":   {nil, "live"},
		"only the owned cache": {map[string]client.Reader{ownedCache: cached}, "live"},
	} {
		t.Run(name, func(t *testing.T) {
			m := NewCluster(clustercache.NewCluster(live, tc.caches, nil, "https://harvester.example:6443", "vms")).(*engine)
			if got := m.latestWarning(context.Background(), pvc); got != tc.want {
				t.Fatalf("warning %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSchedulingAdviceFitsTheScheduler(t *testing.T) {
	spec := testSpec()
	spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "zone-a", "rack": "r1"}
	zoned := BuildVirtualMachine(spec)
	pinned := BuildVirtualMachine(testSpec())
	pinned.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: "node-3"}
	dedicatedSpec := testSpec()
	dedicatedSpec.DedicatedCPUs = true
	dedicated := BuildVirtualMachine(dedicatedSpec)
	devicesSpec := testSpec()
	devicesSpec.HostDevices, devicesSpec.GPUs = []string{"intel.com/1533", "nvidia.com/GA102GL_A10"}, []string{"nvidia.com/NVIDIA_A2-4Q"}
	withDevices := BuildVirtualMachine(devicesSpec)
	// As Harvester v1.8's pcidevices mutator leaves it: the vGPU moved to hostDevices, its name
	// kept.
	converted := BuildVirtualMachine(devicesSpec)
	converted.Spec.Template.Spec.Domain.Devices.HostDevices = append(converted.Spec.Template.Spec.Domain.Devices.HostDevices,
		kubevirtv1.HostDevice{Name: "gpu-1", DeviceName: "nvidia.com/NVIDIA_A2-4Q"})
	converted.Spec.Template.Spec.Domain.Devices.GPUs = nil
	prefixSpec := testSpec()
	prefixSpec.GPUs = []string{"nvidia.com/gpu"}
	prefixed := BuildVirtualMachine(prefixSpec)
	const (
		gpuShort     = "0/3 nodes are available: 3 Insufficient nvidia.com/NVIDIA_A2-4Q. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
		deviceAndRAM = "0/3 nodes are available: 1 Insufficient memory, 2 Insufficient nvidia.com/GA102GL_A10. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
		otherShort   = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.shared. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
	)
	const (
		mismatch = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
		full     = "0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
		both     = "0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't match Pod's node affinity/selector."
	)
	for name, tc := range map[string]struct {
		vm            *kubevirtv1.VirtualMachine
		why           string
		want, notWant []string
	}{
		"no node with the labels":        {zoned, mismatch, []string{"(rack=r1, topology.kubernetes.io/zone=zone-a): label the nodes"}, []string{"Free CPU"}},
		"no room":                        {zoned, full, []string{"Free CPU or memory"}, []string{"label the nodes"}},
		"no room where the labels are":   {zoned, both, []string{"label the nodes", "Free CPU or memory"}, nil},
		"a VM pinned by nodeSelector":    {pinned, mismatch, []string{"(kubernetes.io/hostname=node-3)"}, nil},
		"dedicated CPUs, no CPU manager": {dedicated, mismatch, []string{"spec.dedicatedCpuPlacement", "Enable CPU Manager"}, nil},
		"dedicated CPUs, no room":        {dedicated, full, []string{"Free CPU or memory"}, []string{"CPU manager"}},
		"shared CPUs":                    {zoned, mismatch, nil, []string{"CPU manager"}},
		"no vGPU of the type free": {withDevices, gpuShort, []string{"device nvidia.com/NVIDIA_A2-4Q (spec.gpus[0])", "Advanced > vGPU Devices", "free one"},
			[]string{"Free CPU", "PCI Devices", "spec.hostDevices"}},
		"no PCI device free, nor memory": {withDevices, deviceAndRAM, []string{"device nvidia.com/GA102GL_A10 (spec.hostDevices[1])", "Advanced > PCI Devices, Enable Passthrough", "Free CPU or memory"},
			[]string{"vGPU", "intel.com/1533"}},
		"a vGPU Harvester v1.8 moved to hostDevices": {converted, gpuShort, []string{"(spec.gpus[0])", "Advanced > vGPU Devices"}, []string{"spec.hostDevices"}},
		"another resource of a longer name":          {prefixed, otherShort, []string{"Free CPU or memory"}, []string{"asks for device"}},
		"devices, no node with the labels":           {withDevices, mismatch, []string{"label the nodes"}, []string{"asks for device", "Free CPU"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := schedulingAdvice(tc.vm, tc.why)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("advice %q lacks %q", got, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("advice %q says %q", got, w)
				}
			}
		})
	}
}

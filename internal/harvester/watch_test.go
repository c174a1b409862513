package harvester

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// Only updates that can change a MachineRequest's status wake it: the provider's own writes
// (labels, owner references, annotations) and resyncs must not cause reconcile storms.
func TestWatchedUpdatesThatMatter(t *testing.T) {
	vmi := &kubevirtv1.VirtualMachineInstance{Status: kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Scheduled}}
	running := vmi.DeepCopy()
	running.Status.Phase = kubevirtv1.Running
	withIP := running.DeepCopy()
	withIP.Status.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: NICName, IP: "10.0.0.1"}}
	relabelled := withIP.DeepCopy()
	relabelled.Labels = map[string]string{"x": "y"}
	vm := &kubevirtv1.VirtualMachine{}
	started := vm.DeepCopy()
	started.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
	annotated := vm.DeepCopy()
	annotated.Annotations = map[string]string{AnnotationRemovedPVCs: "a"}
	pvc := &corev1.PersistentVolumeClaim{}
	bound := pvc.DeepCopy()
	bound.Status.Phase = corev1.ClaimBound
	secret := &corev1.Secret{}
	owned := secret.DeepCopy()
	owned.OwnerReferences = []metav1.OwnerReference{{UID: "vm"}}

	for name, tc := range map[string]struct {
		old, new any
		want     bool
	}{
		"VMI phase":           {vmi, running, true},
		"VMI reports an IP":   {running, withIP, true},
		"VMI relabelled":      {withIP, relabelled, false},
		"VMI resync":          {withIP, withIP.DeepCopy(), false},
		"VM status":           {vm, started, true},
		"VM annotated (ours)": {vm, annotated, false},
		"PVC bound":           {pvc, bound, true},
		"Secret owner (ours)": {secret, owned, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := matters(tc.old, tc.new); got != tc.want {
				t.Fatalf("matters = %v, want %v", got, tc.want)
			}
		})
	}
}

// recordingNotifier records notifications.
type recordingNotifier struct {
	machines []OwnerKey
	urgent   []bool
	images   []types.NamespacedName
}

func (r *recordingNotifier) MachineChanged(key OwnerKey, urgent bool) {
	r.machines, r.urgent = append(r.machines, key), append(r.urgent, urgent)
}

func (r *recordingNotifier) ImageChanged(key types.NamespacedName) { r.images = append(r.images, key) }

// Changes are reported for the owner the object's annotation names, of the kind its label names (a
// MachineRequest when it names none: objects made before owners had kinds); a VMI's phase or
// addresses and deletions are urgent (they can make a machine Running or complete a deletion).
func TestNotifierMapsToTheOwner(t *testing.T) {
	n := &recordingNotifier{}
	h := notifier(n)
	ours := map[string]string{AnnotationMachineRequest: "butler-system/cp-0"}
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Annotations: ours}}
	h.OnAdd(vmi, false)
	running := vmi.DeepCopy()
	running.Status.Phase = kubevirtv1.Running
	h.OnUpdate(vmi, running)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: ours}}
	bound := pvc.DeepCopy()
	bound.Status.Phase = corev1.ClaimBound
	h.OnUpdate(pvc, bound)
	h.OnDelete(&kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Annotations: ours}})
	h.OnAdd(&kubevirtv1.VirtualMachineInstance{}, false) // not ours: no annotation, no notification
	h.OnUpdate(&corev1.Secret{}, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: ours}})
	want := OwnerKey{Kind: OwnerKindMachineRequest, NamespacedName: types.NamespacedName{Namespace: "butler-system", Name: "cp-0"}}
	if len(n.machines) != 4 || !slices.Equal(n.urgent, []bool{false, true, false, true}) {
		t.Fatalf("notifications %v urgent %v", n.machines, n.urgent)
	}
	for _, got := range n.machines {
		if got != want {
			t.Fatalf("notified %v, want %v", got, want)
		}
	}
	labelled := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Annotations: ours, Labels: map[string]string{LabelOwnerKind: "HarvesterMachine"}}}
	h.OnDelete(labelled)
	if got := n.machines[len(n.machines)-1]; got.Kind != "HarvesterMachine" || got.NamespacedName != want.NamespacedName {
		t.Fatalf("an object labelled with its owner's kind notified %v", got)
	}
	imgs := imageNotifier(n)
	image := &unstructured.Unstructured{}
	image.SetNamespace("default")
	image.SetName("talos")
	imgs.OnAdd(image, false)
	if len(n.images) != 1 || n.images[0] != (types.NamespacedName{Namespace: "default", Name: "talos"}) {
		t.Fatalf("image notifications %v", n.images)
	}
}

// The cache keeps of a VMI what the provider reads, and nothing else.
func TestTrimVMIKeepsWhatIsRead(t *testing.T) {
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Namespace: "vms", UID: "vmi-uid", Labels: map[string]string{LabelManagedBy: ManagedByValue},
			Annotations: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "virt-controller"}}},
		Spec: kubevirtv1.VirtualMachineInstanceSpec{Hostname: "cp-0", Volumes: []kubevirtv1.Volume{{Name: "disk-0"}}},
		Status: kubevirtv1.VirtualMachineInstanceStatus{
			Phase:                     kubevirtv1.Running,
			Conditions:                []kubevirtv1.VirtualMachineInstanceCondition{{Type: kubevirtv1.VirtualMachineInstanceReady, Status: corev1.ConditionTrue}},
			Interfaces:                []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: NICName, IP: "10.0.0.5"}},
			ActivePods:                map[types.UID]string{"pod-uid": "node-1"},
			PhaseTransitionTimestamps: []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: kubevirtv1.Running}},
			NodeName:                  "node-1",
			VolumeStatus:              []kubevirtv1.VolumeStatus{{Name: "disk-0"}},
		},
	}
	want := vmi.DeepCopy()
	got, err := trimVMI(vmi)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := got.(*kubevirtv1.VirtualMachineInstance)
	if trimmed.ManagedFields != nil || trimmed.Spec.Hostname != "" || len(trimmed.Spec.Volumes) != 0 || trimmed.Status.NodeName != "" || trimmed.Status.VolumeStatus != nil {
		t.Fatalf("kept what nobody reads: %+v", trimmed)
	}
	if trimmed.Name != want.Name || trimmed.UID != want.UID || trimmed.Labels[LabelManagedBy] != ManagedByValue || trimmed.Annotations["a"] != "b" ||
		trimmed.Status.Phase != want.Status.Phase || len(trimmed.Status.Conditions) != 1 || len(trimmed.Status.Interfaces) != 1 ||
		len(trimmed.Status.ActivePods) != 1 || len(trimmed.Status.PhaseTransitionTimestamps) != 1 {
		t.Fatalf("lost what the provider reads: %+v", trimmed)
	}
	if other, _ := trimVMI("not a VMI"); other != "not a VMI" {
		t.Fatalf("changed another kind: %v", other)
	}
}

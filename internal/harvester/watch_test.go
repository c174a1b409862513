package harvester

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
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

func TestNotifierMapsToTheMachineRequest(t *testing.T) {
	ch := make(chan event.GenericEvent, 1)
	h := notifier(ch)
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationMachineRequest: "butler-system/cp-0"}}}
	h.OnAdd(vmi, false)
	got := <-ch
	if got.Object.GetNamespace() != "butler-system" || got.Object.GetName() != "cp-0" {
		t.Fatalf("event for %s/%s", got.Object.GetNamespace(), got.Object.GetName())
	}
	h.OnAdd(&kubevirtv1.VirtualMachineInstance{}, false) // not ours: no annotation, no event
	h.OnUpdate(&corev1.Secret{}, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: vmi.Annotations}})
	select {
	case e := <-ch:
		t.Fatalf("unexpected event %v", e.Object)
	default:
	}
}

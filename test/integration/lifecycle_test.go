package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// timeout bounds each wait. Generous: make test runs the packages in parallel on 2 CPUs, and
// test/deploy builds and runs a whole testbed meanwhile.
const timeout = 60 * time.Second

// world is one test's corner of both clusters: a management namespace with a credentials Secret
// and a ProviderConfig, and a Harvester namespace with an imported image.
type world struct {
	t         *testing.T
	ctx       context.Context
	ns, hvNs  string
	pc        *v1alpha1.ProviderConfig
	imageName string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	suffix := rand.String(5)
	w := &world{t: t, ctx: context.Background(), ns: "mgmt-" + suffix, hvNs: "vms-" + suffix, imageName: "talos"}
	createNamespace(t, mgmt, w.ns)
	createNamespace(t, hv, w.hvNs)
	w.must(mgmt.Create(w.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: w.ns},
		Data:       map[string][]byte{"kubeconfig": harvesterConfig},
	}))
	w.pc = &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "harvester", Namespace: w.ns},
		Spec: v1alpha1.ProviderConfigSpec{
			Provider:       v1alpha1.ProviderTypeHarvester,
			CredentialsRef: &v1alpha1.SecretReference{Name: "harvester-kubeconfig"},
			Harvester: &v1alpha1.HarvesterProviderConfig{
				Namespace: w.hvNs, NetworkName: w.hvNs + "/vlan40", ImageName: w.hvNs + "/" + w.imageName,
			},
		},
	}
	w.network("vlan40", "10.40.0.0/24")
	w.image(w.imageName, nil)
	w.must(mgmt.Create(w.ctx, w.pc))
	return w
}

// network creates a VM network as Harvester does: a NetworkAttachmentDefinition whose route
// annotation carries the CIDR the simulator leases addresses from.
func (w *world) network(name, cidr string) {
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(sim.NetworkAttachmentDefinitionGVK)
	nad.SetNamespace(w.hvNs)
	nad.SetName(name)
	nad.SetAnnotations(map[string]string{sim.AnnotationRoute: `{"mode":"auto","cidr":"` + cidr + `"}`})
	_ = unstructured.SetNestedField(nad.Object, `{"cniVersion":"0.3.1","type":"bridge","bridge":"mgmt-br","vlan":40}`, "spec", "config")
	w.must(hv.Create(w.ctx, nad))
}

// image uploads a VirtualMachineImage; the simulator imports it.
func (w *world) image(name string, annotations map[string]string) {
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	img.SetNamespace(w.hvNs)
	img.SetName(name)
	img.SetAnnotations(annotations)
	_ = unstructured.SetNestedField(img.Object, "https://example.invalid/metal-amd64.raw.xz", "spec", "url")
	w.must(hv.Create(w.ctx, img))
}

// annotateImage sets an annotation on an image of the world's Harvester namespace.
func (w *world) annotateImage(name, key, value string) {
	w.t.Helper()
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	img.SetNamespace(w.hvNs)
	img.SetName(name)
	patch := []byte(`{"metadata":{"annotations":{"` + key + `":"` + value + `"}}}`)
	w.must(hv.Patch(w.ctx, img, client.RawPatch(types.MergePatchType, patch)))
}

// imageClass waits until Harvester has initialized the image and returns its storage class
// (lh-<image uid>, which nobody can know before).
func (w *world) imageClass(name string) string {
	w.t.Helper()
	var sc string
	eventually(w.t, timeout, func() error {
		img := &unstructured.Unstructured{}
		img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
		if err := hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: name}, img); err != nil {
			return err
		}
		if sc, _, _ = unstructured.NestedString(img.Object, "status", "storageClassName"); sc == "" {
			return fmt.Errorf("image %s has no status.storageClassName yet", name)
		}
		return nil
	})
	return sc
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) machineRequest(name string) *v1alpha1.MachineRequest {
	return &v1alpha1.MachineRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: v1alpha1.MachineRequestSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: w.pc.Name},
			MachineName: name, Role: v1alpha1.MachineRoleControlPlane,
			CPU: 2, MemoryMB: 4096, DiskGB: 20, UserData: "#cloud-config\nhostname: " + name + "\n",
		},
	}
}

func (w *world) get(mr *v1alpha1.MachineRequest) *v1alpha1.MachineRequest {
	w.t.Helper()
	out := &v1alpha1.MachineRequest{}
	w.must(mgmt.Get(w.ctx, client.ObjectKeyFromObject(mr), out))
	return out
}

func (w *world) waitPhase(mr *v1alpha1.MachineRequest, phase v1alpha1.MachinePhase) *v1alpha1.MachineRequest {
	w.t.Helper()
	var got *v1alpha1.MachineRequest
	eventually(w.t, timeout, func() error {
		got = &v1alpha1.MachineRequest{}
		if err := mgmt.Get(w.ctx, client.ObjectKeyFromObject(mr), got); err != nil {
			return err
		}
		if got.Status.Phase != phase {
			return fmt.Errorf("MachineRequest %s is %q, want %s; failure %q %q; conditions %s", mr.Name, got.Status.Phase, phase,
				got.Status.FailureReason, got.Status.FailureMessage, describeConditions(got.Status.Conditions))
		}
		return nil
	})
	return got
}

// describeConditions is "Type=Status Reason: message; ..." for failure messages.
func describeConditions(conditions []metav1.Condition) string {
	parts := make([]string, 0, len(conditions))
	for _, c := range conditions {
		parts = append(parts, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, "; ")
}

func (w *world) waitGone(obj client.Object, c client.Client) {
	w.t.Helper()
	eventually(w.t, timeout, func() error {
		err := c.Get(w.ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%T %s: %w", obj, obj.GetName(), err)
		}
		return fmt.Errorf("%T %s still exists", obj, obj.GetName())
	})
}

// harvesterObjects counts what exists in the test's Harvester namespace.
func (w *world) harvesterObjects() (vms, pvcs, secrets int) {
	w.t.Helper()
	vmList := &kubevirtv1.VirtualMachineList{}
	pvcList := &corev1.PersistentVolumeClaimList{}
	secretList := &corev1.SecretList{}
	w.must(hv.List(w.ctx, vmList, client.InNamespace(w.hvNs)))
	w.must(hv.List(w.ctx, pvcList, client.InNamespace(w.hvNs)))
	w.must(hv.List(w.ctx, secretList, client.InNamespace(w.hvNs)))
	return len(vmList.Items), len(pvcList.Items), len(secretList.Items)
}

func (w *world) waitEvent(obj client.Object, eventType, reason string) *eventsv1.Event {
	w.t.Helper()
	var found *eventsv1.Event
	eventually(w.t, timeout, func() error {
		list := &eventsv1.EventList{}
		if err := mgmt.List(w.ctx, list, client.InNamespace(w.ns)); err != nil {
			return err
		}
		for i, e := range list.Items {
			if e.Regarding.Name == obj.GetName() && e.Type == eventType && e.Reason == reason {
				found = &list.Items[i]
				return nil
			}
		}
		return fmt.Errorf("no %s event %s for %s", eventType, reason, obj.GetName())
	})
	return found
}

// releaseWithoutCleanup sets the escape-hatch annotation and waits until the MachineRequest is gone.
func (w *world) releaseWithoutCleanup(mr *v1alpha1.MachineRequest) {
	w.t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationSkipHarvesterCleanup + `":"true"}}}`)
	w.must(mgmt.Patch(w.ctx, w.get(mr), client.RawPatch("application/merge-patch+json", patch)))
	w.waitGone(&v1alpha1.MachineRequest{ObjectMeta: mr.ObjectMeta}, mgmt)
}

// requireHarvesterEmpty fails if anything is left in the test's Harvester namespace.
func (w *world) requireHarvesterEmpty(when string) {
	w.t.Helper()
	if vms, pvcs, secrets := w.harvesterObjects(); vms+pvcs+secrets != 0 {
		w.t.Fatalf("%s: %d VMs, %d PVCs, %d Secrets on Harvester", when, vms, pvcs, secrets)
	}
}

func (w *world) deleteAndWait(mr *v1alpha1.MachineRequest) {
	w.t.Helper()
	w.must(client.IgnoreNotFound(mgmt.Delete(w.ctx, mr)))
	eventually(w.t, timeout, func() error {
		got := &v1alpha1.MachineRequest{}
		err := mgmt.Get(w.ctx, client.ObjectKeyFromObject(mr), got)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		// What the deletion waits for, once it reports it.
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionProgressing)
		return fmt.Errorf("MachineRequest %s still exists (phase %s, progressing %+v)", mr.Name, got.Status.Phase, c)
	})
}

// The full lifecycle: Pending -> Creating -> Running with the IP the VMI reports, every object on
// Harvester in the shape expected, then deletion that leaves nothing behind.
func TestLifecycle(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("cp-0")
	w.must(mgmt.Create(w.ctx, mr))

	got := w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	if !strings.HasPrefix(got.Status.IPAddress, "10.40.0.") || len(got.Status.IPAddresses) != 3 || !strings.HasPrefix(got.Status.ProviderID, "harvester://") {
		t.Fatalf("status = %+v", got.Status)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready = %+v", c)
	}
	if !controllerutilContains(got.Finalizers, v1alpha1.MachineRequestFinalizer) {
		t.Fatal("no finalizer")
	}
	vm := &kubevirtv1.VirtualMachine{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "cp-0"}, vm))
	if "harvester://"+string(vm.UID) != got.Status.ProviderID || vm.Labels[harvester.LabelMachineRequestUID] != string(got.UID) {
		t.Fatalf("VM uid %s labels %v vs providerID %s", vm.UID, vm.Labels, got.Status.ProviderID)
	}
	// Harvester's mutator gave the NIC its MAC address; the guest reports it.
	if mac := vm.Spec.Template.Spec.Domain.Devices.Interfaces[0].MacAddress; mac == "" || got.Status.MACAddress != mac {
		t.Fatalf("status.macAddress %q, the VM's NIC %q", got.Status.MACAddress, mac)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "cp-0-disk-0"}, pvc))
	// The root disk owns the cloud-init Secret from its creation (Harvester removes the disk
	// with the VM, the garbage collector the Secret with the disk).
	secret := &corev1.Secret{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "cp-0-cloudinit"}, secret))
	if len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].UID != pvc.UID || secret.OwnerReferences[0].Kind != "PersistentVolumeClaim" {
		t.Fatalf("cloud-init Secret owners %+v, want the root disk %s", secret.OwnerReferences, pvc.UID)
	}
	if pvc.Annotations[harvester.AnnotationImageID] != w.hvNs+"/talos" || *pvc.Spec.StorageClassName != w.imageClass("talos") {
		t.Fatalf("root PVC %v %v", pvc.Annotations, pvc.Spec.StorageClassName)
	}
	w.waitEvent(mr, corev1.EventTypeNormal, "Created")
	w.waitEvent(mr, corev1.EventTypeNormal, "Running")

	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

func controllerutilContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A same-named VM without our labels is neither adopted nor changed nor deleted.
func TestForeignVMNeitherAdoptedNorDeleted(t *testing.T) {
	w := newWorld(t)
	foreign := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Namespace: w.hvNs, Labels: map[string]string{"owner": "someone-else"}},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: ptrTo(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}
	w.must(hv.Create(w.ctx, foreign))
	mr := w.machineRequest("cp-0")
	w.must(mgmt.Create(w.ctx, mr))

	got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonNameConflict || !strings.Contains(got.Status.FailureMessage, "VirtualMachine "+w.hvNs+"/cp-0") {
		t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
	}
	w.waitEvent(mr, corev1.EventTypeWarning, v1alpha1.ReasonNameConflict)
	w.deleteAndWait(mr)

	after := &kubevirtv1.VirtualMachine{}
	w.must(hv.Get(w.ctx, client.ObjectKeyFromObject(foreign), after))
	// The simulator (Harvester) adds its finalizer and status; the provider must change nothing.
	if after.DeletionTimestamp != nil || !equality.Semantic.DeepEqual(after.Labels, foreign.Labels) ||
		!equality.Semantic.DeepEqual(after.Spec, foreign.Spec) || after.Annotations[harvester.AnnotationRemovedPVCs] != "" {
		t.Fatalf("foreign VM was changed: labels %v annotations %v deleting %v", after.Labels, after.Annotations, after.DeletionTimestamp)
	}
}

func ptrTo[T any](v T) *T { return &v }

// 100 KB of userData reaches the VM through the cloud-init Secret; inline data that large is
// rejected by the stand-in's admission policy, as KubeVirt rejects it.
func TestLargeUserDataThroughSecret(t *testing.T) {
	w := newWorld(t)
	inline := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "inline", Namespace: w.hvNs},
		Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
			Volumes: []kubevirtv1.Volume{{Name: "ci", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserData: strings.Repeat("x", 2049)}}}},
		}}},
	}
	if err := hv.Create(w.ctx, inline); err == nil || !strings.Contains(err.Error(), "2048") {
		t.Fatalf("inline userData of 2049 bytes was not rejected: %v", err)
	}

	mr := w.machineRequest("talos-0")
	mr.Spec.UserData = "version: v1alpha1\n" + strings.Repeat("# padding of a Talos machine config\n", 100*1024/36)
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)

	secret := &corev1.Secret{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "talos-0-cloudinit"}, secret))
	if string(secret.Data["userdata"]) != mr.Spec.UserData || len(mr.Spec.UserData) < 100*1000 {
		t.Fatalf("cloud-init Secret holds %d bytes, want the %d bytes of userData", len(secret.Data["userdata"]), len(mr.Spec.UserData))
	}
	w.deleteAndWait(mr)
}

// A MachineRequest whose ProviderConfig is missing may be another provider's: it is not touched.
func TestMissingProviderConfigLeftUntouched(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("other-0")
	mr.Spec.ProviderRef.Name = "nutanix-config-that-does-not-exist"
	w.must(mgmt.Create(w.ctx, mr))
	created := w.get(mr)
	consistently(t, 3*time.Second, func() error {
		got := w.get(mr)
		if got.ResourceVersion != created.ResourceVersion || len(got.Finalizers) != 0 || got.Status.Phase != "" {
			return fmt.Errorf("MachineRequest of an unknown provider was written to: %+v %+v", got.Finalizers, got.Status)
		}
		return nil
	})
	if vms, _, _ := w.harvesterObjects(); vms != 0 {
		t.Fatalf("%d VMs created", vms)
	}
	w.deleteAndWait(mr)
}

// A Running machine whose VM is deleted out of band becomes Failed VMDeleted with Ready=False.
func TestVMDeletedOutOfBand(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("cp-1")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)

	w.must(hv.Delete(w.ctx, &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Namespace: w.hvNs}}))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonVMDeleted {
		t.Fatalf("failureReason %q", got.Status.FailureReason)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonVMDeleted {
		t.Fatalf("Ready = %+v", c)
	}
	w.waitEvent(mr, corev1.EventTypeWarning, v1alpha1.ReasonVMDeleted)
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

// A PVC left over from an earlier attempt of the same MachineRequest is reused: no
// create/delete loop, one PVC, one VM.
func TestLeftoverPVCReused(t *testing.T) {
	w := newWorld(t)
	w.image("talos-importing", map[string]string{sim.AnnotationImportDelay: "3s"})
	mr := w.machineRequest("cp-2")
	mr.Spec.Image = w.hvNs + "/talos-importing"
	w.must(mgmt.Create(w.ctx, mr))
	eventually(t, timeout, func() error {
		c := meta.FindStatusCondition(w.get(mr).Status.Conditions, v1alpha1.ConditionProgressing)
		if c == nil || c.Reason != v1alpha1.ReasonImageNotReady {
			return fmt.Errorf("Progressing = %+v, want ImageNotReady", c)
		}
		return nil
	})
	// The earlier attempt's PVC: ours (labelled for this MachineRequest), created before the VM.
	uid := w.get(mr).UID
	leftover := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-2-disk-0", Namespace: w.hvNs, Labels: map[string]string{harvester.LabelMachineRequestUID: string(uid)}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: ptrTo(w.imageClass("talos-importing")),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")}},
		},
	}
	leftover.Annotations = map[string]string{harvester.AnnotationImageID: w.hvNs + "/talos-importing"}
	w.must(hv.Create(w.ctx, leftover))

	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	vm := &kubevirtv1.VirtualMachine{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "cp-2"}, vm))
	consistently(t, 2*time.Second, func() error {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := hv.Get(w.ctx, client.ObjectKeyFromObject(leftover), pvc); err != nil {
			return fmt.Errorf("left-over PVC: %w", err)
		}
		if pvc.UID != leftover.UID {
			return errors.New("left-over PVC was replaced")
		}
		again := &kubevirtv1.VirtualMachine{}
		if err := hv.Get(w.ctx, client.ObjectKeyFromObject(vm), again); err != nil {
			return fmt.Errorf("VM: %w", err)
		}
		if again.UID != vm.UID {
			return errors.New("VM was recreated")
		}
		if vms, pvcs, _ := w.harvesterObjects(); vms != 1 || pvcs != 1 {
			return fmt.Errorf("%d VMs and %d PVCs, want 1 and 1", vms, pvcs)
		}
		return nil
	})
	w.deleteAndWait(mr)
}

// Deletion with the ProviderConfig or the Secret gone says why, and the escape hatch releases it.
func TestDeletionBlockedSaysWhy(t *testing.T) {
	for _, gone := range []string{"ProviderConfig", "Secret"} {
		t.Run(gone+" gone", func(t *testing.T) {
			w := newWorld(t)
			mr := w.machineRequest("cp-3")
			w.must(mgmt.Create(w.ctx, mr))
			w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
			wantInMessage := "ProviderConfig " + w.ns + "/harvester"
			if gone == "Secret" {
				w.must(mgmt.Delete(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: w.ns}}))
				wantInMessage = "Secret " + w.ns + "/harvester-kubeconfig"
				// Credentials already read stay in use until the provider notices the Secret
				// is gone (its ProviderConfig check, within a few seconds); they still work
				// on Harvester, and a deletion before that simply completes.
				w.waitPCCondition(w.pc, v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonCredentialsUnavailable)
			} else {
				w.must(mgmt.Delete(w.ctx, w.pc))
				// Likewise: a deletion the provider starts before its cache has seen the
				// ProviderConfig go still reaches Harvester, and deletes the VM.
				w.waitMRCondition(mr, v1alpha1.ConditionDegraded, v1alpha1.ReasonProviderConfigNotFound)
			}
			w.must(mgmt.Delete(w.ctx, mr))
			eventually(t, timeout, func() error {
				c := meta.FindStatusCondition(w.get(mr).Status.Conditions, v1alpha1.ConditionDegraded)
				if c == nil || c.Reason != v1alpha1.ReasonDeletionBlocked || !strings.Contains(c.Message, wantInMessage) ||
					!strings.Contains(c.Message, v1alpha1.AnnotationSkipHarvesterCleanup) {
					return fmt.Errorf("Degraded = %+v", c)
				}
				return nil
			})
			w.waitEvent(mr, corev1.EventTypeWarning, v1alpha1.ReasonDeletionBlocked)

			w.releaseWithoutCleanup(mr)
			w.waitEvent(mr, corev1.EventTypeWarning, "CleanupSkipped")
			if vms, _, _ := w.harvesterObjects(); vms != 1 {
				t.Fatalf("%d VMs on Harvester; the escape hatch must leave the VM alone", vms)
			}
		})
	}
}

// kubectl get mr shows the published printer columns (the server renders them).
func TestPrinterColumns(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("cols-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)

	cfg := rest.CopyConfig(mgmtCfg)
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	w.must(err)
	raw, err := rc.Get().Namespace(w.ns).Resource("machinerequests").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(w.ctx)
	w.must(err)
	var table metav1.Table
	w.must(json.Unmarshal(raw, &table))
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "Name,Machine,Role,Phase,IP,Age" {
		t.Fatalf("columns %v", names)
	}
	if len(table.Rows) != 1 || table.Rows[0].Cells[1] != "cols-0" || table.Rows[0].Cells[2] != "control-plane" || table.Rows[0].Cells[3] != "Running" {
		t.Fatalf("row %v", table.Rows)
	}
	t.Logf("kubectl get mr:\n  %v\n  %v", names, table.Rows[0].Cells)
	w.deleteAndWait(mr)
}

// A request that cannot work (its image does not exist) fails with a reason that names the image
// and leaves nothing on Harvester.
func TestImageNotFoundCreatesNothing(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("no-image")
	mr.Spec.Image = w.hvNs + "/does-not-exist"
	w.must(mgmt.Create(w.ctx, mr))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonImageNotFound || !strings.Contains(got.Status.FailureMessage, w.hvNs+"/does-not-exist") {
		t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
	}
	w.requireHarvesterEmpty("created on Harvester for a request that cannot work")
	w.deleteAndWait(mr)
}

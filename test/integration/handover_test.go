package integration

import (
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// managementClusterUID is the identity the provider labels its objects with: the UID of the
// management cluster's kube-system namespace.
func managementClusterUID(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{}
	if err := c.Get(t.Context(), client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		t.Fatal(err)
	}
	return string(ns.UID)
}

// Two management clusters (two bootstrap runs) whose MachineRequests have the same namespace and
// name share one Harvester namespace: the second never takes the first one's VM (it is a
// NameConflict that says how to hand it over), until the user hands it over; then it takes the VM
// with its disks and Secret, and deleting it leaves Harvester empty.
func TestTwoManagementClustersShareAHarvesterNamespace(t *testing.T) {
	w := newWorld(t)
	first := w.machineRequest("shared-0")
	w.must(mgmt.Create(w.ctx, first))
	w.waitPhase(first, v1alpha1.MachinePhaseRunning)
	vmUID := w.vmUIDs(w.hvNs)["shared-0"]
	owner := w.get(first).UID
	clusterA := managementClusterUID(t, mgmt)

	// The second management cluster: its own API server, the same CRDs, its own manager.
	crds, err := testbed.CRDDirectories(repoRoot(), os.Getenv(schemaEnv))
	w.must(err)
	env := &envtest.Environment{CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true}
	cfgB, err := env.Start()
	w.must(err)
	defer func() { _ = env.Stop() }()
	mgmtB, err := client.New(cfgB, client.Options{Scheme: mgmt.Scheme()})
	w.must(err)
	stopB := startManager(t.Context(), cfgB)
	defer stopB()
	createNamespace(t, mgmtB, w.ns)
	w.must(mgmtB.Create(w.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: w.ns},
		Data:       map[string][]byte{"kubeconfig": harvesterConfig},
	}))
	pc := w.pc.DeepCopy()
	pc.ResourceVersion, pc.UID = "", ""
	w.must(mgmtB.Create(w.ctx, pc))
	second := w.machineRequest("shared-0")
	w.must(mgmtB.Create(w.ctx, second))

	var failed *v1alpha1.MachineRequest
	eventually(t, timeout, func() error {
		failed = &v1alpha1.MachineRequest{}
		if err := mgmtB.Get(w.ctx, client.ObjectKeyFromObject(second), failed); err != nil {
			return err
		}
		if failed.Status.Phase != v1alpha1.MachinePhaseFailed || failed.Status.FailureReason != v1alpha1.ReasonNameConflict {
			return fmt.Errorf("second cluster's MachineRequest is %s (%s), want Failed NameConflict", failed.Status.Phase, failed.Status.FailureReason)
		}
		return nil
	})
	requireMentions(t, "failure message", failed.Status.FailureMessage, "another management cluster", clusterA, v1alpha1.AnnotationHandOver)
	consistently(t, 2*time.Second, func() error {
		vm := &kubevirtv1.VirtualMachine{}
		if err := hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "shared-0"}, vm); err != nil {
			return err
		}
		if vm.UID != vmUID || vm.Labels[harvester.LabelMachineRequestUID] != string(owner) || vm.Labels[harvester.LabelManagementCluster] != clusterA {
			return fmt.Errorf("the first cluster's VM changed hands: UID %s, labels %v", vm.UID, vm.Labels)
		}
		if got := w.get(first); got.Status.Phase != v1alpha1.MachinePhaseRunning {
			return fmt.Errorf("the first cluster's machine is %s", got.Status.Phase)
		}
		return nil
	})

	// The first cluster goes (as the CLI deletes its kind cluster: nothing cleaned up), and the
	// user hands its machine over to the second.
	skip := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationSkipHarvesterCleanup + `":"true"}}}`)
	w.must(mgmt.Patch(w.ctx, w.get(first), client.RawPatch(types.MergePatchType, skip)))
	w.deleteAndWait(first)
	if w.vmUIDs(w.hvNs)["shared-0"] != vmUID {
		t.Fatal("the first cluster's VM did not survive its release without cleanup")
	}
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationHandOver + `":"true"}}}`)
	w.must(mgmtB.Patch(w.ctx, failed, client.RawPatch(types.MergePatchType, patch)))
	eventually(t, timeout, func() error {
		got := &v1alpha1.MachineRequest{}
		if err := mgmtB.Get(w.ctx, client.ObjectKeyFromObject(second), got); err != nil {
			return err
		}
		if got.Status.Phase != v1alpha1.MachinePhaseRunning || got.Status.ProviderID != "harvester://"+string(vmUID) {
			return fmt.Errorf("after the hand-over: %s (%s), providerID %q; want Running with VM %s", got.Status.Phase, got.Status.FailureReason, got.Status.ProviderID, vmUID)
		}
		return nil
	})
	vm := &kubevirtv1.VirtualMachine{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "shared-0"}, vm))
	if vm.Labels[harvester.LabelManagementCluster] != managementClusterUID(t, mgmtB) {
		t.Fatalf("VM labels %v after the hand-over, want the second cluster's identity", vm.Labels)
	}
	w.must(mgmtB.Delete(w.ctx, second))
	w.waitGone(&v1alpha1.MachineRequest{ObjectMeta: second.ObjectMeta}, mgmtB)
	w.requireHarvesterEmpty("after deleting the handed-over machine")
}

// An earlier run of the same management cluster died after creating the disk and the cloud-init
// Secret but before the VM: a new MachineRequest of the same namespace and name takes them over
// (no NameConflict) and creates the VM; deleting it removes everything.
func TestLeftoverDiskAndSecretWithoutVMTakenOver(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("leftover-0")
	earlier := types.UID("00000000-0000-0000-0000-00000000dead")
	labels := map[string]string{
		harvester.LabelMachineRequestUID: string(earlier), harvester.LabelMachineRequestNamespace: w.ns,
		harvester.LabelMachineRequestName: mr.Name, harvester.LabelManagedBy: harvester.ManagedByValue,
		harvester.LabelRole: string(mr.Spec.Role), harvester.LabelManagementCluster: managementClusterUID(t, mgmt),
	}
	annotations := map[string]string{harvester.AnnotationMachineRequest: w.ns + "/" + mr.Name, harvester.AnnotationImageID: w.hvNs + "/" + w.imageName}
	w.must(hv.Create(w.ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "leftover-0-disk-0", Namespace: w.hvNs, Labels: labels, Annotations: annotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
			StorageClassName: ptr.To(w.imageClass(w.imageName)),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(fmt.Sprintf("%dGi", mr.Spec.DiskGB))}},
		},
	}))
	w.must(hv.Create(w.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "leftover-0-cloudinit", Namespace: w.hvNs, Labels: labels,
			Annotations: map[string]string{harvester.AnnotationMachineRequest: w.ns + "/" + mr.Name}},
		Data: map[string][]byte{"userdata": []byte("#cloud-config\n")},
	}))

	w.must(mgmt.Create(w.ctx, mr))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	if vms, pvcs, secrets := w.harvesterObjects(); vms != 1 || pvcs != 1 || secrets != 1 {
		t.Fatalf("%d VMs, %d PVCs, %d Secrets; want the left-over disk and Secret taken over, and one VM", vms, pvcs, secrets)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "leftover-0-disk-0"}, pvc))
	if pvc.Labels[harvester.LabelMachineRequestUID] != string(got.UID) {
		t.Fatalf("left-over disk labelled %v, want the new MachineRequest's UID", pvc.Labels)
	}
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("after the deletion")
}

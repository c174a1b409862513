package integration

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// Labels the Butler bootstrap puts on what it creates (butler-bootstrap,
// internal/controller/clusterbootstrap_controller.go; butler-api common_types.go).
const (
	labelClusterBootstrap = "butler.butlerlabs.dev/cluster-bootstrap"
	labelCluster          = "butler.butlerlabs.dev/cluster"
	labelRole             = "butler.butlerlabs.dev/role"
	labelSchematic        = "butler.butlerlabs.dev/schematic-id"
	labelImageVersion     = "butler.butlerlabs.dev/image-version"
	labelImageArch        = "butler.butlerlabs.dev/image-arch"
	labelProviderConfig   = "butler.butlerlabs.dev/provider-config"
)

// The machine phase of a Butler bootstrap, played as its code does it: with a ButlerConfig that
// configures an image factory, it creates an ImageSync (labelled and owned by its ClusterBootstrap),
// waits for Ready, creates three control-plane and two worker MachineRequests with spec.image from
// the ImageSync's providerImageRef, its labels and a controller owner reference, no userData, and
// waits until all are Running with an IP (it reads phase, ipAddress and ipAddresses[0]). Deleting
// the ClusterBootstrap deletes the MachineRequests by label; Harvester is then empty but for the
// shared image.
func TestBootstrapMachinePhase(t *testing.T) {
	setButlerConfig(t, factoryURL)
	w := newWorld(t)
	const cluster = "mgmt"
	// The ClusterBootstrap's CRD is Butler's: a ConfigMap stands in as the owner. (No garbage
	// collector runs here; the bootstrap deletes its MachineRequests itself anyway.)
	parent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cluster, Namespace: w.ns}}
	w.must(mgmt.Create(w.ctx, parent))
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: parent.Name, UID: parent.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}

	is := &v1alpha1.ImageSync{
		ObjectMeta: metav1.ObjectMeta{Name: cluster + "-" + schematic[:8] + "-1-9-5", Namespace: w.ns, OwnerReferences: []metav1.OwnerReference{owner},
			Labels: map[string]string{labelSchematic: schematic[:63], labelImageVersion: "v1.9.5", labelProviderConfig: w.pc.Name,
				labelImageArch: "amd64", "app.kubernetes.io/managed-by": "butler"}},
		Spec: v1alpha1.ImageSyncSpec{
			FactoryRef:        v1alpha1.ImageFactoryRef{SchematicID: schematic, Version: "v1.9.5", Arch: "amd64", Platform: "talos"},
			ProviderConfigRef: v1alpha1.ProviderReference{Name: w.pc.Name},
			Format:            "qcow2", TransferMode: v1alpha1.TransferModeDirect,
		},
	}
	w.must(mgmt.Create(w.ctx, is))
	image := w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseReady).Status.ProviderImageRef

	var machines []*v1alpha1.MachineRequest
	for role, count := range map[v1alpha1.MachineRole]int{v1alpha1.MachineRoleControlPlane: 3, v1alpha1.MachineRoleWorker: 2} {
		prefix := "cp"
		if role == v1alpha1.MachineRoleWorker {
			prefix = "worker"
		}
		for i := range count {
			name := fmt.Sprintf("%s-%s-%d", cluster, prefix, i)
			mr := &v1alpha1.MachineRequest{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, OwnerReferences: []metav1.OwnerReference{owner},
					Labels: map[string]string{labelClusterBootstrap: cluster, labelCluster: cluster, labelRole: string(role)}},
				Spec: v1alpha1.MachineRequestSpec{
					ProviderRef: v1alpha1.ProviderReference{Name: w.pc.Name}, MachineName: name, Role: role,
					CPU: 4, MemoryMB: 8192, DiskGB: 50, Image: image, Labels: map[string]string{"pool": prefix},
				},
			}
			w.must(mgmt.Create(w.ctx, mr))
			machines = append(machines, mr)
		}
	}
	ips := map[string]string{}
	for _, mr := range machines {
		got := w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
		if got.Status.IPAddress == "" || len(got.Status.IPAddresses) == 0 || got.Status.IPAddresses[0] != got.Status.IPAddress {
			t.Fatalf("%s: ipAddress %q, ipAddresses %v: the bootstrap takes ipAddresses[0] as the node's address", mr.Name, got.Status.IPAddress, got.Status.IPAddresses)
		}
		if other, dup := ips[got.Status.IPAddress]; dup {
			t.Fatalf("%s and %s share IP %s", other, mr.Name, got.Status.IPAddress)
		}
		ips[got.Status.IPAddress] = mr.Name
		vm := &kubevirtv1.VirtualMachine{}
		w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: mr.Name}, vm))
		for _, v := range vm.Spec.Template.Spec.Volumes {
			if v.CloudInitNoCloud != nil {
				t.Fatalf("VM %s has a cloud-init volume although the bootstrap sends no userData", vm.Name)
			}
		}
		if root := vm.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim; root == nil || !strings.HasPrefix(image, w.hvNs+"/") {
			t.Fatalf("VM %s root disk %+v, image %s", vm.Name, root, image)
		}
	}
	if _, _, secrets := w.harvesterObjects(); secrets != 0 {
		t.Fatalf("%d cloud-init Secrets for machines without userData", secrets)
	}

	// The ClusterBootstrap is deleted: its finalizer deletes the MachineRequests by label.
	list := &v1alpha1.MachineRequestList{}
	w.must(mgmt.List(w.ctx, list, client.InNamespace(w.ns), client.MatchingLabels{labelClusterBootstrap: cluster}))
	if len(list.Items) != 5 {
		t.Fatalf("%d MachineRequests carry the bootstrap's label, want 5", len(list.Items))
	}
	for i := range list.Items {
		w.must(mgmt.Delete(w.ctx, &list.Items[i]))
	}
	for _, mr := range machines {
		w.waitGone(&v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Name: mr.Name, Namespace: mr.Namespace}}, mgmt)
	}
	w.must(mgmt.Delete(w.ctx, is))
	w.must(mgmt.Delete(w.ctx, parent))
	w.waitGone(&v1alpha1.ImageSync{ObjectMeta: metav1.ObjectMeta{Name: is.Name, Namespace: is.Namespace}}, mgmt)
	w.requireHarvesterEmpty("left on Harvester after the bootstrap deleted its machines")
	if _, err := w.harvesterImage(syncImageName); err != nil {
		t.Fatalf("the shared image is gone: %v", err)
	}
}

package harvester

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

func testSpec() *MachineSpec {
	return &MachineSpec{
		Owner:     Owner{Namespace: "butler-system", Name: "cp-0", UID: "uid-1"},
		Namespace: "vms", Name: "cluster-cp-0", Role: "control-plane",
		CPU: 4, MemoryMB: 8192, DiskGB: 50,
		Image:    ObjectRef{Namespace: "default", Name: "talos"},
		NICs:     []NIC{{Network: ObjectRef{Namespace: "default", Name: "vlan40"}}},
		UserData: "#cloud-config\n", Labels: map[string]string{"team": "platform", LabelRole: "spoofed"},
	}
}

func TestBuildVirtualMachine(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*MachineSpec)
		check  func(*testing.T, *kubevirtv1.VirtualMachine)
	}{
		"shape Harvester accepts": {nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if vm.Namespace != "vms" || vm.Name != "cluster-cp-0" || *vm.Spec.RunStrategy != kubevirtv1.RunStrategyAlways {
				t.Fatalf("meta/runStrategy: %s/%s %v", vm.Namespace, vm.Name, vm.Spec.RunStrategy)
			}
			d := vm.Spec.Template.Spec.Domain
			if d.CPU.Cores != 4 || d.CPU.Sockets != 1 || d.CPU.Threads != 1 {
				t.Fatalf("cpu %+v", d.CPU)
			}
			if got := d.Resources.Limits[corev1.ResourceMemory]; got.Value() != 8192<<20 {
				t.Fatalf("memory limit %s", got.String())
			}
			if len(d.Resources.Requests) != 0 {
				t.Fatalf("requests set: %v (Harvester computes them)", d.Resources.Requests)
			}
			if d.Devices.Disks[0].Name != "disk-0" || *d.Devices.Disks[0].BootOrder != 1 || d.Devices.Disks[0].Disk.Bus != "virtio" {
				t.Fatalf("root disk %+v", d.Devices.Disks[0])
			}
			nic := d.Devices.Interfaces[0]
			if nic.Name != NICName || nic.Bridge == nil || nic.Model != "virtio" {
				t.Fatalf("nic %+v", nic)
			}
			if n := vm.Spec.Template.Spec.Networks[0]; n.Name != NICName || n.Multus.NetworkName != "default/vlan40" {
				t.Fatalf("network %+v", n)
			}
			if vm.Labels[LabelHarvesterCreator] != ManagedByValue || vm.Spec.Template.ObjectMeta.Labels[LabelHarvesterVMName] != "cluster-cp-0" {
				t.Fatalf("labels %v / %v", vm.Labels, vm.Spec.Template.ObjectMeta.Labels)
			}
			if aa := vm.Spec.Template.Spec.Affinity.PodAntiAffinity; aa == nil || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
				t.Fatal("no soft anti-affinity")
			}
		}},
		"shared CPUs of KubeVirt's default model": {nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if cpu := vm.Spec.Template.Spec.Domain.CPU; cpu.DedicatedCPUPlacement || cpu.Model != "" {
				t.Fatalf("cpu %+v, want shared CPUs and no model", cpu)
			}
		}},
		"dedicated CPUs with requests equal to limits, and a model": {func(s *MachineSpec) { s.DedicatedCPUs, s.CPUModel = true, "EPYC-Rome" }, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			d := vm.Spec.Template.Spec.Domain
			if !d.CPU.DedicatedCPUPlacement || d.CPU.Model != "EPYC-Rome" || d.CPU.Cores != 4 || d.CPU.Threads != 1 {
				t.Fatalf("cpu %+v", d.CPU)
			}
			if !equality.Semantic.DeepEqual(d.Resources.Requests, d.Resources.Limits) {
				t.Fatalf("requests %v, want the limits %v (KubeVirt's pinned CPUs)", d.Resources.Requests, d.Resources.Limits)
			}
			if affinity := vm.Spec.Template.Spec.Affinity.NodeAffinity; affinity != nil {
				t.Fatalf("node affinity %+v: Harvester's mutator owns the CPU manager term", affinity)
			}
		}},
		"BIOS, no TPM, by default": {nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			d := vm.Spec.Template.Spec.Domain
			if d.Firmware != nil || d.Features != nil || d.Devices.TPM != nil {
				t.Fatalf("firmware %+v, features %+v, tpm %+v: want KubeVirt's defaults", d.Firmware, d.Features, d.Devices.TPM)
			}
		}},
		"plain UEFI pins Secure Boot off": {func(s *MachineSpec) { s.Firmware = Firmware{UEFI: true} }, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			d := vm.Spec.Template.Spec.Domain
			efi := d.Firmware.Bootloader.EFI
			if efi.SecureBoot == nil || *efi.SecureBoot || efi.Persistent != nil || d.Features != nil {
				t.Fatalf("efi %+v, features %+v: want secureBoot false (KubeVirt's nil means true), no SMM", efi, d.Features)
			}
		}},
		"Secure Boot with SMM, persistent EFI and TPM": {func(s *MachineSpec) {
			s.Firmware = Firmware{UEFI: true, SecureBoot: true, PersistentEFI: true, TPM: true, PersistentTPM: true}
		}, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			d := vm.Spec.Template.Spec.Domain
			efi := d.Firmware.Bootloader.EFI
			if !ptr.Deref(efi.SecureBoot, false) || !ptr.Deref(efi.Persistent, false) {
				t.Fatalf("efi %+v", efi)
			}
			if d.Features == nil || d.Features.SMM == nil || !ptr.Deref(d.Features.SMM.Enabled, false) {
				t.Fatalf("features %+v: Secure Boot needs SMM", d.Features)
			}
			if d.Devices.TPM == nil || !ptr.Deref(d.Devices.TPM.Persistent, false) {
				t.Fatalf("tpm %+v, want persistent", d.Devices.TPM)
			}
		}},
		"an ephemeral TPM on BIOS": {func(s *MachineSpec) { s.Firmware = Firmware{TPM: true} }, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			d := vm.Spec.Template.Spec.Domain
			if d.Firmware != nil || d.Devices.TPM == nil || d.Devices.TPM.Persistent != nil {
				t.Fatalf("firmware %+v, tpm %+v", d.Firmware, d.Devices.TPM)
			}
		}},
		"no passthrough devices unless asked": {nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if d := vm.Spec.Template.Spec.Domain.Devices; d.HostDevices != nil || d.GPUs != nil {
				t.Fatalf("host devices %v, GPUs %v: want none", d.HostDevices, d.GPUs)
			}
		}},
		"passthrough devices and vGPUs, one entry each, named in order": {func(s *MachineSpec) {
			s.HostDevices = []string{"nvidia.com/GA102GL_A10", "intel.com/1533", "nvidia.com/GA102GL_A10"}
			s.GPUs = []string{"nvidia.com/NVIDIA_A2-4Q", "nvidia.com/NVIDIA_A2-4Q"}
		}, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			d := vm.Spec.Template.Spec.Domain.Devices
			wantHost := []kubevirtv1.HostDevice{
				{Name: "hostdevice-1", DeviceName: "nvidia.com/GA102GL_A10"},
				{Name: "hostdevice-2", DeviceName: "intel.com/1533"},
				{Name: "hostdevice-3", DeviceName: "nvidia.com/GA102GL_A10"},
			}
			wantGPUs := []kubevirtv1.GPU{{Name: "gpu-1", DeviceName: "nvidia.com/NVIDIA_A2-4Q"}, {Name: "gpu-2", DeviceName: "nvidia.com/NVIDIA_A2-4Q"}}
			if !equality.Semantic.DeepEqual(d.HostDevices, wantHost) || !equality.Semantic.DeepEqual(d.GPUs, wantGPUs) {
				t.Fatalf("host devices %+v, GPUs %+v; want %+v and %+v", d.HostDevices, d.GPUs, wantHost, wantGPUs)
			}
			// The requests are the scheduler's (virt-controller asks the launcher pod for each
			// device); the VM asks only for CPU and memory, as without devices.
			if r := vm.Spec.Template.Spec.Domain.Resources; len(r.Limits) != 2 || r.Requests != nil {
				t.Fatalf("resources %+v: want CPU and memory limits only", r)
			}
		}},
		"no cloud-init disk without data": {func(s *MachineSpec) { s.UserData, s.NetworkData = "", "" }, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			for _, v := range vm.Spec.Template.Spec.Volumes {
				if v.CloudInitNoCloud != nil {
					t.Fatalf("cloud-init volume %+v without userData or networkData", v)
				}
			}
			for _, d := range vm.Spec.Template.Spec.Domain.Devices.Disks {
				if d.Name == cloudInitVolumeName {
					t.Fatal("cloud-init disk without userData or networkData")
				}
			}
		}},
		"networkData alone": {func(s *MachineSpec) { s.UserData, s.NetworkData = "", "version: 2" }, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if ci := cloudInit(t, vm); ci.UserDataSecretRef != nil || ci.NetworkDataSecretRef == nil {
				t.Fatalf("cloud-init %+v", ci)
			}
		}},
		"disks removed with the VM named at creation, only ours": {func(s *MachineSpec) { s.ExtraDisks = []DiskSpec{{SizeGB: 10}} }, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if got := vm.Annotations[AnnotationRemovedPVCs]; got != "cluster-cp-0-disk-0,cluster-cp-0-disk-1" {
				t.Fatalf("removed-claims annotation %q", got)
			}
		}},
		"ownership labels win over user labels": {nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if vm.Labels["team"] != "platform" || vm.Labels[LabelRole] != "control-plane" || vm.Labels[LabelMachineRequestUID] != "uid-1" {
				t.Fatalf("labels %v", vm.Labels)
			}
		}},
		"cloud-init from a Secret, never inline": {nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			ci := cloudInit(t, vm)
			if ci.UserData != "" || ci.UserDataBase64 != "" || ci.UserDataSecretRef.Name != "cluster-cp-0-cloudinit" {
				t.Fatalf("cloud-init %+v", ci)
			}
			if ci.NetworkDataSecretRef != nil {
				t.Fatal("networkData secret referenced without networkData")
			}
		}},
		"networkData referenced when set": {func(s *MachineSpec) { s.NetworkData = "version: 2" }, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if ci := cloudInit(t, vm); ci.NetworkDataSecretRef == nil || ci.NetworkDataSecretRef.Name != "cluster-cp-0-cloudinit" || ci.NetworkData != "" {
				t.Fatalf("cloud-init %+v", ci)
			}
		}},
		"extra disks after the root disk": {func(s *MachineSpec) { s.ExtraDisks = []DiskSpec{{SizeGB: 10}, {SizeGB: 20}} }, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			var names []string
			for _, v := range vm.Spec.Template.Spec.Volumes {
				if v.PersistentVolumeClaim != nil {
					names = append(names, v.PersistentVolumeClaim.ClaimName)
				}
			}
			if strings.Join(names, ",") != "cluster-cp-0-disk-0,cluster-cp-0-disk-1,cluster-cp-0-disk-2" {
				t.Fatalf("claims %v", names)
			}
			if d := vm.Spec.Template.Spec.Domain.Devices.Disks; len(d) != 4 || d[1].BootOrder != nil {
				t.Fatalf("disks %+v", d)
			}
		}},
		"any node without a node selector": {nil, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			if spec := vm.Spec.Template.Spec; spec.Affinity.NodeAffinity != nil || spec.NodeSelector != nil {
				t.Fatalf("node affinity %+v, nodeSelector %v without a node selector", spec.Affinity.NodeAffinity, spec.NodeSelector)
			}
		}},
		"node selector as one required term, keys sorted, spread kept": {func(s *MachineSpec) {
			s.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "zone-a", "harvesterhci.io/rack": "r1"}
		}, func(t *testing.T, vm *kubevirtv1.VirtualMachine) {
			spec := vm.Spec.Template.Spec
			if spec.NodeSelector != nil {
				t.Fatalf("spec.nodeSelector %v: Harvester counts such VMs as not live-migratable", spec.NodeSelector)
			}
			want := &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: "harvesterhci.io/rack", Operator: corev1.NodeSelectorOpIn, Values: []string{"r1"}},
					{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a"}},
				},
			}}}}
			if !equality.Semantic.DeepEqual(spec.Affinity.NodeAffinity, want) {
				t.Fatalf("node affinity %+v, want %+v", spec.Affinity.NodeAffinity, want)
			}
			if spec.Affinity.PodAntiAffinity == nil {
				t.Fatal("the soft spread between machines of a role is gone")
			}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			s := testSpec()
			if tc.mutate != nil {
				tc.mutate(s)
			}
			tc.check(t, BuildVirtualMachine(s))
		})
	}
}

// TestNodeSelectorPlacesAsTheScheduler checks the built VM's node selection with the scheduler's
// own matching (kube-scheduler's NodeAffinity filter, on the virt-launcher pod KubeVirt makes of
// the VMI's nodeSelector and affinity): only nodes with all the labels fit.
func TestNodeSelectorPlacesAsTheScheduler(t *testing.T) {
	s := testSpec()
	s.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "zone-a", "harvesterhci.io/rack": "r1"}
	vmSpec := BuildVirtualMachine(s).Spec.Template.Spec
	launcher := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: vmSpec.NodeSelector, Affinity: vmSpec.Affinity}}
	required := nodeaffinity.GetRequiredNodeAffinity(launcher)
	for nodeLabels, fits := range map[string]bool{
		"topology.kubernetes.io/zone=zone-a,harvesterhci.io/rack=r1,kubernetes.io/hostname=n1": true,
		"topology.kubernetes.io/zone=zone-a":                                                   false,
		"topology.kubernetes.io/zone=zone-b,harvesterhci.io/rack=r1":                           false,
		"": false,
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: parseLabels(t, nodeLabels)}}
		if got, err := required.Match(node); err != nil || got != fits {
			t.Errorf("node with labels %q fits: %v (error %v), want %v", nodeLabels, got, err, fits)
		}
	}
	s.NodeSelector = nil
	vmSpec = BuildVirtualMachine(s).Spec.Template.Spec
	launcher = &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: vmSpec.NodeSelector, Affinity: vmSpec.Affinity}}
	if fits, err := nodeaffinity.GetRequiredNodeAffinity(launcher).Match(&corev1.Node{}); err != nil || !fits {
		t.Errorf("without a node selector a node without labels fits: %v (error %v)", fits, err)
	}
}

func parseLabels(t *testing.T, s string) map[string]string {
	t.Helper()
	if s == "" {
		return nil
	}
	set, err := labels.ConvertSelectorToLabelsMap(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func cloudInit(t *testing.T, vm *kubevirtv1.VirtualMachine) *kubevirtv1.CloudInitNoCloudSource {
	t.Helper()
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.CloudInitNoCloud != nil {
			return v.CloudInitNoCloud
		}
	}
	t.Fatal("no cloudInitNoCloud volume")
	return nil
}

func TestBuildRootDiskClaim(t *testing.T) {
	for name, tc := range map[string]struct {
		image  ImageInfo
		wantSC string
	}{
		"storage class from the image's status": {ImageInfo{Ref: ObjectRef{"default", "talos"}, StorageClassName: "longhorn-image-abcde"}, "longhorn-image-abcde"},
		"fallback when status has none":         {ImageInfo{Ref: ObjectRef{"default", "talos"}}, "longhorn-talos"},
	} {
		t.Run(name, func(t *testing.T) {
			pvc := BuildRootDiskClaim(testSpec(), tc.image)
			if pvc.Name != "cluster-cp-0-disk-0" || pvc.Annotations[AnnotationImageID] != "default/talos" {
				t.Fatalf("pvc %s annotations %v", pvc.Name, pvc.Annotations)
			}
			if *pvc.Spec.StorageClassName != tc.wantSC || pvc.Spec.AccessModes[0] != corev1.ReadWriteMany || *pvc.Spec.VolumeMode != corev1.PersistentVolumeBlock {
				t.Fatalf("spec %+v", pvc.Spec)
			}
			if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "50Gi" {
				t.Fatalf("size %s", got.String())
			}
			if pvc.Labels[LabelMachineRequestUID] != "uid-1" {
				t.Fatalf("labels %v", pvc.Labels)
			}
		})
	}
}

func TestBuildExtraDiskClaim(t *testing.T) {
	s := testSpec()
	s.DefaultStorageClass = "longhorn"
	s.ExtraDisks = []DiskSpec{{SizeGB: 10}, {SizeGB: 20, StorageClass: "fast"}}
	for i, want := range []string{"longhorn", "fast"} {
		pvc := BuildExtraDiskClaim(s, i)
		if *pvc.Spec.StorageClassName != want || pvc.Annotations[AnnotationImageID] != "" {
			t.Fatalf("disk %d: %+v %v", i, pvc.Spec, pvc.Annotations)
		}
	}
	s.DefaultStorageClass = ""
	if pvc := BuildExtraDiskClaim(s, 0); pvc.Spec.StorageClassName != nil {
		t.Fatal("storage class set although none was given: the cluster default should apply")
	}
}

func TestBuildCloudInitSecret(t *testing.T) {
	s := testSpec()
	s.UserData = strings.Repeat("x", 100*1024)
	root := metav1.OwnerReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: "cluster-cp-0-disk-0", UID: "pvc-uid"}
	sec := BuildCloudInitSecret(s, &root)
	if sec.Name != "cluster-cp-0-cloudinit" || len(sec.Data[userDataKey]) != 100*1024 {
		t.Fatalf("secret %s with %d bytes of userdata", sec.Name, len(sec.Data[userDataKey]))
	}
	if _, ok := sec.Data[networkDataKey]; ok {
		t.Fatal("networkdata key without networkData")
	}
	if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0] != root {
		t.Fatalf("owners %v, want the root disk", sec.OwnerReferences)
	}
	// The hash follows the data, so that a Secret read without its data is known to be current.
	hash := sec.Annotations[AnnotationCloudInitHash]
	s.NetworkData = "version: 2"
	if other := BuildCloudInitSecret(s, nil).Annotations[AnnotationCloudInitHash]; hash == "" || other == hash {
		t.Fatalf("hash %q, with networkData %q", hash, other)
	}
	if again := BuildCloudInitSecret(s, nil).Annotations[AnnotationCloudInitHash]; again != BuildCloudInitSecret(s, &root).Annotations[AnnotationCloudInitHash] {
		t.Fatal("the hash depends on more than the data")
	}
}

func TestLabelSafe(t *testing.T) {
	long := strings.Repeat("a", 100)
	for in, wantSame := range map[string]bool{"cp-0": true, long: false, "a.b_c": true} {
		got := labelSafe(in)
		if (got == in) != wantSame || len(got) > 63 {
			t.Fatalf("labelSafe(%q) = %q", in, got)
		}
	}
	// Stable: the label selects the same objects on every reconcile. Distinct: names that differ
	// only past the truncation point still get different labels.
	first, second := labelSafe(long), labelSafe(long)
	if first != second || first == labelSafe(long+"b") {
		t.Fatal("labelSafe is not stable and distinct")
	}
}

package harvester

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	cloudInitVolumeName = "cloudinitdisk"
	// Keys of the cloud-init Secret, as Harvester's UI writes them and KubeVirt reads them.
	userDataKey    = "userdata"
	networkDataKey = "networkdata"
	// fallbackStorageClassPrefix names the storage class Harvester creates per image, used only
	// when the image's status does not say which class it uses.
	fallbackStorageClassPrefix = "longhorn-"
)

// BuildCloudInitSecret returns the Secret the VM reads its cloud-init user and network data from,
// owned by owner (the machine's root disk) if given, so that it is collected with the disk.
// A Secret, never inline data: KubeVirt rejects inline cloud-init over 2048 bytes.
func BuildCloudInitSecret(s *MachineSpec, owner *metav1.OwnerReference) *corev1.Secret {
	data := map[string][]byte{userDataKey: []byte(s.UserData)}
	if s.NetworkData != "" {
		data[networkDataKey] = []byte(s.NetworkData)
	}
	secret := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        cloudInitSecretName(s.Name),
			Namespace:   s.Namespace,
			Labels:      ownerLabels(s.Owner, s.Role),
			Annotations: mergeMaps(ownerAnnotations(s.Owner), map[string]string{AnnotationCloudInitHash: cloudInitHash(data)}),
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
	if owner != nil {
		secret.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return secret
}

// ImageInfo is what the root disk needs to know about the VirtualMachineImage.
type ImageInfo struct {
	Ref ObjectRef
	// Backend is the image's spec.backend (BackendBackingImage when it names none).
	Backend string
	// StorageClassName is the image's status.storageClassName (may be empty).
	StorageClassName string
	// VirtualSizeBytes is the image's status.virtualSize (0 when unknown).
	VirtualSizeBytes int64
	Imported         bool
	// ImportFailure is set when Harvester reports that the import failed.
	ImportFailure string
}

// StorageClass is the storage class a root disk cloned from this image must use: the image's
// status.storageClassName (lh-<image uid> for backing images since Harvester 1.4, the target
// class for CDI images), read, never guessed.
func (i ImageInfo) StorageClass() string {
	if i.StorageClassName != "" {
		return i.StorageClassName
	}
	return fallbackStorageClassPrefix + i.Ref.Name
}

// BuildRootDiskClaim returns the root disk PVC, cloned by Harvester from the image.
func BuildRootDiskClaim(s *MachineSpec, image ImageInfo) *corev1.PersistentVolumeClaim {
	pvc := buildClaim(s, 0, s.DiskGB, image.StorageClass())
	pvc.Annotations[AnnotationImageID] = image.Ref.String()
	return pvc
}

// annotationImmediateBinding asks CDI to bind a DataVolume's PVC at once, even when its storage
// class waits for a first consumer (CDI's AnnImmediateBinding).
const annotationImmediateBinding = "cdi.kubevirt.io/storage.bind.immediate.requested"

// BuildRootDiskDataVolume returns the root disk of an image of the CDI backend: a DataVolume
// cloned from the image's PVC (named after the image, in its namespace) into the image's storage
// class, as Harvester's VM controller creates one for its own VMs (createDataVolume). CDI creates
// the PVC of the same name, with the DataVolume's labels and annotations, and the VM mounts it.
func BuildRootDiskDataVolume(s *MachineSpec, image ImageInfo) *cdiv1.DataVolume {
	claim := buildClaim(s, 0, s.DiskGB, image.StorageClass())
	return &cdiv1.DataVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: claim.ObjectMeta,
		Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: image.Ref.Namespace, Name: image.Ref.Name}},
			Storage: &cdiv1.StorageSpec{
				StorageClassName: claim.Spec.StorageClassName,
				AccessModes:      claim.Spec.AccessModes,
				VolumeMode:       claim.Spec.VolumeMode,
				Resources:        claim.Spec.Resources,
			},
		},
	}
}

// BuildExtraDiskClaim returns the blank PVC of extra disk i (0-based in s.ExtraDisks).
func BuildExtraDiskClaim(s *MachineSpec, i int) *corev1.PersistentVolumeClaim {
	d := s.ExtraDisks[i]
	sc := d.StorageClass
	if sc == "" {
		sc = s.DefaultStorageClass
	}
	return buildClaim(s, i+1, d.SizeGB, sc)
}

// ClaimNames lists the PVC names of all disks of the machine, root first.
func ClaimNames(s *MachineSpec) []string {
	names := []string{diskClaimName(s.Name, 0)}
	for i := range s.ExtraDisks {
		names = append(names, diskClaimName(s.Name, i+1))
	}
	return names
}

func buildClaim(s *MachineSpec, index int, sizeGB int64, storageClass string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        diskClaimName(s.Name, index),
			Namespace:   s.Namespace,
			Labels:      ownerLabels(s.Owner, s.Role),
			Annotations: ownerAnnotations(s.Owner),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			VolumeMode:  ptr.To(corev1.PersistentVolumeBlock),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(sizeGB<<30, resource.BinarySI)},
			},
		},
	}
	if storageClass != "" {
		pvc.Spec.StorageClassName = ptr.To(storageClass)
	}
	return pvc
}

// BuildVirtualMachine returns the KubeVirt VirtualMachine, in the shape Harvester's own UI creates.
func BuildVirtualMachine(s *MachineSpec) *kubevirtv1.VirtualMachine {
	labels := mergeMaps(s.Labels, ownerLabels(s.Owner, s.Role), map[string]string{LabelHarvesterCreator: ManagedByValue})
	templateLabels := mergeMaps(ownerLabels(s.Owner, s.Role), map[string]string{LabelHarvesterVMName: s.Name})

	disks := []kubevirtv1.Disk{virtioDisk(diskName(0), ptr.To(uint(1)))}
	volumes := []kubevirtv1.Volume{claimVolume(diskName(0), diskClaimName(s.Name, 0))}
	for i := range s.ExtraDisks {
		disks = append(disks, virtioDisk(diskName(i+1), nil))
		volumes = append(volumes, claimVolume(diskName(i+1), diskClaimName(s.Name, i+1)))
	}
	if s.HasCloudInit() {
		disks = append(disks, virtioDisk(cloudInitVolumeName, nil))
		volumes = append(volumes, kubevirtv1.Volume{
			Name:         cloudInitVolumeName,
			VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: cloudInitSource(s)},
		})
	}

	// The disks Harvester removes with the VM, named at creation: deleting the machine then needs
	// no extra write, and a volume someone hot-plugs later is never among them.
	annotations := mergeMaps(ownerAnnotations(s.Owner), map[string]string{AnnotationRemovedPVCs: strings.Join(ClaimNames(s), ",")})
	if s.FailureDomain != "" {
		annotations[AnnotationFailureDomain] = s.FailureDomain
	}
	interfaces, networks := nicsOf(s)
	return &kubevirtv1.VirtualMachine{
		TypeMeta: metav1.TypeMeta{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.Name,
			Namespace:   s.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				// The annotation reaches the VMI, whose events are mapped back to the MachineRequest.
				ObjectMeta: metav1.ObjectMeta{Labels: templateLabels, Annotations: ownerAnnotations(s.Owner)},
				Spec: kubevirtv1.VirtualMachineInstanceSpec{
					Domain: kubevirtv1.DomainSpec{
						CPU:       &kubevirtv1.CPU{Cores: s.CPU, Sockets: 1, Threads: 1, DedicatedCPUPlacement: s.DedicatedCPUs, Model: s.CPUModel},
						Resources: vmResources(s),
						Devices: kubevirtv1.Devices{Disks: disks, Interfaces: interfaces, TPM: tpmDevice(s.Firmware),
							HostDevices: hostDevicesOf(s), GPUs: gpusOf(s)},
						Firmware: firmware(s.Firmware),
						Features: firmwareFeatures(s.Firmware),
					},
					Networks: networks,
					Volumes:  volumes,
					Affinity: &corev1.Affinity{
						NodeAffinity:    requireNodeLabels(s.NodeSelector),
						PodAntiAffinity: spreadByRole(s),
					},
				},
			},
		},
	}
}

// firmware is the VM's KubeVirt firmware: nil for BIOS (KubeVirt's default). UEFI states
// secureBoot either way: KubeVirt takes an EFI bootloader without it as Secure Boot, which needs
// SMM, so plain UEFI pins it off.
func firmware(f Firmware) *kubevirtv1.Firmware {
	if !f.UEFI {
		return nil
	}
	efi := &kubevirtv1.EFI{SecureBoot: ptr.To(f.SecureBoot)}
	if f.PersistentEFI {
		efi.Persistent = ptr.To(true)
	}
	return &kubevirtv1.Firmware{Bootloader: &kubevirtv1.Bootloader{EFI: efi}}
}

// firmwareFeatures turns on System Management Mode for Secure Boot, which KubeVirt refuses
// without it (its UEFI variables are protected by SMM); nil otherwise.
func firmwareFeatures(f Firmware) *kubevirtv1.Features {
	if !f.UEFI || !f.SecureBoot {
		return nil
	}
	return &kubevirtv1.Features{SMM: &kubevirtv1.FeatureState{Enabled: ptr.To(true)}}
}

// tpmDevice is the VM's virtual TPM: nil for none, persistent or not.
func tpmDevice(f Firmware) *kubevirtv1.TPMDevice {
	switch {
	case !f.TPM:
		return nil
	case f.PersistentTPM:
		return &kubevirtv1.TPMDevice{Persistent: ptr.To(true)}
	}
	return &kubevirtv1.TPMDevice{}
}

// hostDevicesOf are the VM's PCI passthrough devices (nil for none): each any free device of its
// resource on the node the VM runs on. KubeVirt's virt-controller asks the launcher pod for one
// of the resource per entry (requests and limits), so the scheduler places the VM only on a node
// whose device plugin advertises enough of them free (kubevirt
// pkg/virt-controller/services/renderresources.go, WithHostDevices and WithGPUs).
func hostDevicesOf(s *MachineSpec) []kubevirtv1.HostDevice {
	return devicesNamed(s.HostDevices, hostDeviceName, func(name, resource string) kubevirtv1.HostDevice {
		return kubevirtv1.HostDevice{Name: name, DeviceName: resource}
	})
}

// gpusOf are the VM's vGPUs (nil for none), placed as host devices are. Harvester v1.8's
// pcidevices mutator turns them into host devices of the same names (vGPUs are PCI devices of
// their own there); v1.5 to v1.7 keep them as mediated devices.
func gpusOf(s *MachineSpec) []kubevirtv1.GPU {
	return devicesNamed(s.GPUs, gpuName, func(name, resource string) kubevirtv1.GPU {
		return kubevirtv1.GPU{Name: name, DeviceName: resource}
	})
}

// devicesNamed builds one device entry per resource, named by its place (nil for none).
func devicesNamed[T any](resources []string, name func(int) string, entry func(name, resource string) T) []T {
	if len(resources) == 0 {
		return nil
	}
	out := make([]T, 0, len(resources))
	for i, resource := range resources {
		out = append(out, entry(name(i), resource))
	}
	return out
}

// vmResources are the VM's limits: Harvester's mutating webhook derives the requests and the
// guest memory from its overcommit settings. With dedicated CPUs the requests are the limits
// too, as KubeVirt requires of pinned CPUs (whole CPUs, requests equal to limits for CPU and
// memory) and as Harvester's mutator from v1.5.0 sets them; an older mutator overcommits them,
// and KubeVirt refuses the VM with its own message.
func vmResources(s *MachineSpec) kubevirtv1.ResourceRequirements {
	limits := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(s.CPU), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(s.MemoryMB<<20, resource.BinarySI),
	}
	r := kubevirtv1.ResourceRequirements{Limits: limits}
	if s.DedicatedCPUs {
		r.Requests = limits.DeepCopy()
	}
	return r
}

// cloudInitSource reads the user data, and network data if any, from the machine's Secret.
func cloudInitSource(s *MachineSpec) *kubevirtv1.CloudInitNoCloudSource {
	ref := &corev1.LocalObjectReference{Name: cloudInitSecretName(s.Name)}
	src := &kubevirtv1.CloudInitNoCloudSource{}
	if s.UserData != "" {
		src.UserDataSecretRef = ref
	}
	if s.NetworkData != "" {
		src.NetworkDataSecretRef = ref
	}
	return src
}

// spreadByRole prefers putting machines of the same MachineRequest namespace and role on different
// hosts, so that three control planes do not share one node. Soft, so that a small cluster still
// schedules them.
func spreadByRole(s *MachineSpec) *corev1.PodAntiAffinity {
	return &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				TopologyKey: corev1.LabelHostname,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
					LabelMachineRequestNamespace: s.Owner.Namespace,
					LabelRole:                    s.Role,
				}},
			},
		}},
	}
}

// requireNodeLabels restricts the VM to the Harvester nodes that carry all the labels (nil: any
// node). KubeVirt copies both the VMI's nodeSelector and its affinity to the virt-launcher pod,
// so either would place the VM; required node affinity is what Harvester itself uses for node
// labels, and the one that keeps the VM live-migratable:
//   - Harvester's UI (the VM's Node Scheduling tab, rancher/dashboard NodeScheduling.vue) writes
//     spec.nodeSelector only to pin a VM to one host (kubernetes.io/hostname, "Run VM on specific
//     node", which cannot live-migrate), and rules on node labels as node affinity; CAPHV places
//     its failure domains with required node affinity too.
//   - Harvester's upgrade and maintenance checks (GetAllNonLiveMigratableVMINames,
//     harvester pkg/util/virtualmachineinstance) count every VMI with a nodeSelector as not
//     live-migratable, but match required node affinity against the other nodes: a VM in a
//     failure domain of two or more nodes can still be moved off a node being upgraded.
//
// One term with one requirement per label: the requirements of a term must all hold (the terms
// of a NodeSelector are alternatives). Keys are sorted so that the same labels build the same VM.
func requireNodeLabels(nodeLabels map[string]string) *corev1.NodeAffinity {
	if len(nodeLabels) == 0 {
		return nil
	}
	term := corev1.NodeSelectorTerm{}
	for _, key := range slices.Sorted(maps.Keys(nodeLabels)) {
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{
			Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeLabels[key]},
		})
	}
	return &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{term},
	}}
}

func virtioDisk(name string, bootOrder *uint) kubevirtv1.Disk {
	return kubevirtv1.Disk{
		Name:       name,
		BootOrder:  bootOrder,
		DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
	}
}

func claimVolume(name, claim string) kubevirtv1.Volume {
	return kubevirtv1.Volume{Name: name, VolumeSource: kubevirtv1.VolumeSource{
		PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		},
	}}
}

// describe names an object for messages: "<kind> <namespace>/<name>".
func describe(kind, namespace, name string) string {
	return fmt.Sprintf("%s %s/%s", kind, namespace, name)
}

// ownerReference names obj, of kind gvk, as an owner (for garbage collection only).
func ownerReference(gvk schema.GroupVersionKind, obj client.Object) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: obj.GetName(), UID: obj.GetUID()}
}

// AnnotationCloudInitHash is the SHA-256 of a cloud-init Secret's data, set by the provider. The
// provider caches and reads cloud-init Secrets by their metadata only, so that userData (a Talos
// configuration holds the cluster's keys) never sits in its memory; the hash says whether the data
// is what the MachineRequest asks for.
const AnnotationCloudInitHash = "butler.butlerlabs.dev/cloud-init-sha256"

// secretMeta is a Secret's metadata, read without its data.
func secretMeta(namespace, name string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// cloudInitHash is the value of AnnotationCloudInitHash for this data.
func cloudInitHash(data map[string][]byte) string {
	h := sha256.New()
	for _, key := range []string{userDataKey, networkDataKey} {
		v, ok := data[key]
		_, _ = fmt.Fprintf(h, "%s:%t:%d:", key, ok, len(v))
		_, _ = h.Write(v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// nicsOf is the VM's interfaces, each bridged to its Multus network (virtio, as Harvester makes
// them), with the MAC the spec gives; the first is named NICName.
func nicsOf(s *MachineSpec) ([]kubevirtv1.Interface, []kubevirtv1.Network) {
	interfaces := make([]kubevirtv1.Interface, 0, len(s.NICs))
	networks := make([]kubevirtv1.Network, 0, len(s.NICs))
	for i, nic := range s.NICs {
		interfaces = append(interfaces, kubevirtv1.Interface{
			Name:                   nicName(i),
			Model:                  "virtio",
			MacAddress:             nic.MAC,
			InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}},
		})
		networks = append(networks, kubevirtv1.Network{
			Name:          nicName(i),
			NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: nic.Network.String()}},
		})
	}
	return interfaces, networks
}

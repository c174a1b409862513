package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

// Passthrough devices, as Harvester's pcidevices-controller add-on (harvester/pcidevices, read at
// v1.7.0 and v1.8.0) and KubeVirt offer them:
//
//   - Every PCI device of a node is a PCIDevice (cluster-scoped) named <node>-<address without
//     ':' and '.'>, whose status.resourceName names its model (pcidevice.go, resourceName and
//     PCIDeviceNameForHostname); tests add them with AddPCIDevice, as the node agent discovers them.
//   - Enabling passthrough (Harvester's UI) creates a PCIDeviceClaim of the PCIDevice's name,
//     which EnablePassthrough does. The claim controller (pcideviceclaim_controller.go,
//     reconcilePCIDeviceClaims) permits the resource in the KubeVirt CR (pciHostDevices:
//     pciVendorSelector "<vendor>:<device>", externalResourceProvider true; reconcileKubevirtCR),
//     sets the claim's status.passthroughEnabled and kernelDriverToUnbind, and its device plugin
//     advertises the claimed devices of the node as the resource (allocatable, capacity). Deleting
//     the claim takes the device off the plugin (OnRemove); the KubeVirt CR keeps the permission.
//   - A vGPU is a VGPUDevice; enabling it with a type its status.availableTypes lists (spec.enabled,
//     spec.vGPUTypeName; EnableVGPU) configures it (status.vGPUStatus vGPUConfigured,
//     configureVGPUTypeName, uuid), permits nvidia.com/<type> in the KubeVirt CR's mediatedDevices
//     (mdevNameSelector the type, externalResourceProvider true) and advertises it on its node
//     (vgpu_controller.go at v1.7.0: enableVGPU, whiteListVGPU, createOrUpdateDevicePlugin). The
//     simulator plays v1.5 to v1.7 here: v1.8 claims the vGPU as a PCI device of that resource
//     instead, and its VM mutator moves gpus to hostDevices (not played).
//
// virt-controller asks a VMI's launcher pod for one of the resource per hostDevices and gpus
// entry, and the scheduler places it only on a node with enough of each free (node.go).
// KubeVirt's admission checks the HostDevices feature gate only (vmi-create-admitter.go,
// validateHostDevicesWithPassthroughEnabled); Harvester's pcidevices VM webhook refuses resources
// it knows no device of (webhook.go, deviceRefusal).

// harvesterFeatureGates are the KubeVirt feature gates Harvester turns on in its KubeVirt CR.
var harvesterFeatureGates = []string{"LiveMigration", "HotplugVolumes", "HostDevices", "GPU", "CPUManager", "VMPersistentState"}

// createKubeVirt creates Harvester's KubeVirt CR, with Harvester's feature gates and no device
// permitted yet.
func (s *Simulator) createKubeVirt(ctx context.Context) error {
	kv := &kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: KubeVirtNamespace, Name: KubeVirtName}}
	kv.Spec.Configuration.DeveloperConfiguration = &kubevirtv1.DeveloperConfiguration{FeatureGates: harvesterFeatureGates}
	kv.Spec.Configuration.VMStateStorageClass = "vmstate-persistence"
	if err := s.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KubeVirtNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", KubeVirtNamespace, err)
	}
	if err := s.c.Create(ctx, kv); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the KubeVirt CR: %w", err)
	}
	return nil
}

// PCIDevice describes a PCI device a node has, as the pcidevices node agent reports it.
type PCIDevice struct {
	Node, Address string
	// VendorID and DeviceID are the PCI IDs (10de and 2236 for an NVIDIA A10).
	VendorID, DeviceID string
	// ResourceName is the device resource of its model (nvidia.com/GA102GL_A10).
	ResourceName string
}

// Name is the PCIDevice's name: the node and the address without ':' and '.'
// (PCIDeviceNameForHostname).
func (d PCIDevice) Name() string {
	return d.Node + "-" + strings.NewReplacer(":", "", ".", "").Replace(d.Address)
}

// AddPCIDevice registers a node's PCI device as Harvester's node agent does (a PCIDevice, its
// driver the host's), and returns its name.
func (s *Simulator) AddPCIDevice(ctx context.Context, d PCIDevice) (string, error) {
	u := deviceObject(PCIDeviceGVK, d.Name())
	u.SetAnnotations(map[string]string{"harvesterhci.io/pcideviceDriver": "nvidia"})
	if err := s.c.Create(ctx, u); err != nil {
		return "", err
	}
	u.Object["status"] = map[string]any{
		"address": d.Address, "vendorId": d.VendorID, "deviceId": d.DeviceID, "classId": "0302", "iommuGroup": "31",
		"nodeName": d.Node, "resourceName": d.ResourceName, "description": "3D controller", "kernelDriverInUse": "nvidia",
	}
	return d.Name(), s.c.Status().Update(ctx, u)
}

// EnablePassthrough does what Harvester's "Enable Passthrough" does for PCIDevice name: it claims
// it for VMs (a PCIDeviceClaim of its name, owned by it).
func (s *Simulator) EnablePassthrough(ctx context.Context, name string) error {
	device := &unstructured.Unstructured{}
	device.SetGroupVersionKind(PCIDeviceGVK)
	if err := s.live.Get(ctx, client.ObjectKey{Name: name}, device); err != nil {
		return err
	}
	claim := deviceObject(PCIDeviceClaimGVK, name)
	claim.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: PCIDeviceGVK.GroupVersion().String(), Kind: PCIDeviceGVK.Kind, Name: name, UID: device.GetUID()}})
	node, _, _ := unstructured.NestedString(device.Object, "status", "nodeName")
	address, _, _ := unstructured.NestedString(device.Object, "status", "address")
	claim.Object["spec"] = map[string]any{"address": address, "nodeName": node, "userName": "admin"}
	return s.c.Create(ctx, claim)
}

// DisablePassthrough does what Harvester's "Disable Passthrough" does: it deletes the claim.
func (s *Simulator) DisablePassthrough(ctx context.Context, name string) error {
	claim := deviceObject(PCIDeviceClaimGVK, name)
	return client.IgnoreNotFound(s.c.Delete(ctx, claim))
}

// AddVGPUDevice registers a vGPU (a virtual function of an SR-IOV GPU) as Harvester does once SR-IOV
// is enabled on the GPU, with the types it can be enabled with, and returns its name.
func (s *Simulator) AddVGPUDevice(ctx context.Context, node, address string, types ...string) (string, error) {
	name := node + "-" + strings.NewReplacer(":", "", ".", "").Replace(address)
	u := deviceObject(VGPUDeviceGVK, name)
	u.Object["spec"] = map[string]any{"address": address, "nodeName": node, "enabled": false, "vGPUTypeName": "", "parentGPUDeviceAddress": address[:len(address)-1] + "0"}
	if err := s.c.Create(ctx, u); err != nil {
		return "", err
	}
	available := map[string]any{}
	for i, t := range types {
		available[t] = fmt.Sprintf("nvidia-%d", 745+i)
	}
	u.Object["status"] = map[string]any{"availableTypes": available}
	return name, s.c.Status().Update(ctx, u)
}

// EnableVGPU does what Harvester's vGPU "Enable" does: the VGPUDevice enabled with a type.
func (s *Simulator) EnableVGPU(ctx context.Context, name, vgpuType string) error {
	patch := fmt.Sprintf(`{"spec":{"enabled":true,"vGPUTypeName":%q}}`, vgpuType)
	return s.c.Patch(ctx, deviceObject(VGPUDeviceGVK, name), client.RawPatch(types.MergePatchType, []byte(patch)))
}

func deviceObject(gvk schema.GroupVersionKind, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	return u
}

// vgpuResourceName is the resource Harvester gives a vGPU type: "nvidia.com/" and the type with
// each slash and dot, and each run of white space, an underscore (harvester/pcidevices
// pkg/util/common/common.go GeneratevGPUDeviceName).
func vgpuResourceName(vgpuType string) string {
	typ := strings.NewReplacer("/", "_", ".", "_").Replace(strings.TrimSpace(vgpuType))
	return "nvidia.com/" + regexp.MustCompile(`\s+`).ReplaceAllString(typ, "_")
}

// deviceReconciler plays the pcidevices controllers and device plugins of every node at once:
// Harvester has one per node, each for its own devices, and together they keep the KubeVirt CR
// and the nodes' device resources as the claims and vGPUs say.
type deviceReconciler struct{ sim *Simulator }

// allDevices is the one request the reconciler works on: every event recounts everything.
var allDevices = ctrl.Request{NamespacedName: types.NamespacedName{Name: "devices"}}

func (r *deviceReconciler) setup(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []ctrl.Request { return []ctrl.Request{allDevices} })
	claims, vgpus := &unstructured.Unstructured{}, &unstructured.Unstructured{}
	claims.SetGroupVersionKind(PCIDeviceClaimGVK)
	vgpus.SetGroupVersionKind(VGPUDeviceGVK)
	devices := &unstructured.Unstructured{}
	devices.SetGroupVersionKind(PCIDeviceGVK)
	return ctrl.NewControllerManagedBy(mgr).Named("sim-pcidevices").
		Watches(claims, all).Watches(vgpus, all).Watches(devices, all).
		Complete(r)
}

// Reconcile brings the claims' and vGPUs' status, the KubeVirt CR's permitted devices and the
// nodes' device resources to what the claims and vGPUs say.
func (r *deviceReconciler) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	c := r.sim.c
	list := func(gvk schema.GroupVersionKind) ([]unstructured.Unstructured, error) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		err := c.List(ctx, l)
		return l.Items, err
	}
	devices, err := list(PCIDeviceGVK)
	if err != nil {
		return ctrl.Result{}, err
	}
	claims, err := list(PCIDeviceClaimGVK)
	if err != nil {
		return ctrl.Result{}, err
	}
	vgpus, err := list(VGPUDeviceGVK)
	if err != nil {
		return ctrl.Result{}, err
	}
	byName := map[string]*unstructured.Unstructured{}
	managed := map[string]bool{} // every device resource a node could advertise
	for i := range devices {
		byName[devices[i].GetName()] = &devices[i]
		managed[nestedString(&devices[i], "status", "resourceName")] = true
	}
	var permitPCI []kubevirtv1.PciHostDevice
	var permitMdev []kubevirtv1.MediatedHostDevice
	advertised := map[string]corev1.ResourceList{} // node -> resource -> count
	count := func(node, resourceName string) {
		if advertised[node] == nil {
			advertised[node] = corev1.ResourceList{}
		}
		q := advertised[node][corev1.ResourceName(resourceName)]
		q.Add(*resource.NewQuantity(1, resource.DecimalSI))
		advertised[node][corev1.ResourceName(resourceName)] = q
	}
	for i := range claims {
		claim := &claims[i]
		device := byName[claim.GetName()]
		if device == nil || claim.GetDeletionTimestamp() != nil {
			continue
		}
		resourceName := nestedString(device, "status", "resourceName")
		permitPCI = append(permitPCI, kubevirtv1.PciHostDevice{
			PCIVendorSelector: nestedString(device, "status", "vendorId") + ":" + nestedString(device, "status", "deviceId"),
			ResourceName:      resourceName, ExternalResourceProvider: true,
		})
		count(nestedString(device, "status", "nodeName"), resourceName)
		if enabled, _, _ := unstructured.NestedBool(claim.Object, "status", "passthroughEnabled"); !enabled {
			claim.Object["status"] = map[string]any{"passthroughEnabled": true, "kernelDriverToUnbind": nestedString(device, "status", "kernelDriverInUse")}
			if err := c.Status().Update(ctx, claim); err != nil {
				return retryConflict(err)
			}
		}
	}
	for i := range vgpus {
		vgpu := &vgpus[i]
		available, _, _ := unstructured.NestedStringMap(vgpu.Object, "status", "availableTypes")
		for typ := range available {
			managed[vgpuResourceName(typ)] = true
		}
		want := r.vgpuStatus(vgpu, available)
		if typ, _ := want["configureVGPUTypeName"].(string); typ != "" {
			permitMdev = append(permitMdev, kubevirtv1.MediatedHostDevice{MDEVNameSelector: typ, ResourceName: vgpuResourceName(typ), ExternalResourceProvider: true})
			count(nestedString(vgpu, "spec", "nodeName"), vgpuResourceName(typ))
		}
		if have, _, _ := unstructured.NestedMap(vgpu.Object, "status"); !equality.Semantic.DeepEqual(have, want) {
			vgpu.Object["status"] = want
			if err := c.Status().Update(ctx, vgpu); err != nil {
				return retryConflict(err)
			}
		}
	}
	if err := r.permit(ctx, permitPCI, permitMdev); err != nil {
		return retryConflict(err)
	}
	return retryConflict(r.advertise(ctx, managed, advertised))
}

// vgpuStatus is the VGPUDevice's status as the vGPU controller keeps it: configured with its type
// while enabled with one it can take (its uuid kept), cleared while disabled.
func (r *deviceReconciler) vgpuStatus(vgpu *unstructured.Unstructured, available map[string]string) map[string]any {
	status := map[string]any{}
	if have, ok, _ := unstructured.NestedMap(vgpu.Object, "status"); ok {
		status = have
	}
	delete(status, "vGPUStatus")
	delete(status, "configureVGPUTypeName")
	uid := nestedString(vgpu, "status", "uuid")
	delete(status, "uuid")
	enabled, _, _ := unstructured.NestedBool(vgpu.Object, "spec", "enabled")
	typ := nestedString(vgpu, "spec", "vGPUTypeName")
	if _, ok := available[typ]; enabled && ok {
		if uid == "" {
			uid = string(uuid.NewUUID())
		}
		status["vGPUStatus"], status["configureVGPUTypeName"], status["uuid"] = vGPUStatusConfigured, typ, uid
	}
	return status
}

// permit adds the devices to the KubeVirt CR's permittedHostDevices, each resource once; a
// permission stays once given (neither controller removes one).
func (r *deviceReconciler) permit(ctx context.Context, pci []kubevirtv1.PciHostDevice, mdev []kubevirtv1.MediatedHostDevice) error {
	kv := &kubevirtv1.KubeVirt{}
	if err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: KubeVirtNamespace, Name: KubeVirtName}, kv); err != nil {
		return err
	}
	before := kv.DeepCopy()
	p := kv.Spec.Configuration.PermittedHostDevices
	if p == nil {
		p = &kubevirtv1.PermittedHostDevices{}
	}
	for _, d := range pci {
		if !slices.ContainsFunc(p.PciHostDevices, func(h kubevirtv1.PciHostDevice) bool { return h.ResourceName == d.ResourceName }) {
			p.PciHostDevices = append(p.PciHostDevices, d)
		}
	}
	for _, d := range mdev {
		if !slices.ContainsFunc(p.MediatedDevices, func(h kubevirtv1.MediatedHostDevice) bool { return h.ResourceName == d.ResourceName }) {
			p.MediatedDevices = append(p.MediatedDevices, d)
		}
	}
	if len(p.PciHostDevices)+len(p.MediatedDevices) > 0 {
		kv.Spec.Configuration.PermittedHostDevices = p
	}
	if equality.Semantic.DeepEqual(before.Spec, kv.Spec) {
		return nil
	}
	return r.sim.c.Update(ctx, kv)
}

// advertise sets each node's device resources (capacity and allocatable) as its device plugins
// count them: a resource none of the node's devices offers any more stays at 0, as the kubelet
// keeps the resource of a plugin that stopped.
func (r *deviceReconciler) advertise(ctx context.Context, managed map[string]bool, advertised map[string]corev1.ResourceList) error {
	nodes := &corev1.NodeList{}
	if err := r.sim.c.List(ctx, nodes); err != nil {
		return err
	}
	for i := range nodes.Items {
		node := &nodes.Items[i]
		before := node.Status.DeepCopy()
		for _, name := range slices.Sorted(maps.Keys(managed)) {
			resourceName := corev1.ResourceName(name)
			q, offered := advertised[node.Name][resourceName]
			if _, had := node.Status.Allocatable[resourceName]; !offered && !had {
				continue
			}
			if node.Status.Allocatable == nil {
				node.Status.Allocatable, node.Status.Capacity = corev1.ResourceList{}, corev1.ResourceList{}
			}
			node.Status.Allocatable[resourceName], node.Status.Capacity[resourceName] = q, q
		}
		if equality.Semantic.DeepEqual(before, &node.Status) {
			continue
		}
		if err := r.sim.c.Status().Update(ctx, node); err != nil {
			return err
		}
	}
	return nil
}

func nestedString(u *unstructured.Unstructured, fields ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, fields...)
	return s
}

// deviceRequests are what virt-controller asks a VMI's launcher pod for of device resources: one
// per hostDevices and gpus entry, as requests and limits (kubevirt
// pkg/virt-controller/services/renderresources.go, WithHostDevices and WithGPUs).
func deviceRequests(spec *kubevirtv1.VirtualMachineInstanceSpec) map[string]int64 {
	out := map[string]int64{}
	for _, d := range spec.Domain.Devices.HostDevices {
		out[d.DeviceName]++
	}
	for _, d := range spec.Domain.Devices.GPUs {
		out[d.DeviceName]++
	}
	return out
}

// hostDevicesGateOff is KubeVirt's refusal of host devices without its HostDevices feature gate in
// the KubeVirt CR (vmi-create-admitter.go, validateHostDevicesWithPassthroughEnabled, which its VM
// admitter runs on the template); "" when the VM has none or the gate is on, as Harvester's
// KubeVirt CR has it.
func (w *webhooks) hostDevicesGateOff(ctx context.Context, vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.Template == nil || vm.Spec.Template.Spec.Domain.Devices.HostDevices == nil {
		return ""
	}
	kv := &kubevirtv1.KubeVirt{}
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: KubeVirtNamespace, Name: KubeVirtName}, kv); err != nil {
		return ""
	}
	if dc := kv.Spec.Configuration.DeveloperConfiguration; dc != nil && slices.Contains(dc.FeatureGates, "HostDevices") {
		return ""
	}
	return "Host Devices feature gate is not enabled in kubevirt-config"
}

// validateDevices is the pcidevices add-on's VM validator (pkg/webhook/vm_validatation.go at
// v1.7.0, validateDevices): a host device whose resource no PCIDevice (nor USBDevice, which the
// simulator has none of) has, and a GPU whose resource no configured VGPUDevice's type gives, is
// refused, as its webhook framework answers a plain error: 500 Internal Server Error with the
// message. It looks devices up in its caches by resource name.
func (w *webhooks) validateDevices(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vm := &kubevirtv1.VirtualMachine{}
	if err := json.Unmarshal(req.Object.Raw, vm); err != nil || vm.Spec.Template == nil {
		return allowed()
	}
	devices := vm.Spec.Template.Spec.Domain.Devices
	if len(devices.HostDevices)+len(devices.GPUs) == 0 {
		return allowed()
	}
	known := map[string]bool{}
	list := func(gvk schema.GroupVersionKind, resourceName func(*unstructured.Unstructured) string) error {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := w.c.List(ctx, l); err != nil {
			return err
		}
		for i := range l.Items {
			known[gvk.Kind+" "+resourceName(&l.Items[i])] = true
		}
		return nil
	}
	if err := list(PCIDeviceGVK, func(u *unstructured.Unstructured) string { return nestedString(u, "status", "resourceName") }); err != nil {
		return denied(http.StatusInternalServerError, metav1.StatusReasonInternalError, fmt.Sprintf("error looking up pcidevice from cache: %v", err))
	}
	if err := list(VGPUDeviceGVK, func(u *unstructured.Unstructured) string {
		return vgpuResourceName(nestedString(u, "status", "configureVGPUTypeName"))
	}); err != nil {
		return denied(http.StatusInternalServerError, metav1.StatusReasonInternalError, fmt.Sprintf("error looking up vGPU device from cache: %v", err))
	}
	for _, d := range devices.HostDevices {
		if !known[PCIDeviceGVK.Kind+" "+d.DeviceName] {
			return denied(http.StatusInternalServerError, metav1.StatusReasonInternalError,
				fmt.Sprintf("hostdevice %s: resource name %s not found in pcidevice and usbdevice cache", d.Name, d.DeviceName))
		}
	}
	for _, g := range devices.GPUs {
		if !known[VGPUDeviceGVK.Kind+" "+g.DeviceName] {
			return denied(http.StatusInternalServerError, metav1.StatusReasonInternalError,
				fmt.Sprintf("gpu device %s: resource name %s not found in pcidevice cache", g.Name, g.DeviceName))
		}
	}
	return allowed()
}

package harvester

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
)

// Passthrough devices and vGPUs on Harvester, as its pcidevices controller (harvester/pcidevices,
// the pcidevices-controller add-on; read at v1.7.0 and v1.8.0) offers them to VMs:
//
//   - Every PCI device of every node is a PCIDevice (cluster-scoped, devices.harvesterhci.io
//     v1beta1) named <node>-<address>, whose status.resourceName is the device resource of its
//     model ("<vendor>.com/<PRODUCT_NAME>", pkg/apis/devices.harvesterhci.io/v1beta1/pcidevice.go,
//     resourceName).
//   - Enabling passthrough for one (Harvester's PCI Devices page) creates a PCIDeviceClaim of the
//     PCIDevice's name; its controller (pkg/controller/pcideviceclaim, reconcilePCIDeviceClaims)
//     permits the resource in the KubeVirt CR harvester-system/kubevirt
//     (spec.configuration.permittedHostDevices.pciHostDevices, externalResourceProvider: true),
//     binds the device to vfio-pci, starts a device plugin for the resource on the node (its
//     allocatable counts the node's claimed devices) and sets status.passthroughEnabled.
//   - A vGPU is a VGPUDevice (cluster-scoped). Enabling one with a type (spec.enabled,
//     spec.vGPUTypeName) permits nvidia.com/<type, spaces, slashes and dots as underscores> in the
//     KubeVirt CR's mediatedDevices and advertises it on the node (v1.5 to v1.7,
//     pkg/controller/gpudevice/vgpu_controller.go whiteListVGPU; v1.8 claims the vGPU as a PCI
//     device of that resource name instead, submitPCIDeviceClaim).
//   - KubeVirt asks the VM's launcher pod for one of the resource per device, so only a node that
//     advertises one free takes the VM; KubeVirt's own admission checks nothing but its HostDevices
//     feature gate (vmi-create-admitter.go, validateHostDevicesWithPassthroughEnabled), which
//     Harvester turns on. Harvester's pcidevices VM webhook (pkg/webhook/vm_validatation.go)
//     refuses a host device whose resource no PCIDevice has, and (v1.5 to v1.7) a GPU whose type
//     no enabled vGPU has.
//
// So before a machine with devices is made, the provider reads what Harvester offers: a resource
// is offered when the KubeVirt CR permits it and a node advertises as many as the machine asks
// for. One that is not is a wait (DeviceUnavailable) naming the field and what to enable; the
// PCIDevices, PCIDeviceClaims and VGPUDevices only make the message say what Harvester has. The
// reads are cluster-scoped and opt-in (config/harvester/device-rbac.yaml, DevicePermissions):
// without them the check is skipped and the machine is made as asked, and KubeVirt's scheduling
// says the rest (VMUnschedulable, see devicesShort). A device every one of which is in use is
// offered all the same: the VM waits for one to be freed, as Harvester's scheduling has it.

// Harvester's device kinds (harvester/pcidevices pkg/apis/devices.harvesterhci.io/v1beta1).
var (
	PCIDeviceGVK      = schema.GroupVersionKind{Group: devicesGroup, Version: "v1beta1", Kind: "PCIDevice"}
	PCIDeviceClaimGVK = schema.GroupVersionKind{Group: devicesGroup, Version: "v1beta1", Kind: "PCIDeviceClaim"}
	VGPUDeviceGVK     = schema.GroupVersionKind{Group: devicesGroup, Version: "v1beta1", Kind: "VGPUDevice"}
)

const (
	devicesGroup = "devices.harvesterhci.io"
	// kubeVirtCR is the name of Harvester's KubeVirt CR, in harvesterNamespace (pcidevices'
	// KubevirtCR and DefaultNS).
	kubeVirtCR = "kubevirt"
)

// DevicePermissions is what the device check reads on Harvester (config/harvester/device-rbac.yaml
// grants exactly it): the KubeVirt CR by name, the nodes, and Harvester's device kinds.
func DevicePermissions() []Permission {
	return []Permission{
		{Verb: "get", Group: kubevirtv1.SchemeGroupVersion.Group, Resource: "kubevirts", Namespace: harvesterNamespace, Name: kubeVirtCR},
		{Verb: "list", Resource: "nodes"},
		{Verb: "list", Group: devicesGroup, Resource: "pcidevices"},
		{Verb: "list", Group: devicesGroup, Resource: "pcideviceclaims"},
		{Verb: "list", Group: devicesGroup, Resource: "vgpudevices"},
	}
}

// Timing of the device check.
const (
	// deviceRetry is how soon a machine waiting for a device looks again: enabling passthrough
	// is a person's action on Harvester, which the provider does not watch.
	deviceRetry = 15 * time.Second
	// deviceInventoryTTL is how long one read of what Harvester offers serves every machine of
	// the cluster: a MachineDeployment of GPU workers scaled up reads it once, not once each.
	deviceInventoryTTL = 10 * time.Second
)

// deviceInventory is what one Harvester cluster offers of passthrough devices.
type deviceInventory struct {
	// permitted are the resources the KubeVirt CR's permittedHostDevices name.
	permitted map[string]bool
	// mostOnANode is, per resource, the most a single node advertises (its allocatable): a VM's
	// devices are all on the node it runs on.
	mostOnANode map[string]int64
	// pciDevices are the PCIDevices by resource, and claimed the names of those whose
	// passthrough is enabled (nil when not read: pciUnread says why).
	pciDevices map[string][]string
	claimed    map[string]bool
	pciUnread  string
	// vgpus are the VGPUDevices (nil when not read: vgpuUnread says why).
	vgpus      []vgpuDevice
	vgpuUnread string
}

// vgpuDevice is what a VGPUDevice says of the vGPU types it offers, as device resources.
type vgpuDevice struct {
	name string
	// enabled is the resource of the type it is enabled with ("" when disabled).
	enabled string
	// available are the resources of the types it can be enabled with.
	available []string
}

// deviceInventories shares one read of each cluster's inventory among the machines that ask.
type deviceInventories struct {
	mu    sync.Mutex
	at    time.Time
	inv   *deviceInventory
	skip  string
	group singleflight.Group
}

// passthroughDevice is one device a machine asks for: its resource and the field that asks.
type passthroughDevice struct {
	resource, field string
	vGPU            bool
}

// devicesOf lists the machine's devices with the fields that ask for them (the HarvesterMachine's:
// no other front door has devices).
func devicesOf(s *MachineSpec) []passthroughDevice {
	var out []passthroughDevice
	for i, r := range s.HostDevices {
		out = append(out, passthroughDevice{resource: r, field: fmt.Sprintf("spec.hostDevices[%d].deviceName", i)})
	}
	for i, r := range s.GPUs {
		out = append(out, passthroughDevice{resource: r, field: fmt.Sprintf("spec.gpus[%d].deviceName", i), vGPU: true})
	}
	return out
}

// checkDevices waits (DeviceUnavailable) while Harvester does not offer every device the machine
// asks for. notice is set when the check could not run (the credentials may not read what it
// reads): the machine is then made as asked, and the caller tells its user so.
func (m *machines) checkDevices(ctx context.Context, spec *MachineSpec) (notice string, err error) {
	if !spec.HasDevices() {
		return "", nil
	}
	inv, skip, err := m.deviceInventory(ctx)
	if err != nil {
		return "", err
	}
	if inv == nil {
		return fmt.Sprintf("its passthrough devices were not checked before it was made: %s. Apply config/harvester/device-rbac.yaml on Harvester for the provider's credentials to have the check; until then a device Harvester does not offer leaves the VM unschedulable", skip), nil
	}
	return "", inv.check(devicesOf(spec))
}

// deviceInventory reads what the cluster offers, at most once per deviceInventoryTTL. inv is nil
// when the credentials may not read what decides it (skip says what), which is no error.
func (m *machines) deviceInventory(ctx context.Context) (inv *deviceInventory, skip string, err error) {
	d := &m.devices
	d.mu.Lock()
	if !d.at.IsZero() && time.Since(d.at) < deviceInventoryTTL {
		inv, skip = d.inv, d.skip
		d.mu.Unlock()
		return inv, skip, nil
	}
	d.mu.Unlock()
	type read struct {
		inv  *deviceInventory
		skip string
	}
	v, err, _ := d.group.Do("", func() (any, error) {
		inv, skip, err := m.readDeviceInventory(ctx)
		if err != nil {
			return nil, err
		}
		d.mu.Lock()
		d.at, d.inv, d.skip = time.Now(), inv, skip
		d.mu.Unlock()
		return read{inv, skip}, nil
	})
	if err != nil {
		return nil, "", err
	}
	return v.(read).inv, v.(read).skip, nil
}

// readDeviceInventory reads the KubeVirt CR, the nodes and Harvester's device kinds.
func (m *machines) readDeviceInventory(ctx context.Context) (*deviceInventory, string, error) {
	inv := &deviceInventory{permitted: map[string]bool{}, mostOnANode: map[string]int64{}}
	kv := &kubevirtv1.KubeVirt{}
	switch err := m.c.Get(ctx, client.ObjectKey{Namespace: harvesterNamespace, Name: kubeVirtCR}, kv); {
	case apierrors.IsForbidden(err):
		return nil, "the credentials may not get KubeVirt " + harvesterNamespace + "/" + kubeVirtCR, nil
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		// No KubeVirt CR permits nothing.
	case err != nil:
		return nil, "", classify(err, "get KubeVirt "+harvesterNamespace+"/"+kubeVirtCR)
	case kv.Spec.Configuration.PermittedHostDevices != nil:
		for _, d := range kv.Spec.Configuration.PermittedHostDevices.PciHostDevices {
			inv.permitted[d.ResourceName] = true
		}
		for _, d := range kv.Spec.Configuration.PermittedHostDevices.MediatedDevices {
			inv.permitted[d.ResourceName] = true
		}
	}
	nodes := &corev1.NodeList{}
	switch err := m.c.List(ctx, nodes); {
	case apierrors.IsForbidden(err):
		return nil, "the credentials may not list nodes", nil
	case err != nil:
		return nil, "", classify(err, "list nodes")
	}
	for _, n := range nodes.Items {
		for name, q := range n.Status.Allocatable {
			inv.mostOnANode[string(name)] = max(inv.mostOnANode[string(name)], q.Value())
		}
	}
	var err error
	if inv.pciDevices, inv.claimed, inv.pciUnread, err = m.readPCIDevices(ctx); err != nil {
		return nil, "", err
	}
	if inv.vgpus, inv.vgpuUnread, err = m.readVGPUs(ctx); err != nil {
		return nil, "", err
	}
	return inv, "", nil
}

// listDevices lists a kind of Harvester's device kinds. unread says why it could not be (the
// credentials may not, or Harvester serves no such kind), which is no error.
func (m *machines) listDevices(ctx context.Context, gvk schema.GroupVersionKind) (items []unstructured.Unstructured, unread string, err error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	switch err := m.c.List(ctx, list); {
	case apierrors.IsForbidden(err):
		return nil, fmt.Sprintf("the credentials may not list %ss (config/harvester/device-rbac.yaml grants it)", gvk.Kind), nil
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("Harvester serves no %ss: enable its pcidevices-controller add-on (Advanced > Add-ons)", gvk.Kind), nil
	case err != nil:
		return nil, "", classify(err, "list "+gvk.Kind+"s")
	}
	return list.Items, "", nil
}

// readPCIDevices reads the PCIDevices by resource, and which have passthrough enabled (a
// PCIDeviceClaim of the PCIDevice's name whose status.passthroughEnabled is true).
func (m *machines) readPCIDevices(ctx context.Context) (byResource map[string][]string, claimed map[string]bool, unread string, err error) {
	devices, unread, err := m.listDevices(ctx, PCIDeviceGVK)
	if err != nil || unread != "" {
		return nil, nil, unread, err
	}
	claims, unread, err := m.listDevices(ctx, PCIDeviceClaimGVK)
	if err != nil || unread != "" {
		return nil, nil, unread, err
	}
	byResource, claimed = map[string][]string{}, map[string]bool{}
	for _, d := range devices {
		r, _, _ := unstructured.NestedString(d.Object, "status", "resourceName")
		byResource[r] = append(byResource[r], d.GetName())
	}
	for _, c := range claims {
		if enabled, _, _ := unstructured.NestedBool(c.Object, "status", "passthroughEnabled"); enabled && c.GetDeletionTimestamp() == nil {
			claimed[c.GetName()] = true
		}
	}
	return byResource, claimed, "", nil
}

// readVGPUs reads what each VGPUDevice is enabled with and can be enabled with.
func (m *machines) readVGPUs(ctx context.Context) ([]vgpuDevice, string, error) {
	items, unread, err := m.listDevices(ctx, VGPUDeviceGVK)
	if err != nil || unread != "" {
		return nil, unread, err
	}
	out := make([]vgpuDevice, 0, len(items))
	for _, item := range items {
		v := vgpuDevice{name: item.GetName()}
		if enabled, _, _ := unstructured.NestedBool(item.Object, "spec", "enabled"); enabled {
			typ, _, _ := unstructured.NestedString(item.Object, "status", "configureVGPUTypeName")
			if typ == "" {
				typ, _, _ = unstructured.NestedString(item.Object, "spec", "vGPUTypeName")
			}
			v.enabled = VGPUResourceName(typ)
		}
		available, _, _ := unstructured.NestedStringMap(item.Object, "status", "availableTypes")
		for _, typ := range slices.Sorted(maps.Keys(available)) {
			v.available = append(v.available, VGPUResourceName(typ))
		}
		out = append(out, v)
	}
	return out, "", nil
}

// whiteSpace is what Harvester turns into one underscore in a vGPU type's name.
var whiteSpace = regexp.MustCompile(`\s+`)

// VGPUResourceName is the device resource Harvester gives a vGPU type, "nvidia.com/<type>" with
// each slash and dot, and each run of white space, an underscore (harvester/pcidevices pkg/util/common
// GeneratevGPUDeviceName, v1.5.0 to v1.8.0: "NVIDIA A2-4Q" is nvidia.com/NVIDIA_A2-4Q).
func VGPUResourceName(vgpuType string) string {
	typ := strings.TrimSpace(vgpuType)
	if typ == "" {
		return ""
	}
	typ = strings.NewReplacer("/", "_", ".", "_").Replace(typ)
	return "nvidia.com/" + whiteSpace.ReplaceAllString(typ, "_")
}

// check waits while a device the machine asks for is not offered: one reason, every device said.
func (inv *deviceInventory) check(devices []passthroughDevice) error {
	asked := map[string]int64{}
	for _, d := range devices {
		asked[d.resource]++
	}
	var problems []string
	seen := map[string]bool{}
	for _, d := range devices {
		if seen[d.resource] {
			continue
		}
		seen[d.resource] = true
		if p := inv.problem(d, asked[d.resource]); p != "" {
			problems = append(problems, p)
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return Waiting(reasons.DeviceUnavailable, deviceRetry, "%s; nothing is made until Harvester offers them, the provider looks again every %s", strings.Join(problems, "; "), deviceRetry)
}

// problem says why Harvester does not offer n of d's resource on one node, and what to enable
// ("" when it does).
func (inv *deviceInventory) problem(d passthroughDevice, n int64) string {
	permitted, most := inv.permitted[d.resource], inv.mostOnANode[d.resource]
	if permitted && most >= n {
		return ""
	}
	what := fmt.Sprintf("%s %s", d.field, d.resource)
	if permitted && most > 0 {
		// Offered, but fewer on any one node than the machine asks for.
		return fmt.Sprintf("%s: the machine asks for %d of it and no Harvester node offers more than %d (a VM's devices are all on its node): %s, or ask for fewer", what, n, most, inv.enableMore(d))
	}
	state := "the KubeVirt CR " + harvesterNamespace + "/" + kubeVirtCR + " does not permit it (spec.configuration.permittedHostDevices) and no node advertises it"
	if permitted {
		state = "the KubeVirt CR " + harvesterNamespace + "/" + kubeVirtCR + " permits it but no node advertises it"
	}
	if d.vGPU {
		return fmt.Sprintf("%s: Harvester offers no vGPU of that type (%s): %s", what, state, inv.vgpuAdvice(d.resource))
	}
	return fmt.Sprintf("%s: Harvester offers no PCI device of that resource (%s): %s", what, state, inv.pciAdvice(d.resource))
}

// enableMore is what gives a node more devices of d's resource.
func (inv *deviceInventory) enableMore(d passthroughDevice) string {
	if d.vGPU {
		return "enable more vGPUs of that type on one node (Advanced > vGPU Devices, Enable, with that type)"
	}
	return "enable passthrough for more devices of that model on one node (Advanced > PCI Devices, Enable Passthrough)"
}

// pciAdvice says what Harvester has of a PCI device resource and what to enable.
func (inv *deviceInventory) pciAdvice(resource string) string {
	if inv.pciDevices == nil {
		return fmt.Sprintf("enable passthrough for a device of it in Harvester (Advanced > PCI Devices, Enable Passthrough), whose resource name its PCI Devices page shows (the provider cannot tell which devices there are: %s)", inv.pciUnread)
	}
	devices := inv.pciDevices[resource]
	if len(devices) == 0 {
		return fmt.Sprintf("no PCIDevice on Harvester has status.resourceName %s, and Harvester's pcidevices webhook refuses a VM that asks for it: correct the name to one Harvester's PCI Devices page shows (kubectl get pcidevices)", resource)
	}
	var claimed []string
	for _, name := range devices {
		if inv.claimed[name] {
			claimed = append(claimed, name)
		}
	}
	if len(claimed) > 0 {
		return fmt.Sprintf("passthrough is enabled for %s, and Harvester's pcidevices controller is still permitting and advertising it: nothing to do but wait", strings.Join(listSome(claimed), ", "))
	}
	return fmt.Sprintf("passthrough is enabled for none of its PCIDevices (%s): enable it for one in Harvester (Advanced > PCI Devices, Enable Passthrough), which claims the device for VMs and permits it in the KubeVirt CR", strings.Join(listSome(devices), ", "))
}

// vgpuAdvice says what Harvester has of a vGPU type and what to enable.
func (inv *deviceInventory) vgpuAdvice(resource string) string {
	if inv.vgpus == nil {
		return fmt.Sprintf("enable a vGPU of that type in Harvester (Advanced > vGPU Devices, Enable, with the type whose name gives %s) (the provider cannot tell which vGPUs there are: %s)", resource, inv.vgpuUnread)
	}
	var enabled, available []string
	for _, v := range inv.vgpus {
		if v.enabled == resource {
			enabled = append(enabled, v.name)
		} else if v.enabled == "" && slices.Contains(v.available, resource) {
			available = append(available, v.name)
		}
	}
	switch {
	case len(enabled) > 0:
		return fmt.Sprintf("VGPUDevice %s is enabled with that type, and Harvester's pcidevices controller is still permitting and advertising it: nothing to do but wait", strings.Join(listSome(enabled), ", "))
	case len(available) > 0:
		return fmt.Sprintf("enable a vGPU with that type in Harvester (Advanced > vGPU Devices, Enable, with the type whose name gives %s); VGPUDevices that can take it: %s", resource, strings.Join(listSome(available), ", "))
	}
	return "no VGPUDevice on Harvester can take that type, and Harvester refuses a VM that asks for it: correct the name (a vGPU type's resource is nvidia.com/<type> with spaces as underscores, as a VGPUDevice's status.availableTypes names the types), or enable SR-IOV on the GPU first (Advanced > SR-IOV GPU Devices)"
}

// listSome names up to five objects, and how many more there are.
func listSome(names []string) []string {
	const most = 5
	if len(names) <= most {
		return names
	}
	return append(slices.Clone(names[:most]), fmt.Sprintf("%d more", len(names)-most))
}

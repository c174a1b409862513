package harvester

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// The names Harvester gives vGPU types (pcidevices' GeneratevGPUDeviceName).
func TestVGPUResourceName(t *testing.T) {
	for typ, want := range map[string]string{
		"NVIDIA A2-4Q":         "nvidia.com/NVIDIA_A2-4Q",
		" NVIDIA  A100-1-5C ":  "nvidia.com/NVIDIA_A100-1-5C",
		"GRID RTX6000/8Q":      "nvidia.com/GRID_RTX6000_8Q",
		"NVIDIA A40-2.5B":      "nvidia.com/NVIDIA_A40-2_5B",
		"NVIDIA\tL4-24Q":       "nvidia.com/NVIDIA_L4-24Q",
		"":                     "",
		"NVIDIA RTXA6000-12Q ": "nvidia.com/NVIDIA_RTXA6000-12Q",
	} {
		if got := VGPUResourceName(typ); got != want {
			t.Errorf("VGPUResourceName(%q) = %q, want %q", typ, got, want)
		}
	}
}

// A resource is offered when the KubeVirt CR permits it and one node advertises as many as the
// machine asks for; otherwise the wait names the field and says what Harvester has and what to
// enable.
func TestDeviceInventoryCheck(t *testing.T) {
	const (
		a10  = "nvidia.com/GA102GL_A10"
		a2   = "nvidia.com/NVIDIA_A2-4Q"
		nics = "intel.com/1533"
	)
	offered := func() *deviceInventory {
		return &deviceInventory{
			permitted:   map[string]bool{a10: true, a2: true},
			mostOnANode: map[string]int64{a10: 2, a2: 1, "cpu": 48},
			pciDevices:  map[string][]string{a10: {"node-1-000008000", "node-2-000008000", "node-2-000009000"}, nics: {"node-1-000002000"}},
			claimed:     map[string]bool{"node-1-000008000": true, "node-2-000008000": true, "node-2-000009000": true},
			vgpus: []vgpuDevice{
				{name: "node-1-000008004", enabled: a2},
				{name: "node-1-000008005", available: []string{a2, "nvidia.com/NVIDIA_A2-8Q"}},
			},
		}
	}
	host := func(rs ...string) []passthroughDevice { return devicesOf(&MachineSpec{HostDevices: rs}) }
	gpus := func(rs ...string) []passthroughDevice { return devicesOf(&MachineSpec{GPUs: rs}) }
	for name, tc := range map[string]struct {
		inv           func(*deviceInventory)
		devices       []passthroughDevice
		want, notWant []string // nil want: offered
	}{
		"offered":                      {nil, append(host(a10, a10), gpus(a2)...), nil, nil},
		"more than any node offers":    {nil, host(a10, a10, a10), []string{"spec.hostDevices[0].deviceName nvidia.com/GA102GL_A10", "asks for 3", "no Harvester node offers more than 2", "Enable Passthrough"}, nil},
		"no device of the resource":    {nil, host("nvidia.com/GA100"), []string{"spec.hostDevices[0].deviceName nvidia.com/GA100", "does not permit it", "no PCIDevice on Harvester has status.resourceName nvidia.com/GA100", "pcidevices webhook refuses"}, nil},
		"passthrough enabled for none": {nil, host(a10, nics), []string{"spec.hostDevices[1].deviceName intel.com/1533", "enabled for none of its PCIDevices (node-1-000002000)", "Advanced > PCI Devices, Enable Passthrough"}, []string{"GA102GL_A10"}},
		"claimed, not yet permitted": {func(inv *deviceInventory) { delete(inv.permitted, a10); delete(inv.mostOnANode, a10) },
			host(a10), []string{"passthrough is enabled for node-1-000008000, node-2-000008000, node-2-000009000", "nothing to do but wait"}, nil},
		"permitted, not yet advertised": {func(inv *deviceInventory) { delete(inv.mostOnANode, a10) },
			host(a10), []string{"permits it but no node advertises it"}, nil},
		"devices unread": {func(inv *deviceInventory) {
			inv.pciDevices, inv.claimed, inv.pciUnread = nil, nil, "the credentials may not list PCIDevices"
		},
			host(nics), []string{"spec.hostDevices[0].deviceName intel.com/1533", "Enable Passthrough", "the credentials may not list PCIDevices"}, nil},
		"a vGPU type none is enabled with": {nil, gpus("nvidia.com/NVIDIA_A2-8Q"),
			[]string{"spec.gpus[0].deviceName nvidia.com/NVIDIA_A2-8Q", "no vGPU of that type", "Advanced > vGPU Devices, Enable", "VGPUDevices that can take it: node-1-000008005"}, []string{"PCI Devices"}},
		"a vGPU type none can take": {nil, gpus("nvidia.com/NVIDIA_A2-16Q"), []string{"no VGPUDevice on Harvester can take that type", "status.availableTypes"}, nil},
		"a vGPU enabled, not yet permitted": {func(inv *deviceInventory) { delete(inv.permitted, a2) },
			gpus(a2), []string{"VGPUDevice node-1-000008004 is enabled with that type", "nothing to do but wait"}, nil},
		"two vGPUs of a type one node has one of": {nil, gpus(a2, a2), []string{"spec.gpus[0].deviceName", "asks for 2", "more than 1", "enable more vGPUs of that type"}, nil},
		"vGPUs unread": {func(inv *deviceInventory) { inv.vgpus, inv.vgpuUnread = nil, "Harvester serves no VGPUDevices" },
			gpus("nvidia.com/NVIDIA_A2-8Q"), []string{"enable a vGPU of that type", "Harvester serves no VGPUDevices"}, nil},
		"every problem said once": {nil, append(host("nvidia.com/GA100", "nvidia.com/GA100"), gpus("nvidia.com/NVIDIA_A2-16Q")...),
			[]string{"spec.hostDevices[0]", "spec.gpus[0]", "no VGPUDevice"}, []string{"spec.hostDevices[1]"}},
	} {
		t.Run(name, func(t *testing.T) {
			inv := offered()
			if tc.inv != nil {
				tc.inv(inv)
			}
			err := inv.check(tc.devices)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("err = %v, want the devices offered", err)
				}
				return
			}
			w := mustWait(t, err, reasons.DeviceUnavailable, tc.want...)
			for _, part := range tc.notWant {
				if strings.Contains(w.Message, part) {
					t.Errorf("message %q says %q", w.Message, part)
				}
			}
		})
	}
}

// devicesScheme knows Harvester's device kinds, as the API server of a Harvester with the
// pcidevices-controller add-on serves them.
func devicesScheme() *runtime.Scheme {
	s := RemoteScheme()
	for _, gvk := range []schema.GroupVersionKind{PCIDeviceGVK, PCIDeviceClaimGVK, VGPUDeviceGVK} {
		s.AddKnownTypeWithName(gvk, &unstructured.Unstructured{})
		s.AddKnownTypeWithName(gvk.GroupVersion().WithKind(gvk.Kind+"List"), &unstructured.UnstructuredList{})
	}
	return s
}

// deviceObject is a cluster-scoped object of one of Harvester's device kinds.
func deviceObject(gvk schema.GroupVersionKind, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: fields}
	u.SetGroupVersionKind(gvk)
	u.SetName(name)
	return u
}

// harvesterWithADevice is a Harvester with one A10 whose passthrough is enabled on node-1.
func harvesterWithADevice() []client.Object {
	const a10 = "nvidia.com/GA102GL_A10"
	kv := &kubevirtv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: harvesterNamespace, Name: kubeVirtCR}}
	kv.Spec.Configuration.PermittedHostDevices = &kubevirtv1.PermittedHostDevices{PciHostDevices: []kubevirtv1.PciHostDevice{{PCIVendorSelector: "10de:2236", ResourceName: a10, ExternalResourceProvider: true}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{a10: resource.MustParse("1")}}}
	return []client.Object{kv, node,
		deviceObject(PCIDeviceGVK, "node-1-000008000", map[string]any{"status": map[string]any{"resourceName": a10, "nodeName": "node-1"}}),
		deviceObject(PCIDeviceClaimGVK, "node-1-000008000", map[string]any{"spec": map[string]any{"nodeName": "node-1"}, "status": map[string]any{"passthroughEnabled": true}}),
		deviceObject(VGPUDeviceGVK, "node-1-000008004", map[string]any{"spec": map[string]any{"enabled": false}, "status": map[string]any{"availableTypes": map[string]any{"NVIDIA A2-4Q": "nvidia-745"}}}),
	}
}

// The check reads only for machines with devices, once per deviceInventoryTTL however many ask,
// and a read it may not make skips it (a notice, never an error), while a failed read is
// transient.
func TestCheckDevices(t *testing.T) {
	ctx := context.Background()
	withDevices := func(hostDevices ...string) *MachineSpec {
		s := testSpec()
		s.HostDevices = hostDevices
		return s
	}
	forbid := func(resource string) func(error) error {
		return func(error) error {
			return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", errors.New("no"))
		}
	}
	noMatch := func(error) error { return &meta.NoKindMatchError{GroupKind: PCIDeviceGVK.GroupKind()} }
	for name, tc := range map[string]struct {
		spec *MachineSpec
		// fail replaces the error of reading a kind ("" for none), by kind.
		fail        map[string]func(error) error
		wantReads   int
		wantReason  string
		wantNotice  []string
		wantMessage []string
		transient   bool
	}{
		"no devices, no reads":      {spec: testSpec(), wantReads: 0},
		"offered":                   {spec: withDevices("nvidia.com/GA102GL_A10"), wantReads: 5},
		"not offered":               {spec: withDevices("intel.com/1533"), wantReads: 5, wantReason: reasons.DeviceUnavailable, wantMessage: []string{"spec.hostDevices[0].deviceName intel.com/1533", "no PCIDevice on Harvester"}},
		"the KubeVirt CR forbidden": {spec: withDevices("intel.com/1533"), fail: map[string]func(error) error{"KubeVirt": forbid("kubevirts")}, wantReads: 1, wantNotice: []string{"may not get KubeVirt harvester-system/kubevirt", "config/harvester/device-rbac.yaml"}},
		"nodes forbidden":           {spec: withDevices("intel.com/1533"), fail: map[string]func(error) error{"NodeList": forbid("nodes")}, wantReads: 2, wantNotice: []string{"may not list nodes", "config/harvester/device-rbac.yaml"}},
		"PCIDevices forbidden, decided without them": {spec: withDevices("intel.com/1533"), fail: map[string]func(error) error{"PCIDeviceList": forbid("pcidevices")}, wantReads: 4,
			wantReason: reasons.DeviceUnavailable, wantMessage: []string{"may not list PCIDevices", "Enable Passthrough"}},
		"no pcidevices add-on": {spec: withDevices("intel.com/1533"), fail: map[string]func(error) error{"PCIDeviceList": noMatch}, wantReads: 4,
			wantReason: reasons.DeviceUnavailable, wantMessage: []string{"serves no PCIDevices", "pcidevices-controller add-on"}},
		"Harvester failing": {spec: withDevices("intel.com/1533"), fail: map[string]func(error) error{"NodeList": func(error) error {
			return apierrors.NewGenericServerResponse(http.StatusServiceUnavailable, "list", schema.GroupResource{Resource: "nodes"}, "", "down", 1, true)
		}}, wantReads: 2, transient: true},
	} {
		t.Run(name, func(t *testing.T) {
			var reads atomic.Int32
			failed := func(obj runtime.Object, err error) error {
				reads.Add(1)
				kind := fmt.Sprintf("%T", obj)
				if u, ok := obj.(interface{ GetKind() string }); ok && u.GetKind() != "" {
					kind = u.GetKind()
				} else if strings.Contains(kind, "KubeVirt") {
					kind = "KubeVirt"
				} else if strings.Contains(kind, "NodeList") {
					kind = "NodeList"
				}
				if f := tc.fail[kind]; f != nil {
					return f(err)
				}
				return err
			}
			c := fake.NewClientBuilder().WithScheme(devicesScheme()).WithObjects(harvesterWithADevice()...).WithInterceptorFuncs(interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					return failed(obj, c.Get(ctx, key, obj, opts...))
				},
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					return failed(list, c.List(ctx, list, opts...))
				},
			}).Build()
			m := newTestCluster(c).machines
			notice, err := m.checkDevices(ctx, tc.spec)
			if got := int(reads.Load()); got != tc.wantReads {
				t.Errorf("%d reads, want %d", got, tc.wantReads)
			}
			switch {
			case tc.transient:
				if err == nil || waitingOrPermanent(err) {
					t.Fatalf("err = %v, want a transient error", err)
				}
				return
			case tc.wantReason != "":
				_ = mustWait(t, err, tc.wantReason, tc.wantMessage...)
			case err != nil:
				t.Fatalf("err = %v, want none", err)
			}
			for _, part := range tc.wantNotice {
				if !strings.Contains(notice, part) {
					t.Errorf("notice %q lacks %q", notice, part)
				}
			}
			if tc.wantNotice == nil && notice != "" {
				t.Errorf("notice %q, want none", notice)
			}
			// A second machine within the TTL costs no read.
			before := reads.Load()
			if _, _ = m.checkDevices(ctx, tc.spec); tc.wantReads > 0 && !tc.transient && reads.Load() != before {
				t.Errorf("%d more reads within the TTL, want none", reads.Load()-before)
			}
		})
	}
}

// The pcidevices webhook's refusal of a device it knows nothing of is a wait naming the field,
// not Harvester failing.
func TestUnknownDeviceRefusalWaits(t *testing.T) {
	for msg, field := range map[string]string{
		`admission webhook "pcidevices.harvesterhci.io" denied the request: hostdevice hostdevice-2: resource name nvidia.com/GA100 not found in pcidevice and usbdevice cache`: "spec.hostDevices[1]",
		`admission webhook "pcidevices.harvesterhci.io" denied the request: gpu device gpu-1: resource name nvidia.com/NVIDIA_A2-4Q not found in pcidevice cache`:               "spec.gpus[0]",
		`admission webhook "pcidevices.harvesterhci.io" denied the request: hostdevice gpu-3: resource name nvidia.com/NVIDIA_A2-4Q not found in pcidevice and usbdevice cache`: "spec.gpus[2]",
	} {
		err := createError(apierrors.NewInternalError(errors.New(msg)), "VirtualMachine vms/m")
		w, ok := errkind.AsWaiting(err)
		if !ok || w.Reason != reasons.DeviceUnavailable || !strings.Contains(w.Message, field) || !strings.Contains(w.Message, "Advanced > vGPU Devices") {
			t.Errorf("createError(%q) = %v, want a %s wait naming %s", msg, err, reasons.DeviceUnavailable, field)
		}
	}
	if err := createError(apierrors.NewInternalError(errors.New("etcd is down")), "VirtualMachine vms/m"); waitingOrPermanent(err) {
		t.Errorf("another internal error became %v, want it transient", err)
	}
}

// DevicePermissions reads only: the device check never changes what Harvester offers.
func TestDevicePermissionsOnlyRead(t *testing.T) {
	for _, p := range DevicePermissions() {
		if !slices.Contains([]string{"get", "list"}, p.Verb) {
			t.Errorf("DevicePermissions has %s", p)
		}
	}
}

// waitingOrPermanent reports whether err is a wait or a permanent failure (not transient).
func waitingOrPermanent(err error) bool {
	_, waiting := errkind.AsWaiting(err)
	_, permanent := errkind.AsPermanent(err)
	return waiting || permanent
}

// mustWait fails unless err is a wait of reason whose message says every part, and returns it.
func mustWait(t *testing.T, err error, reason string, parts ...string) *errkind.WaitingError {
	t.Helper()
	w, ok := errkind.AsWaiting(err)
	if !ok || w.Reason != reason {
		t.Fatalf("err = %v, want a wait with %s", err, reason)
	}
	for _, part := range parts {
		if !strings.Contains(w.Message, part) {
			t.Errorf("message %q lacks %q", w.Message, part)
		}
	}
	return w
}

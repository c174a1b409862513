package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

var h *Harvester

const (
	bootDelay  = 600 * time.Millisecond
	cloneDelay = 800 * time.Millisecond
	gcDelay    = 800 * time.Millisecond
)

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the tests with 'make test', which builds the control plane")
		os.Exit(1)
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx, cancel := context.WithCancel(context.Background())
	var err error
	h, err = StartHarvester(ctx, Options{WithProxy: true, Sim: Config{
		BootDelay: bootDelay, IPDelay: 200 * time.Millisecond, SlowBootDelay: time.Hour, CloneDelay: cloneDelay, GCDelay: gcDelay,
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cancel()
	_ = h.Stop()
	os.Exit(code)
}

type fixture struct {
	t   *testing.T
	ctx context.Context
	ns  string
	hv  *Harvester
}

// newFixture gives a test a namespace of its own on the shared simulated Harvester.
func newFixture(t *testing.T) *fixture { return newFixtureOn(t, h) }

// newFixtureOn gives a test a namespace of its own on hv, for tests that need a Harvester
// configured otherwise.
func newFixtureOn(t *testing.T, hv *Harvester) *fixture {
	f := &fixture{t: t, ctx: context.Background(), ns: "sim-" + rand.String(5), hv: hv}
	f.must(hv.Client.Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}))
	return f
}

func (f *fixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) eventually(what string, check func() error) {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fixture) network(name, cidr string) {
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(NetworkAttachmentDefinitionGVK)
	nad.SetNamespace(f.ns)
	nad.SetName(name)
	nad.SetAnnotations(map[string]string{AnnotationRoute: `{"mode":"manual","cidr":"` + cidr + `","gateway":"10.40.0.1"}`})
	_ = unstructured.SetNestedField(nad.Object, `{"cniVersion":"0.3.1","name":"`+name+`","type":"bridge","bridge":"mgmt-br","vlan":40,"ipam":{}}`, "spec", "config")
	f.must(f.hv.Client.Create(f.ctx, nad))
}

func (f *fixture) image(name string, annotations map[string]string) *unstructured.Unstructured {
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(VirtualMachineImageGVK)
	img.SetNamespace(f.ns)
	img.SetName(name)
	img.SetAnnotations(annotations)
	_ = unstructured.SetNestedField(img.Object, "https://example.invalid/talos.raw", "spec", "url")
	f.must(f.hv.Client.Create(f.ctx, img))
	return img
}

// classOf waits until Harvester has initialized the image and returns its storage class.
func (f *fixture) classOf(image string) string {
	f.t.Helper()
	var sc string
	f.eventually("image "+image+" initialized", func() error {
		img := &unstructured.Unstructured{}
		img.SetGroupVersionKind(VirtualMachineImageGVK)
		if err := f.hv.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: image}, img); err != nil {
			return err
		}
		if sc, _, _ = unstructured.NestedString(img.Object, "status", "storageClassName"); sc == "" {
			return errors.New("no status.storageClassName yet")
		}
		return nil
	})
	return sc
}

func (f *fixture) rootDisk(name, image, storageClass string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Annotations: map[string]string{harvester.AnnotationImageID: f.ns + "/" + image}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			StorageClassName: ptr.To(storageClass),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
		},
	}
	return pvc
}

func (f *fixture) vm(name, claim, network string, annotations map[string]string) *kubevirtv1.VirtualMachine {
	vm := f.vmObject(name, claim, network, annotations)
	f.must(f.hv.Client.Create(f.ctx, vm))
	return vm
}

// vmObject is the VM f.vm creates.
func (f *fixture) vmObject(name, claim, network string, annotations map[string]string) *kubevirtv1.VirtualMachine {
	return &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Annotations: annotations},
		Spec: kubevirtv1.VirtualMachineSpec{
			RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
			Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Networks: []kubevirtv1.Network{{Name: "nic-1", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: f.ns + "/" + network}}}},
				Volumes: []kubevirtv1.Volume{{Name: "disk-0", VolumeSource: kubevirtv1.VolumeSource{PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
			}},
		},
	}
}

func (f *fixture) getVMI(name string) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	return vmi, f.hv.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, vmi)
}

func (f *fixture) waitBound(pvc *corev1.PersistentVolumeClaim) {
	f.eventually("PVC bound", func() error {
		got := &corev1.PersistentVolumeClaim{}
		if err := f.hv.Client.Get(f.ctx, client.ObjectKeyFromObject(pvc), got); err != nil {
			return err
		}
		if got.Status.Phase != corev1.ClaimBound {
			return fmt.Errorf("phase %q", got.Status.Phase)
		}
		return nil
	})
}

// readyMachine sets up network, image, PVC and VM and returns once the VM has its IP.
func (f *fixture) readyMachine(name string) *kubevirtv1.VirtualMachineInstance {
	f.t.Helper()
	pvc := f.rootDisk(name+"-disk-0", "talos", f.classOf("talos"))
	f.must(f.hv.Client.Create(f.ctx, pvc))
	f.vm(name, pvc.Name, "vlan40", nil)
	var vmi *kubevirtv1.VirtualMachineInstance
	f.eventually("VMI reports an IPv4 address", func() error {
		var err error
		if vmi, err = f.getVMI(name); err != nil {
			return err
		}
		if a := harvester.SelectAddresses(vmi.Status.Interfaces, harvester.NICName); a.Primary == "" {
			return fmt.Errorf("phase %s, interfaces %+v", vmi.Status.Phase, vmi.Status.Interfaces)
		}
		return nil
	})
	return vmi
}

func TestVMBootsThroughPhasesAndReportsIP(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	pvc := f.rootDisk("cp-0-disk-0", "talos", f.classOf("talos"))
	f.must(h.Client.Create(f.ctx, pvc))
	f.waitBound(pvc)
	start := time.Now()
	f.vm("cp-0", pvc.Name, "vlan40", nil)

	seen := map[kubevirtv1.VirtualMachineInstancePhase]bool{}
	var vmi *kubevirtv1.VirtualMachineInstance
	f.eventually("IP reported", func() error {
		var err error
		if vmi, err = f.getVMI("cp-0"); err != nil {
			return err
		}
		seen[vmi.Status.Phase] = true
		if harvester.SelectAddresses(vmi.Status.Interfaces, harvester.NICName).Primary == "" {
			return fmt.Errorf("no IP yet (phase %s)", vmi.Status.Phase)
		}
		return nil
	})
	if took := time.Since(start); took < bootDelay {
		t.Fatalf("IP reported after %s, before the boot delay %s", took, bootDelay)
	}
	for _, p := range []kubevirtv1.VirtualMachineInstancePhase{kubevirtv1.Scheduling, kubevirtv1.Scheduled, kubevirtv1.Running} {
		if !seen[p] {
			t.Errorf("phase %s never seen (saw %v)", p, seen)
		}
	}
	a := harvester.SelectAddresses(vmi.Status.Interfaces, harvester.NICName)
	ip := netip.MustParseAddr(a.Primary)
	if !netip.MustParsePrefix("10.40.0.0/24").Contains(ip) || !strings.HasPrefix(a.MAC, "52:54:00:") {
		t.Fatalf("addresses %+v", a)
	}
	var noise []string
	for _, iface := range vmi.Status.Interfaces {
		noise = append(noise, iface.IPs...)
	}
	for _, want := range []string{"fe80::", "2001:db8:"} {
		if !strings.Contains(strings.Join(noise, " "), want) {
			t.Errorf("no %s in the reported addresses %v", want, noise)
		}
	}
	// KubeVirt drops the guest's loopback from what the guest agent reports: a client that takes
	// the first IPv4 address it sees (the published provider) must not get 127.0.0.1.
	for _, iface := range vmi.Status.Interfaces {
		if iface.InterfaceName == "lo" || slices.Contains(iface.IPs, "127.0.0.1") {
			t.Errorf("loopback reported: %+v", iface)
		}
	}
	vm := &kubevirtv1.VirtualMachine{}
	f.must(h.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "cp-0"}, vm))
	if vm.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusRunning || !vm.Status.Ready {
		t.Fatalf("VM status %+v", vm.Status)
	}

	// A second VM on the same network gets another address.
	other := f.readyMachine("cp-1")
	if b := harvester.SelectAddresses(other.Status.Interfaces, harvester.NICName).Primary; b == a.Primary {
		t.Fatalf("two VMs got the same address %s", b)
	}
}

func TestNetworkCIDRFromCNIConfigOrDefault(t *testing.T) {
	f := newFixture(t)
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(NetworkAttachmentDefinitionGVK)
	nad.SetNamespace(f.ns)
	nad.SetName("hostlocal")
	_ = unstructured.SetNestedField(nad.Object, `{"type":"bridge","ipam":{"type":"host-local","subnet":"192.168.77.0/24"}}`, "spec", "config")
	f.must(h.Client.Create(f.ctx, nad))
	got, err := h.Sim.networkCIDR(f.ctx, f.ns, "hostlocal")
	if err != nil || got.String() != "192.168.77.0/24" {
		t.Fatalf("CIDR from ipam.subnet = %s, %v", got, err)
	}
	if _, err := h.Sim.networkCIDR(f.ctx, f.ns, "missing"); err == nil {
		t.Fatal("a missing network has a CIDR")
	}
}

func TestPVCBindsOnlyOnAnImportedImageOfItsStorageClass(t *testing.T) {
	f := newFixture(t)
	pendingWithEvent := func(pvc *corev1.PersistentVolumeClaim, want string) func() error {
		return func() error {
			got := &corev1.PersistentVolumeClaim{}
			if err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(pvc), got); err != nil {
				return err
			}
			events := &corev1.EventList{}
			if err := h.Client.List(f.ctx, events, client.InNamespace(f.ns)); err != nil {
				return err
			}
			for _, e := range events.Items {
				if e.InvolvedObject.Name == pvc.Name && e.Type == corev1.EventTypeWarning && e.Reason == reasonWaitingForImage &&
					strings.Contains(e.Message, want) && got.Status.Phase == corev1.ClaimPending {
					return nil
				}
			}
			return fmt.Errorf("phase %q, no %s event saying %q", got.Status.Phase, reasonWaitingForImage, want)
		}
	}
	// No image: Pending, with an event saying why.
	orphan := f.rootDisk("orphan", "missing", "lh-00000000-0000-0000-0000-000000000000")
	f.must(h.Client.Create(f.ctx, orphan))
	f.eventually("PVC of a missing image Pending with an event", pendingWithEvent(orphan, "not found"))

	// The image is being imported: Pending, then bound once imported.
	f.image("later", map[string]string{AnnotationImportDelay: "3s"}) // creation times have 1s granularity
	pvc := f.rootDisk("early", "later", f.classOf("later"))
	f.must(h.Client.Create(f.ctx, pvc))
	f.eventually("PVC Pending while the image imports", pendingWithEvent(pvc, "not imported yet"))
	f.waitBound(pvc)
}

func TestDuplicateMACRejected(t *testing.T) {
	f := newFixture(t)
	withMAC := func(name, mac string) *kubevirtv1.VirtualMachine {
		return &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Domain: kubevirtv1.DomainSpec{Devices: kubevirtv1.Devices{Interfaces: []kubevirtv1.Interface{{Name: "nic-1", MacAddress: mac}}}},
			}}},
		}
	}
	f.must(h.Client.Create(f.ctx, withMAC("first", "52:54:00:12:34:56")))
	// The webhook reads VMs from its informer's cache: a VM created a moment ago may not be there
	// yet (CI saw "second" admitted so). Wait until it is, then ask for the same MAC.
	f.eventually("the webhook's cache holds VM first", func() error {
		vms, err := vmsByIndex(f.ctx, h.webhooks.c, f.ns, indexVMByMAC, "52:54:00:12:34:56")
		if err == nil && len(vms) == 0 {
			err = errors.New("not yet")
		}
		return err
	})
	err := h.Client.Create(f.ctx, withMAC("second", "52:54:00:12:34:56"))
	if err == nil || !strings.Contains(err.Error(), "already used by VirtualMachine "+f.ns+"/first") {
		t.Fatalf("duplicate MAC: %v", err)
	}
	f.must(h.Client.Create(f.ctx, withMAC("third", "52:54:00:12:34:57")))
}

func TestVMDeletionRemovesVMIListedPVCsAndOwnedSecrets(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	f.readyMachine("cp-0")
	vm := &kubevirtv1.VirtualMachine{}
	f.must(h.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "cp-0"}, vm))
	owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cp-0-cloudinit", Namespace: f.ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID}}}}
	unrelated := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "keep-me", Namespace: f.ns}}
	keptPVC := f.rootDisk("keep-disk", "talos", f.classOf("talos"))
	for _, o := range []client.Object{owned, unrelated, keptPVC} {
		f.must(h.Client.Create(f.ctx, o))
	}
	patch := client.MergeFrom(vm.DeepCopy())
	vm.Annotations = map[string]string{harvester.AnnotationRemovedPVCs: "cp-0-disk-0"}
	f.must(h.Client.Patch(f.ctx, vm, patch))
	f.must(h.Client.Delete(f.ctx, vm))

	gone := func(o client.Object) func() error {
		return func() error {
			err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(o), o)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", o.GetName(), err)
			}
			return fmt.Errorf("%s still exists", o.GetName())
		}
	}
	f.eventually("VM gone", gone(&kubevirtv1.VirtualMachine{ObjectMeta: vm.ObjectMeta}))
	f.eventually("VMI gone", gone(&kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Namespace: f.ns}}))
	f.eventually("listed PVC gone", gone(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "cp-0-disk-0", Namespace: f.ns}}))
	f.eventually("owned Secret gone", gone(owned))
	for _, o := range []client.Object{unrelated, keptPVC} {
		if err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatalf("%s was removed: %v", o.GetName(), err)
		}
	}
}

func TestFaults(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	disk := func(name string) string {
		pvc := f.rootDisk(name+"-disk-0", "talos", f.classOf("talos"))
		f.must(h.Client.Create(f.ctx, pvc))
		return pvc.Name
	}
	t.Run("unschedulable", func(t *testing.T) {
		vm := f.vm("unsched", disk("unsched"), "vlan40", map[string]string{AnnotationFault: FaultUnschedulable})
		f.eventually("unschedulable", func() error {
			got := &kubevirtv1.VirtualMachine{}
			if err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(vm), got); err != nil {
				return err
			}
			vmi, err := f.getVMI("unsched")
			if err != nil {
				return err
			}
			if got.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusUnschedulable || vmi.Status.Phase != kubevirtv1.Scheduling ||
				vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)).Reason != corev1.PodReasonUnschedulable {
				return fmt.Errorf("VM %s, VMI %s %+v", got.Status.PrintableStatus, vmi.Status.Phase, vmi.Status.Conditions)
			}
			return nil
		})
	})
	t.Run("no DHCP lease", func(t *testing.T) {
		f.vm("nodhcp", disk("nodhcp"), "vlan40", map[string]string{AnnotationFault: FaultNoDHCP})
		f.eventually("running with the agent connected", func() error {
			vmi, err := f.getVMI("nodhcp")
			if err != nil {
				return err
			}
			if vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceAgentConnected).Status != corev1.ConditionTrue {
				return fmt.Errorf("status %+v", vmi.Status)
			}
			return nil
		})
		time.Sleep(500 * time.Millisecond)
		vmi, _ := f.getVMI("nodhcp")
		if a := harvester.SelectAddresses(vmi.Status.Interfaces, harvester.NICName); a.Primary != "" || len(a.All) == 0 {
			t.Fatalf("addresses %+v: want link-local only", a)
		}
	})
	t.Run("slow boot", func(t *testing.T) {
		f.vm("slow", disk("slow"), "vlan40", map[string]string{AnnotationFault: FaultSlowBoot})
		time.Sleep(3 * bootDelay)
		vmi, err := f.getVMI("slow")
		if err != nil || vmi.Status.Phase == kubevirtv1.Running {
			t.Fatalf("slow VM: %v phase %s", err, vmi.Status.Phase)
		}
	})
	t.Run("image import failed", func(t *testing.T) {
		img := f.image("broken", map[string]string{AnnotationFault: FaultImportFailed})
		f.eventually("import failed", func() error {
			f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(img), img))
			if c := conditionsOf(img); c["Imported"] != "False" || c["RetryLimitExceeded"] != "True" {
				return fmt.Errorf("conditions %v", c)
			}
			return nil
		})
	})
	t.Run("global fault switch", func(t *testing.T) {
		h.Sim.SetFaults(Faults{Unschedulable: true})
		defer h.Sim.SetFaults(Faults{})
		f.vm("global", disk("global"), "vlan40", nil)
		f.eventually("unschedulable by the global switch", func() error {
			vmi, err := f.getVMI("global")
			if err != nil {
				return err
			}
			if vmi.Status.Phase != kubevirtv1.Scheduling || len(vmi.Status.Conditions) == 0 {
				return fmt.Errorf("status %+v", vmi.Status)
			}
			return nil
		})
		h.Sim.SetFaults(Faults{})
		f.eventually("boots once the fault is gone", func() error {
			vmi, err := f.getVMI("global")
			if err != nil {
				return err
			}
			if vmi.Status.Phase != kubevirtv1.Running {
				return fmt.Errorf("phase %s", vmi.Status.Phase)
			}
			return nil
		})
	})
}

func TestStoppedVMHasNoVMI(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.image("talos", nil)
	f.readyMachine("cp-0")
	vm := &kubevirtv1.VirtualMachine{}
	f.must(h.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "cp-0"}, vm))
	patch := client.MergeFrom(vm.DeepCopy())
	vm.Spec.RunStrategy = ptr.To(kubevirtv1.RunStrategyHalted)
	f.must(h.Client.Patch(f.ctx, vm, patch))
	f.eventually("stopped", func() error {
		_, err := f.getVMI("cp-0")
		got := &kubevirtv1.VirtualMachine{}
		f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(vm), got))
		if err == nil {
			return fmt.Errorf("VMI still exists, VM %s", got.Status.PrintableStatus)
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("VMI: %w", err)
		}
		if got.Status.PrintableStatus != kubevirtv1.VirtualMachineStatusStopped {
			return fmt.Errorf("VM %s", got.Status.PrintableStatus)
		}
		return nil
	})
}

// proxyClient is a client of the simulated Harvester through its fault proxy that gives up on a
// request after a second.
func (f *fixture) proxyClient() (client.Client, *rest.Config) {
	f.t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(f.hv.Proxy.Kubeconfig())
	f.must(err)
	cfg.Timeout = time.Second
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	f.must(err)
	return c, cfg
}

func TestFaultProxy(t *testing.T) {
	f := newFixture(t)
	c, cfg := f.proxyClient()
	get := func() error { return c.Get(f.ctx, client.ObjectKey{Name: f.ns}, &corev1.Namespace{}) }

	f.must(get()) // no faults: passes through
	h.Proxy.SetFaults(ProxyFaults{ErrorRate: 1, Seed: 7})
	defer h.Proxy.SetFaults(ProxyFaults{})
	// Raw HTTP, so that client-go's own retries of 429 do not hide what the proxy answers.
	transport, err := rest.TransportFor(cfg)
	f.must(err)
	codes := map[int]int{}
	for range 30 {
		resp, err := (&http.Client{Transport: transport}).Get(h.Proxy.URL() + "/api/v1/namespaces/" + f.ns)
		f.must(err)
		_ = resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[500] == 0 || codes[503] == 0 || codes[429] == 0 || codes[200] != 0 {
		t.Fatalf("status codes answered: %v", codes)
	}
	var status apierrors.APIStatus
	if err := get(); !errorsAs(err, &status) && !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("client-go sees %v", err)
	}
	h.Proxy.SetFaults(ProxyFaults{TimeoutRate: 1})
	if err := get(); err == nil || !strings.Contains(err.Error(), "Timeout") && !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("want a timeout, got %v", err)
	}
	h.Proxy.SetFaults(ProxyFaults{Latency: 300 * time.Millisecond})
	start := time.Now()
	f.must(get())
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("request took %s with 300ms latency", took)
	}
	if h.Proxy.Errors.Load() < 30 || h.Proxy.Timeouts.Load() < 1 {
		t.Fatalf("counters: %d errors, %d timeouts", h.Proxy.Errors.Load(), h.Proxy.Timeouts.Load())
	}
}

// TestFaultProxyHangsWatches: with HangWatches, a watch through the proxy gets no answer, a list
// still does, and CutConnections ends a watch that was answered.
func TestFaultProxyHangsWatches(t *testing.T) {
	f := newFixture(t)
	_, cfg := f.proxyClient()
	cfg.Timeout = 0 // a watch's own; each request below has a deadline
	cs, err := kubernetes.NewForConfig(cfg)
	f.must(err)
	answered, err := cs.CoreV1().ConfigMaps(f.ns).Watch(f.ctx, metav1.ListOptions{})
	f.must(err)
	defer answered.Stop()

	h.Proxy.HangWatches(true)
	defer h.Proxy.HangWatches(false)
	ctx, cancel := context.WithTimeout(f.ctx, 500*time.Millisecond)
	defer cancel()
	if w, err := cs.CoreV1().ConfigMaps(f.ns).Watch(ctx, metav1.ListOptions{}); err == nil {
		w.Stop()
		t.Fatal("a watch was answered while the proxy hangs them")
	}
	if _, err := cs.CoreV1().ConfigMaps(f.ns).List(f.ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("a list while the proxy hangs watches: %v", err)
	}
	h.Proxy.CutConnections()
	select {
	case _, open := <-answered.ResultChan():
		if open {
			t.Fatal("the answered watch sent an event instead of ending")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answered watch still runs after CutConnections")
	}
}

// TestFaultProxyConflicts: an injected 409 is what client-go makes of the API server's own
// (apierrors.IsConflict, the object named), it is injected into writes only, and the write never
// reaches the API server.
func TestFaultProxyConflicts(t *testing.T) {
	f := newFixture(t)
	c, _ := f.proxyClient()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "conflict", Namespace: f.ns}, Data: map[string]string{"k": "v"}}
	f.must(h.Client.Create(f.ctx, cm.DeepCopy()))
	h.Proxy.SetFaults(ProxyFaults{ConflictRate: 1})
	defer h.Proxy.SetFaults(ProxyFaults{})
	before := h.Proxy.Conflicts.Load()

	f.must(c.Get(f.ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})) // reads pass
	patch := client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"changed"}}`))
	err := c.Patch(f.ctx, cm.DeepCopy(), patch)
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errorsAs(err, &status) {
		t.Fatalf("patch: want a Conflict, got %v", err)
	}
	if d := status.Status().Details; d == nil || d.Name != "conflict" || d.Kind != "configmaps" {
		t.Fatalf("patch: Status details %+v do not name the ConfigMap", d)
	}
	created := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "conflict", Namespace: f.ns}}
	err = c.Create(f.ctx, created)
	if !apierrors.IsConflict(err) || !errorsAs(err, &status) {
		t.Fatalf("create: want a Conflict, got %v", err)
	}
	if d := status.Status().Details; d == nil || d.Group != "kubevirt.io" || d.Kind != "virtualmachines" {
		t.Fatalf("create: Status details %+v do not name the resource", d)
	}
	if err := c.Delete(f.ctx, cm.DeepCopy()); !apierrors.IsConflict(err) {
		t.Fatalf("delete: want a Conflict, got %v", err)
	}

	// None of the writes happened.
	got := &corev1.ConfigMap{}
	f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(cm), got))
	if got.Data["k"] != "v" {
		t.Fatalf("the ConfigMap was patched: %v", got.Data)
	}
	if err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(created), created); !apierrors.IsNotFound(err) {
		t.Fatalf("the VM was created: %v", err)
	}
	if n := h.Proxy.Conflicts.Load() - before; n != 3 {
		t.Fatalf("%d conflicts counted, want 3", n)
	}
}

// TestFaultProxyDroppedResponses: a write whose response is dropped is applied on the API server,
// while the client gets a connection reset or a timeout (both are seen), never a response.
func TestFaultProxyDroppedResponses(t *testing.T) {
	f := newFixture(t)
	c, _ := f.proxyClient()
	h.Proxy.SetFaults(ProxyFaults{DropRate: 1})
	defer h.Proxy.SetFaults(ProxyFaults{})
	before := h.Proxy.Dropped.Load()

	f.must(c.Get(f.ctx, client.ObjectKey{Name: f.ns}, &corev1.Namespace{})) // reads pass
	// droppedErr fails unless err is a reset or a timeout, and says which.
	droppedErr := func(what string, err error) string {
		t.Helper()
		var ne net.Error
		switch {
		case err == nil:
			t.Fatalf("%s: succeeded through a dropped response", what)
		case utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err):
			return "reset"
		case errors.As(err, &ne) && ne.Timeout():
			return "timeout"
		}
		t.Fatalf("%s: want a connection reset or a timeout, got %v", what, err)
		return ""
	}
	seen := map[string]int{}
	writes := 0
	for i := 0; seen["reset"] == 0 || seen["timeout"] == 0; i++ {
		if i == 20 { // each draw is even: 2^-19 that one kind is missing by chance
			t.Fatalf("after %d creates: %v", i, seen)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dropped-%d", i), Namespace: f.ns}}
		seen[droppedErr("create "+cm.Name, c.Create(f.ctx, cm))]++
		writes++
		f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(cm), cm)) // created all the same
	}

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dropped-0", Namespace: f.ns}}
	droppedErr("patch", c.Patch(f.ctx, cm.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"k":"patched"}}`))))
	f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(cm), cm))
	if cm.Data["k"] != "patched" {
		t.Fatalf("the patch was not applied: %v", cm.Data)
	}
	droppedErr("delete", c.Delete(f.ctx, cm.DeepCopy()))
	if err := h.Client.Get(f.ctx, client.ObjectKeyFromObject(cm), cm); !apierrors.IsNotFound(err) {
		t.Fatalf("the delete was not applied: %v", err)
	}
	if n := h.Proxy.Dropped.Load() - before; n != int64(writes+2) {
		t.Fatalf("%d dropped responses counted, want %d", n, writes+2)
	}
	t.Logf("dropped responses seen by the client: %v", seen)
}

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/secrets/s":                              "secrets s",
		"/api/v1/namespaces/ns/secrets":                                "secrets ",
		"/api/v1/namespaces/ns":                                        "namespaces ns",
		"/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm":        "virtualmachines.kubevirt.io vm",
		"/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm/status": "virtualmachines.kubevirt.io vm",
		"/apis/storage.k8s.io/v1/storageclasses/longhorn":              "storageclasses.storage.k8s.io longhorn",
		"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":       "selfsubjectaccessreviews.authorization.k8s.io ",
		"/healthz": " ",
	} {
		gr, name := resourceOf(path)
		if got := gr.String() + " " + name; got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}

func errorsAs(err error, target *apierrors.APIStatus) bool { return errors.As(err, target) }

// Images go through Harvester's import states; a download from an unreachable URL is retried
// spec.retry times, each failure counted, before Harvester gives up.
func TestImageImportFollowsHarvesterStates(t *testing.T) {
	f := newFixture(t)
	t.Run("imported after the delay", func(t *testing.T) {
		img := f.image("slow-import", map[string]string{AnnotationImportDelay: "3s"})
		f.eventually("importing", func() error {
			f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(img), img))
			sc, _, _ := unstructured.NestedString(img.Object, "status", "storageClassName")
			if c := conditionsOf(img); c["Initialized"] != "True" || c["Imported"] != "Unknown" || sc != "lh-"+string(img.GetUID()) {
				return fmt.Errorf("conditions %v, storage class %q", c, sc)
			}
			return nil
		})
		f.eventually("imported", func() error {
			f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(img), img))
			if c := conditionsOf(img); c["Imported"] != "True" {
				return fmt.Errorf("conditions %v", c)
			}
			return nil
		})
	})
	t.Run("unreachable URL", func(t *testing.T) {
		h.Sim.SetFaults(Faults{UnreachableURLs: []string{"https://unreachable.example.invalid/"}})
		defer h.Sim.SetFaults(Faults{})
		img := &unstructured.Unstructured{}
		img.SetGroupVersionKind(VirtualMachineImageGVK)
		img.SetNamespace(f.ns)
		img.SetName("unreachable")
		img.SetAnnotations(map[string]string{AnnotationImportDelay: "200ms"})
		_ = unstructured.SetNestedField(img.Object, "https://unreachable.example.invalid/image/abc/v1.9.0/nocloud-amd64.qcow2", "spec", "url")
		f.must(h.Client.Create(f.ctx, img))
		var retries []string
		f.eventually("gave up", func() error {
			f.must(h.Client.Get(f.ctx, client.ObjectKeyFromObject(img), img))
			list, _, _ := unstructured.NestedSlice(img.Object, "status", "conditions")
			for _, c := range list {
				if m := c.(map[string]any); m["type"] == "RetryLimitExceeded" && !slices.Contains(retries, m["message"].(string)) {
					retries = append(retries, m["message"].(string))
				}
			}
			if c := conditionsOf(img); c["RetryLimitExceeded"] != "True" || c["Imported"] != "False" {
				return fmt.Errorf("conditions %v", c)
			}
			return nil
		})
		failed, _, _ := unstructured.NestedInt64(img.Object, "status", "failed")
		if failed != imageRetries+1 || !strings.Contains(retries[len(retries)-1], "retry attempted 3/3 failed due to error") ||
			!strings.Contains(retries[len(retries)-1], "unreachable.example.invalid") {
			t.Fatalf("failed %d, messages %q", failed, retries)
		}
	})
}

package infraapi

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
)

const namespace = "default"

var seq atomic.Int64

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, seq.Add(1)) }

func machineSpec() infrav1.HarvesterMachineSpec {
	return infrav1.HarvesterMachineSpec{
		CPU:      2,
		Memory:   resource.MustParse("4Gi"),
		RootDisk: infrav1.RootDisk{Size: resource.MustParse("40Gi")},
	}
}

func machine(mutate ...func(*infrav1.HarvesterMachineSpec)) *infrav1.HarvesterMachine {
	m := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: uniqueName("m")}, Spec: machineSpec()}
	for _, f := range mutate {
		f(&m.Spec)
	}
	return m
}

func machineTemplate(mutate ...func(*infrav1.HarvesterMachineSpec)) *infrav1.HarvesterMachineTemplate {
	mt := &infrav1.HarvesterMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: uniqueName("mt")}}
	mt.Spec.Template.Spec = machineSpec()
	for _, f := range mutate {
		f(&mt.Spec.Template.Spec)
	}
	return mt
}

func cluster(mutate ...func(*infrav1.HarvesterClusterSpec)) *infrav1.HarvesterCluster {
	c := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: uniqueName("c")},
		Spec: infrav1.HarvesterClusterSpec{ProviderConfigRef: infrav1.ProviderConfigReference{Name: "harvester"}}}
	for _, f := range mutate {
		f(&c.Spec)
	}
	return c
}

func clusterTemplate(mutate ...func(*infrav1.HarvesterClusterSpec)) *infrav1.HarvesterClusterTemplate {
	ct := &infrav1.HarvesterClusterTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: uniqueName("ct")}}
	ct.Spec.Template.Spec = infrav1.HarvesterClusterSpec{ProviderConfigRef: infrav1.ProviderConfigReference{Name: "harvester"}}
	for _, f := range mutate {
		f(&ct.Spec.Template.Spec)
	}
	return ct
}

// mustRefuse fails unless err is the API server's refusal and its message holds every part (the
// field and what is wrong).
func mustRefuse(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s was accepted", what)
		return
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: the refusal does not say %q: %v", what, p, err)
		}
	}
}

func mustCreate(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// Valid objects are accepted as written, with the schema's defaults.
func TestValidObjectsAreAcceptedWithDefaults(t *testing.T) {
	ctx := context.Background()

	c := cluster(func(s *infrav1.HarvesterClusterSpec) {
		s.ProviderConfigRef.Namespace = "butler-system"
		s.ControlPlaneEndpoint = infrav1.APIEndpoint{Host: "10.0.0.10"}
		s.FailureDomains = []infrav1.HarvesterFailureDomain{
			{Name: "zone-a", NodeSelector: map[string]string{"topology.kubernetes.io/zone": "a"}},
			{Name: "zone-b", ControlPlane: ptr.To(false), NodeSelector: map[string]string{"topology.kubernetes.io/zone": "b"}},
		}
		s.ManagementNetwork = "default/vlan40"
	})
	mustCreate(t, c)
	if c.Spec.ControlPlaneEndpoint.Port != 6443 {
		t.Errorf("controlPlaneEndpoint.port is %d, want the default 6443", c.Spec.ControlPlaneEndpoint.Port)
	}
	if fd := c.Spec.FailureDomains; fd[0].ControlPlane == nil || !*fd[0].ControlPlane || fd[1].ControlPlane == nil || *fd[1].ControlPlane {
		t.Errorf("failureDomains[].controlPlane: want the default true and the given false, got %+v", fd)
	}

	// A cluster without an endpoint (a control plane provider sets the Cluster's) is valid, and
	// its endpoint can be set later.
	open := cluster()
	mustCreate(t, open)
	if !open.Spec.ControlPlaneEndpoint.IsZero() {
		t.Errorf("an endpoint was defaulted: %+v", open.Spec.ControlPlaneEndpoint)
	}
	open.Spec.ControlPlaneEndpoint = infrav1.APIEndpoint{Host: "cp.example.com", Port: 443}
	if err := k8s.Update(ctx, open); err != nil {
		t.Errorf("setting the endpoint of a cluster that had none: %v", err)
	}

	m := machine(func(s *infrav1.HarvesterMachineSpec) {
		s.Memory = resource.MustParse("1Gi")
		s.ExtraDisks = []infrav1.Disk{{Size: resource.MustParse("100Gi"), StorageClassName: "longhorn-ssd"}, {Size: resource.MustParse("1Gi")}}
		s.Image = "default/ubuntu-24.04"
		s.Networks = []string{"default/vlan100"}
		s.Labels = map[string]string{"team": "a"}
	})
	mustCreate(t, m)

	// Every firmware the schema allows: Secure Boot with persistent EFI and TPM, plain UEFI, an
	// ephemeral TPM on BIOS.
	for _, f := range []infrav1.Firmware{
		{Boot: infrav1.FirmwareUEFI, SecureBoot: true, PersistentEFI: true, TPM: infrav1.TPMPersistent},
		{Boot: infrav1.FirmwareUEFI},
		{TPM: infrav1.TPMEphemeral},
	} {
		mustCreate(t, machine(func(s *infrav1.HarvesterMachineSpec) { s.Firmware = &f }))
	}

	// Passthrough devices as Harvester names them: the most a machine may have, of PCI devices
	// (whose names may carry digits only, for a model the PCI database does not know) and vGPU
	// types, with and without the Node's resource.
	mustCreate(t, machine(func(s *infrav1.HarvesterMachineSpec) {
		for i := range 8 {
			s.HostDevices = append(s.HostDevices, infrav1.PassthroughDevice{DeviceName: fmt.Sprintf("intel.com/%d", 1533+i)})
			s.GPUs = append(s.GPUs, infrav1.PassthroughDevice{DeviceName: "nvidia.com/NVIDIA_A2-4Q", NodeResourceName: "nvidia.com/gpu"})
		}
		s.HostDevices[0] = infrav1.PassthroughDevice{DeviceName: "nvidia.com/GA102GL_A10", NodeResourceName: "nvidia.com/gpu.shared"}
	}))

	// Several NICs: static addresses from pools (dual stack), DHCP on another network.
	mustCreate(t, machine(func(s *infrav1.HarvesterMachineSpec) {
		v4 := infrav1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "v4"}
		v6 := infrav1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "v6"}
		s.Interfaces = []infrav1.NetworkInterface{
			{Network: "default/vlan100", AddressesFromPools: []infrav1.IPPoolReference{v4, v6}, Gateway4: "10.0.0.1", Gateway6: "2001:db8::1", Nameservers: []string{"10.0.0.2"}},
			{Network: "default/storage", DHCP4: ptr.To(true)},
		}
	}))

	// The provider's status round-trips through the status subresource.
	m.Status = infrav1.HarvesterMachineStatus{
		Initialization: infrav1.HarvesterMachineInitializationStatus{Provisioned: ptr.To(true)},
		Addresses:      []infrav1.MachineAddress{{Type: infrav1.MachineHostName, Address: m.Name}, {Type: infrav1.MachineInternalIP, Address: "10.0.0.21"}},
		FailureDomain:  "zone-a",
		Conditions: []metav1.Condition{{Type: infrav1.ConditionReady, Status: metav1.ConditionTrue, Reason: infrav1.ReasonVMRunning,
			LastTransitionTime: metav1.Now()}},
		ObservedGeneration: m.Generation,
	}
	if err := k8s.Status().Update(ctx, m); err != nil {
		t.Fatalf("status update: %v", err)
	}
	got := &infrav1.HarvesterMachine{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Initialization.Provisioned == nil || !*got.Status.Initialization.Provisioned || len(got.Status.Addresses) != 2 || got.Status.FailureDomain != "zone-a" {
		t.Errorf("status did not round-trip: %+v", got.Status)
	}

	c.Status = infrav1.HarvesterClusterStatus{
		Initialization: infrav1.HarvesterClusterInitializationStatus{Provisioned: ptr.To(true)},
		FailureDomains: c.Spec.ContractFailureDomains(),
	}
	if err := k8s.Status().Update(ctx, c); err != nil {
		t.Fatalf("cluster status update: %v", err)
	}

	mt := machineTemplate()
	mt.Spec.Template.ObjectMeta = infrav1.ObjectMeta{Labels: map[string]string{"pool": "workers"}}
	mustCreate(t, mt)
	mustCreate(t, clusterTemplate(func(s *infrav1.HarvesterClusterSpec) {
		s.FailureDomains = []infrav1.HarvesterFailureDomain{{Name: "zone-a", NodeSelector: map[string]string{"zone": "a"}}}
	}))
}

// Each rule refuses a bad object, and the refusal names the field.
func TestBadObjectsAreRefused(t *testing.T) {
	ctx := context.Background()
	machines := []struct {
		name   string
		mutate func(*infrav1.HarvesterMachineSpec)
		parts  []string
	}{
		{"memory below 1Gi", func(s *infrav1.HarvesterMachineSpec) { s.Memory = resource.MustParse("512Mi") }, []string{"spec.memory", "at least 1Gi"}},
		{"memory in bytes below 1Gi", func(s *infrav1.HarvesterMachineSpec) { s.Memory = resource.MustParse("1000000000") }, []string{"spec.memory", "at least 1Gi"}},
		{"root disk below 1Gi", func(s *infrav1.HarvesterMachineSpec) { s.RootDisk.Size = resource.MustParse("0.5Gi") }, []string{"spec.rootDisk.size", "at least 1Gi"}},
		{"extra disk below 1Gi", func(s *infrav1.HarvesterMachineSpec) {
			s.ExtraDisks = []infrav1.Disk{{Size: resource.MustParse("10Gi")}, {Size: resource.MustParse("100Mi")}}
		}, []string{"spec.extraDisks[1].size", "at least 1Gi"}},
		{"no CPU", func(s *infrav1.HarvesterMachineSpec) { s.CPU = 0 }, []string{"spec.cpu"}},
		{"CPU model with a space", func(s *infrav1.HarvesterMachineSpec) { s.CPUModel = "host model" }, []string{"spec.cpuModel", "should match"}},
		{"CPU model too long", func(s *infrav1.HarvesterMachineSpec) { s.CPUModel = strings.Repeat("a", 65) }, []string{"spec.cpuModel", "64"}},
		{"Secure Boot on BIOS", func(s *infrav1.HarvesterMachineSpec) { s.Firmware = &infrav1.Firmware{SecureBoot: true} }, []string{"spec.firmware.secureBoot", "needs boot: UEFI"}},
		{"persistent EFI on BIOS", func(s *infrav1.HarvesterMachineSpec) {
			s.Firmware = &infrav1.Firmware{Boot: infrav1.FirmwareBIOS, PersistentEFI: true}
		}, []string{"spec.firmware.persistentEfi", "needs boot: UEFI"}},
		{"unknown firmware", func(s *infrav1.HarvesterMachineSpec) { s.Firmware = &infrav1.Firmware{Boot: "CSM"} }, []string{"spec.firmware.boot", "BIOS", "UEFI"}},
		{"unknown TPM mode", func(s *infrav1.HarvesterMachineSpec) { s.Firmware = &infrav1.Firmware{TPM: "Sealed"} }, []string{"spec.firmware.tpm", "Persistent", "Ephemeral"}},
		{"a host device without a vendor domain", func(s *infrav1.HarvesterMachineSpec) {
			s.HostDevices = []infrav1.PassthroughDevice{{DeviceName: "GA102GL_A10"}}
		}, []string{"spec.hostDevices[0].deviceName", "must be a device resource name", "nvidia.com/GA102GL_A10"}},
		{"a host device with a space", func(s *infrav1.HarvesterMachineSpec) {
			s.HostDevices = []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/GA102GL A10"}}
		}, []string{"spec.hostDevices[0].deviceName", "must be a device resource name"}},
		{"a host device without its name", func(s *infrav1.HarvesterMachineSpec) {
			s.HostDevices = []infrav1.PassthroughDevice{{NodeResourceName: "nvidia.com/gpu"}}
		}, []string{"spec.hostDevices[0].deviceName"}},
		{"nine host devices", func(s *infrav1.HarvesterMachineSpec) {
			for range 9 {
				s.HostDevices = append(s.HostDevices, infrav1.PassthroughDevice{DeviceName: "nvidia.com/GA102GL_A10"})
			}
		}, []string{"spec.hostDevices", "must have at most 8 items"}},
		{"a vGPU with a capital domain", func(s *infrav1.HarvesterMachineSpec) {
			s.GPUs = []infrav1.PassthroughDevice{{DeviceName: "NVIDIA.com/NVIDIA_A2-4Q"}}
		}, []string{"spec.gpus[0].deviceName", "must be a device resource name"}},
		{"nine vGPUs", func(s *infrav1.HarvesterMachineSpec) {
			for range 9 {
				s.GPUs = append(s.GPUs, infrav1.PassthroughDevice{DeviceName: "nvidia.com/NVIDIA_A2-4Q"})
			}
		}, []string{"spec.gpus", "must have at most 8 items"}},
		{"a Node resource without a domain", func(s *infrav1.HarvesterMachineSpec) {
			s.GPUs = []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/NVIDIA_A2-4Q", NodeResourceName: "gpu"}}
		}, []string{"spec.gpus[0].nodeResourceName", "must be an extended resource name", "nvidia.com/gpu"}},
		{"two networks", func(s *infrav1.HarvesterMachineSpec) { s.Networks = []string{"default/a", "default/b"} }, []string{"spec.networks", "one network only"}},
		{"network without namespace", func(s *infrav1.HarvesterMachineSpec) { s.Networks = []string{"vlan100"} }, []string{"spec.networks[0]", "should match"}},
		{"network with capitals", func(s *infrav1.HarvesterMachineSpec) { s.Networks = []string{"Default/vlan100"} }, []string{"spec.networks[0]", "should match"}},
		{"image without namespace", func(s *infrav1.HarvesterMachineSpec) { s.Image = "ubuntu" }, []string{"spec.image", "should match"}},
		{"image with two slashes", func(s *infrav1.HarvesterMachineSpec) { s.Image = "a/b/c" }, []string{"spec.image", "should match"}},
		{"foreign provider ID", func(s *infrav1.HarvesterMachineSpec) { s.ProviderID = "aws:///i-123" }, []string{"spec.providerID", "should match"}},
		{"bad storage class", func(s *infrav1.HarvesterMachineSpec) {
			s.ExtraDisks = []infrav1.Disk{{Size: resource.MustParse("10Gi"), StorageClassName: "Not_A_Name"}}
		}, []string{"spec.extraDisks[0].storageClassName"}},
		{"networks and interfaces", func(s *infrav1.HarvesterMachineSpec) {
			s.Networks, s.Interfaces = []string{"default/a"}, []infrav1.NetworkInterface{{Network: "default/a"}}
		}, []string{"spec", "exclusive"}},
		{"two interfaces on one network", func(s *infrav1.HarvesterMachineSpec) {
			s.Interfaces = []infrav1.NetworkInterface{{Network: "default/a"}, {Network: "default/a"}}
		}, []string{"spec.interfaces", "one interface only"}},
		{"nine interfaces", func(s *infrav1.HarvesterMachineSpec) {
			for i := range 9 {
				s.Interfaces = append(s.Interfaces, infrav1.NetworkInterface{Network: fmt.Sprintf("default/n%d", i)})
			}
		}, []string{"spec.interfaces", "must have at most 8 items"}},
		{"an interface's network without namespace", func(s *infrav1.HarvesterMachineSpec) {
			s.Interfaces = []infrav1.NetworkInterface{{Network: "vlan40"}}
		}, []string{"spec.interfaces[0].network", "should match"}},
		{"three pools on an interface", func(s *infrav1.HarvesterMachineSpec) {
			pool := infrav1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "p"}
			s.Interfaces = []infrav1.NetworkInterface{{Network: "default/a", AddressesFromPools: []infrav1.IPPoolReference{pool, pool, pool}}}
		}, []string{"spec.interfaces[0].addressesFromPools", "must have at most 2 items"}},
		{"a pool without kind", func(s *infrav1.HarvesterMachineSpec) {
			s.Interfaces = []infrav1.NetworkInterface{{Network: "default/a", AddressesFromPools: []infrav1.IPPoolReference{{APIGroup: "ipam.cluster.x-k8s.io", Name: "p"}}}}
		}, []string{"spec.interfaces[0].addressesFromPools[0].kind"}},
		{"a gateway that is no IPv4 address", func(s *infrav1.HarvesterMachineSpec) {
			pool := infrav1.IPPoolReference{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "p"}
			s.Interfaces = []infrav1.NetworkInterface{{Network: "default/a", AddressesFromPools: []infrav1.IPPoolReference{pool}, Gateway4: "2001:db8::1"}}
		}, []string{"spec.interfaces[0].gateway4"}},
		{"a gateway on a DHCP interface", func(s *infrav1.HarvesterMachineSpec) {
			s.Interfaces = []infrav1.NetworkInterface{{Network: "default/a", Gateway4: "10.0.0.1"}}
		}, []string{"spec.interfaces[0].gateway4", "addresses from pools"}},
		{"four nameservers", func(s *infrav1.HarvesterMachineSpec) {
			s.Interfaces = []infrav1.NetworkInterface{{Network: "default/a", Nameservers: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}}}
		}, []string{"spec.interfaces[0].nameservers", "must have at most 3 items"}},
	}
	for _, tc := range machines {
		mustRefuse(t, "HarvesterMachine with "+tc.name, k8s.Create(ctx, machine(tc.mutate)), tc.parts...)
		templateParts := make([]string, len(tc.parts))
		for i, p := range tc.parts {
			templateParts[i] = strings.Replace(p, "spec.", "spec.template.spec.", 1)
		}
		mustRefuse(t, "HarvesterMachineTemplate with "+tc.name, k8s.Create(ctx, machineTemplate(tc.mutate)), templateParts...)
	}
	mustRefuse(t, "HarvesterMachineTemplate with a provider ID",
		k8s.Create(ctx, machineTemplate(func(s *infrav1.HarvesterMachineSpec) { s.ProviderID = "harvester://uid" })),
		"spec.template.spec.providerID", "must not be set")

	clusters := []struct {
		name   string
		mutate func(*infrav1.HarvesterClusterSpec)
		parts  []string
	}{
		{"no ProviderConfig name", func(s *infrav1.HarvesterClusterSpec) { s.ProviderConfigRef.Name = "" }, []string{"spec.providerConfigRef.name"}},
		{"bad ProviderConfig namespace", func(s *infrav1.HarvesterClusterSpec) { s.ProviderConfigRef.Namespace = "Butler_System" }, []string{"spec.providerConfigRef.namespace", "should match"}},
		{"an endpoint without host", func(s *infrav1.HarvesterClusterSpec) { s.ControlPlaneEndpoint = infrav1.APIEndpoint{Port: 6443} }, []string{"spec.controlPlaneEndpoint", "host is required"}},
		{"an endpoint port out of range", func(s *infrav1.HarvesterClusterSpec) {
			s.ControlPlaneEndpoint = infrav1.APIEndpoint{Host: "vip", Port: 70000}
		}, []string{"spec.controlPlaneEndpoint.port"}},
		{"a failure domain without node selector", func(s *infrav1.HarvesterClusterSpec) {
			s.FailureDomains = []infrav1.HarvesterFailureDomain{{Name: "zone-a"}}
		}, []string{"spec.failureDomains[0].nodeSelector"}},
		{"a management network without namespace", func(s *infrav1.HarvesterClusterSpec) { s.ManagementNetwork = "vlan40" }, []string{"spec.managementNetwork", "should match"}},
		{"a management network with two slashes", func(s *infrav1.HarvesterClusterSpec) { s.ManagementNetwork = "a/b/c" }, []string{"spec.managementNetwork", "should match"}},
		{"two failure domains of one name", func(s *infrav1.HarvesterClusterSpec) {
			s.FailureDomains = []infrav1.HarvesterFailureDomain{{Name: "a", NodeSelector: map[string]string{"z": "1"}}, {Name: "a", NodeSelector: map[string]string{"z": "2"}}}
		}, []string{"spec.failureDomains[1]", "Duplicate value"}},
	}
	for _, tc := range clusters {
		mustRefuse(t, "HarvesterCluster with "+tc.name, k8s.Create(ctx, cluster(tc.mutate)), tc.parts...)
	}

	// What a Go client cannot send but YAML can.
	for name, tc := range map[string]struct {
		field string
		value any
		parts []string
	}{
		"memory that is no quantity": {"memory", "lots", []string{"spec.memory"}},
		"negative memory":            {"memory", "-4Gi", []string{"spec.memory", "at least 1Gi"}},
		"memory as a small integer":  {"memory", int64(1024), []string{"spec.memory", "at least 1Gi"}},
		"an empty list of networks":  {"networks", []any{}, []string{"spec.networks"}},
	} {
		obj, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(machine())
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetGroupVersionKind(infrav1.GroupVersion.WithKind("HarvesterMachine"))
		if err := unstructured.SetNestedField(u.Object, tc.value, "spec", tc.field); err != nil {
			t.Fatal(err)
		}
		mustRefuse(t, "HarvesterMachine with "+name, k8s.Create(ctx, u), tc.parts...)
	}
	// A memory given in bytes as an integer is fine.
	obj, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(machine())
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(infrav1.GroupVersion.WithKind("HarvesterMachine"))
	_ = unstructured.SetNestedField(u.Object, int64(2147483648), "spec", "memory")
	if err := k8s.Create(ctx, u); err != nil {
		t.Errorf("memory as an integer number of bytes (2Gi) was refused: %v", err)
	}

	// Without a spec, nothing is accepted.
	mustRefuse(t, "HarvesterMachine without spec", k8s.Create(ctx, &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: uniqueName("m")}}), "spec.cpu")
}

func TestProviderIDIsSetOnceAndTheSpecIsImmutable(t *testing.T) {
	ctx := context.Background()
	m := machine()
	mustCreate(t, m)

	// The provider sets the provider ID once the VM exists.
	m.Spec.ProviderID = infrav1.ProviderID("3f1b8a4e-0d7c-4d2b-9a51-6c1f0e2b7d90")
	if err := k8s.Update(ctx, m); err != nil {
		t.Fatalf("setting spec.providerID: %v", err)
	}
	// Cluster API keeps changing metadata (labels, owner references).
	m.Labels = map[string]string{"cluster.x-k8s.io/cluster-name": "c1"}
	if err := k8s.Update(ctx, m); err != nil {
		t.Fatalf("a metadata change was refused: %v", err)
	}

	changed := m.DeepCopy()
	changed.Spec.ProviderID = infrav1.ProviderID("another-uid")
	mustRefuse(t, "a providerID change", k8s.Update(ctx, changed), "spec.providerID", "cannot be changed or removed")
	changed = m.DeepCopy()
	changed.Spec.ProviderID = ""
	mustRefuse(t, "removing the providerID", k8s.Update(ctx, changed), "spec.providerID", "cannot be changed or removed")

	for name, mutate := range map[string]func(*infrav1.HarvesterMachineSpec){
		"cpu":      func(s *infrav1.HarvesterMachineSpec) { s.CPU = 4 },
		"memory":   func(s *infrav1.HarvesterMachineSpec) { s.Memory = resource.MustParse("8Gi") },
		"rootDisk": func(s *infrav1.HarvesterMachineSpec) { s.RootDisk.Size = resource.MustParse("80Gi") },
		"extraDisks": func(s *infrav1.HarvesterMachineSpec) {
			s.ExtraDisks = []infrav1.Disk{{Size: resource.MustParse("1Gi")}}
		},
		"image":    func(s *infrav1.HarvesterMachineSpec) { s.Image = "default/other" },
		"networks": func(s *infrav1.HarvesterMachineSpec) { s.Networks = []string{"default/other"} },
		"interfaces": func(s *infrav1.HarvesterMachineSpec) {
			s.Interfaces = []infrav1.NetworkInterface{{Network: "default/other"}}
		},
		"labels":                func(s *infrav1.HarvesterMachineSpec) { s.Labels = map[string]string{"a": "b"} },
		"dedicatedCpuPlacement": func(s *infrav1.HarvesterMachineSpec) { s.DedicatedCPUPlacement = true },
		"cpuModel":              func(s *infrav1.HarvesterMachineSpec) { s.CPUModel = "host-passthrough" },
		"firmware":              func(s *infrav1.HarvesterMachineSpec) { s.Firmware = &infrav1.Firmware{Boot: infrav1.FirmwareUEFI} },
		"hostDevices": func(s *infrav1.HarvesterMachineSpec) {
			s.HostDevices = []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/GA102GL_A10"}}
		},
		"gpus": func(s *infrav1.HarvesterMachineSpec) {
			s.GPUs = []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/NVIDIA_A2-4Q"}}
		},
	} {
		changed := m.DeepCopy()
		mutate(&changed.Spec)
		mustRefuse(t, "a change of spec."+name, k8s.Update(ctx, changed), "spec", "cannot be changed except for spec.providerID")
	}

	// A machine's devices stay as created, item by item.
	withDevices := machine(func(s *infrav1.HarvesterMachineSpec) {
		s.HostDevices = []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/GA102GL_A10"}}
		s.GPUs = []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/NVIDIA_A2-4Q", NodeResourceName: "nvidia.com/gpu"}}
	})
	mustCreate(t, withDevices)
	withDevices.Labels = map[string]string{"cluster.x-k8s.io/cluster-name": "c1"}
	if err := k8s.Update(ctx, withDevices); err != nil {
		t.Fatalf("a metadata change of a machine with devices was refused: %v", err)
	}
	for name, mutate := range map[string]func(*infrav1.HarvesterMachineSpec){
		"hostDevices[0].deviceName": func(s *infrav1.HarvesterMachineSpec) { s.HostDevices[0].DeviceName = "nvidia.com/GA102GL_A40" },
		"gpus[0].nodeResourceName":  func(s *infrav1.HarvesterMachineSpec) { s.GPUs[0].NodeResourceName = "nvidia.com/gpu.shared" },
		"gpus, one more":            func(s *infrav1.HarvesterMachineSpec) { s.GPUs = append(s.GPUs, s.GPUs[0]) },
		"hostDevices, removed":      func(s *infrav1.HarvesterMachineSpec) { s.HostDevices = nil },
	} {
		changed := withDevices.DeepCopy()
		mutate(&changed.Spec)
		mustRefuse(t, "a change of spec."+name, k8s.Update(ctx, changed), "spec", "cannot be changed except for spec.providerID")
	}
}

func TestClusterRefAndEndpointAreImmutable(t *testing.T) {
	ctx := context.Background()
	c := cluster(func(s *infrav1.HarvesterClusterSpec) {
		s.ControlPlaneEndpoint = infrav1.APIEndpoint{Host: "10.0.0.10", Port: 6443}
	})
	mustCreate(t, c)

	changed := c.DeepCopy()
	changed.Spec.ProviderConfigRef.Name = "other"
	mustRefuse(t, "a providerConfigRef change", k8s.Update(ctx, changed), "spec.providerConfigRef", "cannot be changed")
	changed = c.DeepCopy()
	changed.Spec.ControlPlaneEndpoint.Host = "10.0.0.11"
	mustRefuse(t, "an endpoint change", k8s.Update(ctx, changed), "spec.controlPlaneEndpoint", "cannot be changed or removed once set")
	changed = c.DeepCopy()
	changed.Spec.ControlPlaneEndpoint = infrav1.APIEndpoint{}
	mustRefuse(t, "removing the endpoint", k8s.Update(ctx, changed), "spec.controlPlaneEndpoint", "cannot be changed or removed once set")

	// Failure domains can be added: Harvester gets new nodes.
	c.Spec.FailureDomains = []infrav1.HarvesterFailureDomain{{Name: "zone-c", NodeSelector: map[string]string{"zone": "c"}}}
	if err := k8s.Update(ctx, c); err != nil {
		t.Errorf("adding a failure domain: %v", err)
	}
}

// Templates are immutable (spec.template.spec), through the ValidatingAdmissionPolicy of
// config/capi, which lets Cluster API's topology dry runs through as the contract requires.
func TestTemplatesAreImmutableExceptForTopologyDryRuns(t *testing.T) {
	ctx := context.Background()
	mt := machineTemplate()
	mustCreate(t, mt)
	ct := clusterTemplate()
	mustCreate(t, ct)

	// The API server starts enforcing a new policy within a moment: wait, with dry runs, until it
	// refuses a change.
	changedMT := mt.DeepCopy()
	changedMT.Spec.Template.Spec.CPU = 8
	deadline := time.Now().Add(30 * time.Second)
	for k8s.Update(ctx, changedMT.DeepCopy(), client.DryRunAll) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the template immutability policy is not enforced 30s after it was created")
		}
		time.Sleep(200 * time.Millisecond)
	}

	mustRefuse(t, "a HarvesterMachineTemplate spec change", k8s.Update(ctx, changedMT.DeepCopy()),
		"spec.template.spec of HarvesterMachineTemplate "+mt.Name, "cannot be changed")
	changedCT := ct.DeepCopy()
	changedCT.Spec.Template.Spec.ProviderConfigRef.Name = "other"
	mustRefuse(t, "a HarvesterClusterTemplate spec change", k8s.Update(ctx, changedCT.DeepCopy()),
		"spec.template.spec of HarvesterClusterTemplate "+ct.Name, "cannot be changed")

	// What Cluster API's topology controller does: a dry run with its annotation passes, and
	// changes nothing.
	for _, obj := range []client.Object{changedMT.DeepCopy(), changedCT.DeepCopy()} {
		obj.SetAnnotations(map[string]string{"topology.cluster.x-k8s.io/dry-run": ""})
		if err := k8s.Update(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("the topology controller's dry run of %T was refused: %v", obj, err)
		}
		notDry := obj.DeepCopyObject().(client.Object)
		mustRefuse(t, fmt.Sprintf("a real update of %T with the dry-run annotation", obj), k8s.Update(ctx, notDry), "cannot be changed")
	}
	now := &infrav1.HarvesterMachineTemplate{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(mt), now); err != nil {
		t.Fatal(err)
	}
	if now.Spec.Template.Spec.CPU != mt.Spec.Template.Spec.CPU {
		t.Errorf("a dry run changed the template: cpu %d", now.Spec.Template.Spec.CPU)
	}

	// Only spec.template.spec is immutable: the template's own metadata (the topology controller
	// updates its labels in place) and spec.template.metadata stay changeable.
	now.Labels = map[string]string{"topology.cluster.x-k8s.io/owned": ""}
	now.Spec.Template.ObjectMeta = infrav1.ObjectMeta{Annotations: map[string]string{"note": "x"}}
	if err := k8s.Update(ctx, now); err != nil {
		t.Errorf("a metadata change of a template was refused: %v", err)
	}
}

package clusterapi

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// providerConfig is the ProviderConfig a tenant cluster's HarvesterCluster names.
func providerConfig() *v1alpha1.ProviderConfig {
	return &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "pc", Namespace: "butler-system"},
		Spec: v1alpha1.ProviderConfigSpec{
			Provider: v1alpha1.ProviderTypeHarvester, CredentialsRef: &v1alpha1.SecretReference{Name: "harvester-kubeconfig"},
			Harvester: &v1alpha1.HarvesterProviderConfig{Namespace: "vms", NetworkName: "default/vlan40", ImageName: "default/talos"},
		},
	}
}

func harvesterMachine() *infrav1.HarvesterMachine {
	return &infrav1.HarvesterMachine{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-md-0-abcde", Namespace: "tenants", UID: "hm-uid"},
		Spec: infrav1.HarvesterMachineSpec{
			CPU: 4, Memory: resource.MustParse("8Gi"), RootDisk: infrav1.RootDisk{Size: resource.MustParse("40Gi")},
		},
	}
}

func TestHarvesterMachineSpec(t *testing.T) {
	pc := providerConfig()
	pc.Spec.Harvester.StorageClassName = "longhorn-ssd"
	for name, tc := range map[string]struct {
		change  func(hm *infrav1.HarvesterMachine, m *capiMachine, pc *v1alpha1.ProviderConfig)
		check   func(t *testing.T, s *harvester.MachineSpec)
		wantErr string // reason of the error, "" for none
	}{
		"defaults from the ProviderConfig": {
			check: func(t *testing.T, s *harvester.MachineSpec) {
				if s.Name != "tenant-md-0-abcde" || s.Namespace != "vms" || s.Role != "worker" || s.CPU != 4 || s.MemoryMB != 8192 || s.DiskGB != 40 {
					t.Fatalf("spec %+v", s)
				}
				if s.Image != (harvester.ObjectRef{Namespace: "default", Name: "talos"}) || s.PrimaryNetwork() != (harvester.ObjectRef{Namespace: "default", Name: "vlan40"}) || s.DefaultStorageClass != "longhorn-ssd" {
					t.Fatalf("image %v network %v storage class %q", s.Image, s.PrimaryNetwork(), s.DefaultStorageClass)
				}
				if s.Owner.Kind != OwnerKindHarvesterMachine || s.Owner.UID != "hm-uid" || s.Owner.Namespace != "tenants" || s.Owner.Cluster != "mgmt-uid" {
					t.Fatalf("owner %+v", s.Owner)
				}
				if s.HasDevices() {
					t.Fatalf("devices %v %v asked for by none", s.HostDevices, s.GPUs)
				}
				if s.UserData != "" {
					t.Fatalf("userData %q: the engine reads the bootstrap data when it needs it (harvesterMachineDoor.LoadUserData)", s.UserData)
				}
			},
		},
		"the machine's own image, network and disks, sizes rounded up": {
			change: func(hm *infrav1.HarvesterMachine, m *capiMachine, _ *v1alpha1.ProviderConfig) {
				hm.Spec.Image, hm.Spec.Networks = "images/ubuntu", []string{"nets/vlan50"}
				hm.Spec.Memory, hm.Spec.RootDisk.Size = resource.MustParse("1500M"), resource.MustParse("20G")
				hm.Spec.ExtraDisks = []infrav1.Disk{{Size: resource.MustParse("10Gi"), StorageClassName: "fast"}}
				m.ControlPlane = true
			},
			check: func(t *testing.T, s *harvester.MachineSpec) {
				if s.Image != (harvester.ObjectRef{Namespace: "images", Name: "ubuntu"}) || s.PrimaryNetwork() != (harvester.ObjectRef{Namespace: "nets", Name: "vlan50"}) {
					t.Fatalf("image %v network %v", s.Image, s.PrimaryNetwork())
				}
				// 1500M = 1430.5 MiB, 20G = 18.6 GiB: never less than asked for.
				if s.MemoryMB != 1431 || s.DiskGB != 19 || s.Role != "control-plane" {
					t.Fatalf("memory %d MiB, disk %d GiB, role %s", s.MemoryMB, s.DiskGB, s.Role)
				}
				if len(s.ExtraDisks) != 1 || s.ExtraDisks[0] != (harvester.DiskSpec{SizeGB: 10, StorageClass: "fast"}) {
					t.Fatalf("extra disks %+v", s.ExtraDisks)
				}
			},
		},
		"passthrough devices and vGPUs, by their Harvester resources, in order": {
			change: func(hm *infrav1.HarvesterMachine, _ *capiMachine, _ *v1alpha1.ProviderConfig) {
				hm.Spec.HostDevices = []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/GA102GL_A10", NodeResourceName: "nvidia.com/gpu"}, {DeviceName: "intel.com/1533"}}
				hm.Spec.GPUs = []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/NVIDIA_A2-4Q"}}
			},
			check: func(t *testing.T, s *harvester.MachineSpec) {
				if !slices.Equal(s.HostDevices, []string{"nvidia.com/GA102GL_A10", "intel.com/1533"}) || !slices.Equal(s.GPUs, []string{"nvidia.com/NVIDIA_A2-4Q"}) {
					t.Fatalf("host devices %v, GPUs %v", s.HostDevices, s.GPUs)
				}
			},
		},
		"no image anywhere": {
			change: func(_ *infrav1.HarvesterMachine, _ *capiMachine, pc *v1alpha1.ProviderConfig) {
				pc.Spec.Harvester.ImageName = ""
			},
			wantErr: v1alpha1.ReasonInvalidProviderConfig,
		},
		"a bad image reference": {
			change: func(hm *infrav1.HarvesterMachine, _ *capiMachine, _ *v1alpha1.ProviderConfig) {
				hm.Spec.Image = "a/b/c"
			},
			wantErr: infrav1.ReasonInvalidSpec,
		},
	} {
		t.Run(name, func(t *testing.T) {
			hm, m, pc := harvesterMachine(), capiMachine{Name: "tenant-md-0-abcde"}, pc.DeepCopy()
			if tc.change != nil {
				tc.change(hm, &m, pc)
			}
			tgt, err := target.ResolveProviderConfig(pc, "butler-system/pc", "spec.providerConfigRef")
			if err != nil {
				t.Fatal(err)
			}
			s, err := harvesterMachineSpec(hm, m, tgt, "mgmt-uid")
			if tc.wantErr != "" {
				if reason := reasonOf(err); reason != tc.wantErr {
					t.Fatalf("err = %v, want reason %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

// reasonOf is the reason of a front door error ("" for none).
func reasonOf(err error) string {
	if w, ok := errkind.AsWaiting(err); ok {
		return w.Reason
	}
	if p, ok := errkind.AsPermanent(err); ok {
		return p.Reason
	}
	return ""
}

func TestBootstrapUserData(t *testing.T) {
	secret := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "tenant-md-0-abcde"}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	for name, tc := range map[string]struct {
		data       map[string]string
		want       string
		wantReason string
		mentions   string
	}{
		"cloud-config":        {data: map[string]string{"value": "#cloud-config\n", "format": "cloud-config"}, want: "#cloud-config\n"},
		"no format":           {data: map[string]string{"value": "#cloud-config\n"}, want: "#cloud-config\n"},
		"not written yet":     {data: nil, wantReason: infrav1.ReasonWaitingForBootstrapData, mentions: `key "value"`},
		"ignition is refused": {data: map[string]string{"value": "{}", "format": "ignition"}, wantReason: infrav1.ReasonInvalidSpec, mentions: `format "ignition"`},
		"larger than a Secret": {data: map[string]string{"value": strings.Repeat("x", corev1.MaxSecretSize+1)},
			wantReason: infrav1.ReasonUserDataTooLarge, mentions: "tenants/tenant-md-0-abcde"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := bootstrapUserData(secret(tc.data))
			if tc.wantReason == "" {
				if err != nil || got != tc.want {
					t.Fatalf("got %q, %v", got, err)
				}
				return
			}
			if reasonOf(err) != tc.wantReason || !strings.Contains(err.Error(), tc.mentions) {
				t.Fatalf("err = %v, want reason %s mentioning %s", err, tc.wantReason, tc.mentions)
			}
		})
	}
}

func TestMachineAddresses(t *testing.T) {
	ip := func(s string) infrav1.MachineAddress {
		return infrav1.MachineAddress{Type: infrav1.MachineInternalIP, Address: s}
	}
	host := infrav1.MachineAddress{Type: infrav1.MachineHostName, Address: "tenant-md-0-abcde"}
	assigned := [][]assignedAddress{{{Prefix: netip.MustParsePrefix("10.0.0.7/24")}}, {{Prefix: netip.MustParsePrefix("192.168.0.9/24")}}}
	for name, tc := range map[string]struct {
		assigned [][]assignedAddress
		guest    harvester.Addresses
		want     []infrav1.MachineAddress
	}{
		"what the guest reports": {nil, harvester.Addresses{Primary: "10.0.0.7", All: []string{"10.0.0.7", "10.0.0.8"}},
			[]infrav1.MachineAddress{ip("10.0.0.7"), ip("10.0.0.8"), host}},
		"assigned before the guest says anything": {assigned, harvester.Addresses{},
			[]infrav1.MachineAddress{ip("10.0.0.7"), ip("192.168.0.9"), host}},
		"assigned, then what else the guest reports, each once": {assigned, harvester.Addresses{Primary: "10.0.0.7", All: []string{"10.0.0.7", "fd00::7"}},
			[]infrav1.MachineAddress{ip("10.0.0.7"), ip("192.168.0.9"), ip("fd00::7"), host}},
	} {
		if got := machineAddresses("tenant-md-0-abcde", tc.assigned, tc.guest); !slices.Equal(got, tc.want) {
			t.Errorf("%s: addresses %v, want %v", name, got, tc.want)
		}
	}
}

func TestFailureDomainNodes(t *testing.T) {
	zoned := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "tenant"},
		Spec: infrav1.HarvesterClusterSpec{FailureDomains: []infrav1.HarvesterFailureDomain{
			{Name: "zone-a", NodeSelector: map[string]string{"topology.kubernetes.io/zone": "a"}},
			{Name: "zone-b", NodeSelector: map[string]string{"topology.kubernetes.io/zone": "b", "rack": "r2"}},
		}}}
	plain := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "tenant"}}
	for name, tc := range map[string]struct {
		hc       *infrav1.HarvesterCluster
		domain   string
		want     map[string]string
		mentions []string // of the FailureDomainNotFound message; nil when the domain is found
	}{
		"no failure domain: any node":             {zoned, "", nil, nil},
		"no failure domain, none defined":         {plain, "", nil, nil},
		"a failure domain: its nodes' labels":     {zoned, "zone-b", map[string]string{"topology.kubernetes.io/zone": "b", "rack": "r2"}, nil},
		"a failure domain the cluster lacks":      {zoned, "zone-c", nil, []string{`spec.failureDomain "zone-c" of Machine tenants/tenant-md-0`, "HarvesterCluster tenants/tenant", "it defines zone-a, zone-b", `add a failure domain named "zone-c"`, "nothing is created"}},
		"a failure domain where none are defined": {plain, "zone-a", nil, []string{`spec.failureDomain "zone-a"`, "it defines none"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := failureDomainNodes("tenants", capiMachine{Name: "tenant-md-0", FailureDomain: tc.domain}, tc.hc)
			if tc.mentions == nil {
				if err != nil || !maps.Equal(got, tc.want) {
					t.Fatalf("nodes %v, error %v; want %v", got, err, tc.want)
				}
				if got != nil {
					got["rack"] = "changed"
					if tc.hc.Spec.FailureDomains[1].NodeSelector["rack"] != "r2" {
						t.Fatal("the node labels share the HarvesterCluster's map")
					}
				}
				return
			}
			if reasonOf(err) != infrav1.ReasonFailureDomainNotFound || got != nil {
				t.Fatalf("nodes %v, error %v; want a %s wait", got, err, infrav1.ReasonFailureDomainNotFound)
			}
			for _, m := range tc.mentions {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("message %q does not say %q", err.Error(), m)
				}
			}
		})
	}
}

// TestManagementNetworkMismatch: a machine whose first NIC is on another network than the one its
// cluster's cloud provider reads Node addresses from is named, with both networks; no network
// named, no finding.
func TestManagementNetworkMismatch(t *testing.T) {
	spec := &harvester.MachineSpec{Namespace: "vms", Name: "m", NICs: []harvester.NIC{
		{Network: harvester.ObjectRef{Namespace: "default", Name: "vlan40"}},
		{Network: harvester.ObjectRef{Namespace: "vms", Name: "storage"}},
	}}
	for _, tc := range []struct {
		network string
		want    []string // in the message; none: no mismatch
	}{
		{network: ""},
		{network: "default/vlan40"},
		{network: "vms/storage", want: []string{"default/vlan40", "vms/storage", "HarvesterCluster vms/c", "spec.interfaces[0].network", "HARVESTER_MANAGEMENT_NETWORK"}},
	} {
		hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "c"}, Spec: infrav1.HarvesterClusterSpec{ManagementNetwork: tc.network}}
		got := managementNetworkMismatch(hc, spec)
		if (got == "") != (len(tc.want) == 0) {
			t.Errorf("management network %q: mismatch %q, want one: %v", tc.network, got, len(tc.want) > 0)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("management network %q: %q does not name %s", tc.network, got, w)
			}
		}
	}
}

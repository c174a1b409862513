package sim

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// The guest configures its NICs as cloud-init reads version 1 and 2: by MAC, else by name; static
// addresses as given; DHCP where asked; without a configuration, DHCP on the first NIC only.
func TestGuestNetworkConfig(t *testing.T) {
	p := netip.MustParsePrefix
	type nic struct {
		i         int
		mac, name string
	}
	for name, tc := range map[string]struct {
		raw  string
		nics []nic
		want []nicConfig
		up   []bool
	}{
		"none: DHCP on the first NIC": {"", []nic{{0, "02:00:00:00:00:01", "eth0"}, {1, "02:00:00:00:00:02", "eth1"}},
			[]nicConfig{{dhcp4: true}, {}}, []bool{true, false}},
		"version 2 by MAC, NICs in another order": {`version: 2
ethernets:
  eth0:
    match: {macaddress: "02:00:00:00:00:02"}
    dhcp4: true
  eth1:
    match: {macaddress: "02:AA:00:00:00:01"}
    dhcp4: false
    addresses: [10.40.0.200/24]
`, []nic{{0, "02:aa:00:00:00:01", "eth0"}, {1, "02:00:00:00:00:02", "eth1"}},
			[]nicConfig{{addresses: []netip.Prefix{p("10.40.0.200/24")}}, {dhcp4: true}}, []bool{true, true}},
		"version 2 under network, by name, netplan's yes": {`network:
  version: 2
  ethernets:
    eth0: {dhcp4: "yes"}
`, []nic{{0, "02:00:00:00:00:01", "eth0"}, {1, "02:00:00:00:00:02", "eth1"}},
			[]nicConfig{{dhcp4: true}, {}}, []bool{true, false}},
		"version 1, static with a netmask": {`version: 1
config:
  - type: physical
    name: eth0
    mac_address: "02:00:00:00:00:01"
    subnets:
      - {type: static, address: 192.168.1.10, netmask: 255.255.255.0, gateway: 192.168.1.1}
  - type: nameserver
    address: [192.168.1.1]
`, []nic{{0, "02:00:00:00:00:01", "eth0"}},
			[]nicConfig{{addresses: []netip.Prefix{p("192.168.1.10/24")}}}, []bool{true}},
	} {
		t.Run(name, func(t *testing.T) {
			g := guestNetwork{}
			if tc.raw != "" {
				var err error
				if g, err = parseNetworkConfig(tc.raw); err != nil {
					t.Fatal(err)
				}
			}
			for k, n := range tc.nics {
				got, up := g.forNIC(n.i, n.mac, n.name)
				if !reflect.DeepEqual(got, tc.want[k]) || up != tc.up[k] {
					t.Errorf("NIC %d: %+v (up %v), want %+v (up %v)", n.i, got, up, tc.want[k], tc.up[k])
				}
			}
		})
	}
	if _, err := parseNetworkConfig("version: 3\n"); err == nil || !strings.Contains(err.Error(), "versions 1 and 2") {
		t.Errorf("version 3: %v", err)
	}
}

// A VM with two NICs, its network configuration in its cloud-init Secret: the guest agent reports
// each NIC under its name and MAC, the static address on the one the configuration gives it to (by
// MAC), and a DHCP lease from its own network on the other; no DHCP lease on the static one.
func TestVMWithTwoNICsAndStaticAddress(t *testing.T) {
	f := newFixture(t)
	f.network("vlan40", "10.40.0.0/24")
	f.network("storage", "10.50.0.0/24")
	f.image("talos", nil)
	pvc := f.rootDisk("multi-disk-0", "talos", f.classOf("talos"))
	f.must(h.Client.Create(f.ctx, pvc))
	macs := []string{harvester.MACAddressFor(f.ns, "multi", 0), harvester.MACAddressFor(f.ns, "multi", 1)}
	f.must(h.Client.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "multi-cloudinit"},
		Data: map[string][]byte{"userdata": []byte("#cloud-config\n"), "networkdata": []byte(fmt.Sprintf(`version: 2
ethernets:
  eth0: {match: {macaddress: %q}, dhcp4: false, addresses: [10.40.0.200/24]}
  eth1: {match: {macaddress: %q}, dhcp4: true}
`, macs[0], macs[1]))}}))
	vm := f.vmObject("multi", pvc.Name, "vlan40", nil)
	spec := &vm.Spec.Template.Spec
	spec.Networks = append(spec.Networks, kubevirtv1.Network{Name: "nic-2", NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: f.ns + "/storage"}}})
	spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "nic-1", MacAddress: macs[0]}, {Name: "nic-2", MacAddress: macs[1]}}
	ref := &corev1.LocalObjectReference{Name: "multi-cloudinit"}
	spec.Volumes = append(spec.Volumes, kubevirtv1.Volume{Name: "cloudinitdisk", VolumeSource: kubevirtv1.VolumeSource{
		CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{UserDataSecretRef: ref, NetworkDataSecretRef: ref}}})
	f.must(h.Client.Create(f.ctx, vm))

	f.eventually("both NICs reported with their addresses", func() error {
		vmi, err := f.getVMI("multi")
		if err != nil {
			return err
		}
		primary := harvester.SelectAddresses(vmi.Status.Interfaces, "nic-1")
		second := harvester.SelectAddresses(vmi.Status.Interfaces, "nic-2")
		if primary.Primary != "10.40.0.200" || primary.MAC != macs[0] {
			return fmt.Errorf("nic-1 %+v, want 10.40.0.200 at %s", primary, macs[0])
		}
		if slices.ContainsFunc(primary.All, func(a string) bool { return strings.HasPrefix(a, "2001:db8:") }) {
			return fmt.Errorf("nic-1 has a DHCP lease too: %v", primary.All)
		}
		if ip, err := netip.ParseAddr(second.Primary); err != nil || !netip.MustParsePrefix("10.50.0.0/24").Contains(ip) || second.MAC != macs[1] {
			return fmt.Errorf("nic-2 %+v, want a lease of 10.50.0.0/24 at %s", second, macs[1])
		}
		return nil
	})
}

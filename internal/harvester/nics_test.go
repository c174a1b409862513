package harvester

import (
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestMACAddressFor(t *testing.T) {
	seen := map[string]string{}
	for _, ns := range []string{"vms", "vms-b"} {
		for _, vm := range []string{"cp-0", "cp-1", "md-0-abcde"} {
			for i := range MaxNICs {
				mac := MACAddressFor(ns, vm, i)
				hw, err := net.ParseMAC(mac)
				if err != nil {
					t.Fatalf("%s: %v", mac, err)
				}
				if hw[0]&0x02 == 0 || hw[0]&0x01 != 0 {
					t.Errorf("%s is not a locally administered unicast address", mac)
				}
				if again := MACAddressFor(ns, vm, i); again != mac {
					t.Errorf("MACAddressFor(%s, %s, %d) is %s, then %s", ns, vm, i, mac, again)
				}
				key := ns + "/" + vm + "/" + string(rune('0'+i))
				if other, ok := seen[mac]; ok {
					t.Errorf("%s and %s have one MAC, %s", key, other, mac)
				}
				seen[mac] = key
			}
		}
	}
}

func TestNetworkConfig(t *testing.T) {
	static := NIC{Network: ObjectRef{Namespace: "nets", Name: "vlan40"}, MAC: "02:AA:BB:CC:DD:01", Addressing: &Addressing{
		Addresses:   []netip.Prefix{netip.MustParsePrefix("10.40.0.5/24"), netip.MustParsePrefix("2001:db8::5/64")},
		Gateway4:    netip.MustParseAddr("10.40.0.1"),
		Gateway6:    netip.MustParseAddr("2001:db8::1"),
		Nameservers: []netip.Addr{netip.MustParseAddr("10.40.0.2")},
	}}
	dhcp := NIC{Network: ObjectRef{Namespace: "nets", Name: "storage"}, MAC: "02:aa:bb:cc:dd:02", Addressing: &Addressing{DHCP4: true}}
	for name, tc := range map[string]struct {
		nics []NIC
		want map[string]any // the parsed config; nil: none
		err  string
	}{
		"no addressing: no config": {nics: []NIC{{Network: static.Network}}},
		"static and DHCP, each by its MAC": {nics: []NIC{static, dhcp}, want: map[string]any{
			"version": float64(2),
			"ethernets": map[string]any{
				"eth0": map[string]any{
					"match": map[string]any{"macaddress": "02:aa:bb:cc:dd:01"}, "set-name": "eth0", "dhcp4": false, "dhcp6": false,
					"addresses":   []any{"10.40.0.5/24", "2001:db8::5/64"},
					"routes":      []any{map[string]any{"to": "0.0.0.0/0", "via": "10.40.0.1"}, map[string]any{"to": "::/0", "via": "2001:db8::1"}},
					"nameservers": map[string]any{"addresses": []any{"10.40.0.2"}},
				},
				"eth1": map[string]any{"match": map[string]any{"macaddress": "02:aa:bb:cc:dd:02"}, "set-name": "eth1", "dhcp4": true, "dhcp6": false},
			},
		}},
		"a NIC without addressing keeps its place in the names": {nics: []NIC{{Network: static.Network}, dhcp}, want: map[string]any{
			"version": float64(2),
			"ethernets": map[string]any{
				"eth1": map[string]any{"match": map[string]any{"macaddress": "02:aa:bb:cc:dd:02"}, "set-name": "eth1", "dhcp4": true, "dhcp6": false},
			},
		}},
		"addressing without a MAC": {nics: []NIC{{Network: static.Network, Addressing: &Addressing{DHCP4: true}}}, err: "no MAC address"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := NetworkConfig(tc.nics)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if got != "" {
					t.Fatalf("config %q, want none", got)
				}
				return
			}
			var parsed map[string]any
			if err := yaml.Unmarshal([]byte(got), &parsed); err != nil {
				t.Fatalf("%v:\n%s", err, got)
			}
			if !reflect.DeepEqual(parsed, tc.want) {
				t.Fatalf("config:\n%s\nwant %v", got, tc.want)
			}
		})
	}
}

func TestCheckAddressing(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	for name, tc := range map[string]struct {
		in   Addressing
		want string
	}{
		"static with its gateway":    {Addressing{Addresses: []netip.Prefix{p("10.0.0.5/24")}, Gateway4: a("10.0.0.1")}, ""},
		"DHCP alone":                 {Addressing{DHCP4: true}, ""},
		"gateway outside the prefix": {Addressing{Addresses: []netip.Prefix{p("10.0.0.5/24")}, Gateway4: a("10.0.1.1")}, "in no prefix of the NIC's addresses (10.0.0.0/24)"},
		"gateway without addresses":  {Addressing{DHCP4: true, Gateway4: a("10.0.1.1")}, "in no prefix of the NIC's addresses (none)"},
		"gateway is the address":     {Addressing{Addresses: []netip.Prefix{p("10.0.0.5/24")}, Gateway4: a("10.0.0.5")}, "the NIC's own address"},
		"one address twice":          {Addressing{Addresses: []netip.Prefix{p("10.0.0.5/24"), p("10.0.0.5/16")}}, "given twice"},
		"an IPv6 gateway":            {Addressing{Addresses: []netip.Prefix{p("2001:db8::5/64")}, Gateway6: a("2001:db8::1")}, ""},
	} {
		if got := CheckAddressing(tc.in); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

// Every NIC becomes a bridged virtio interface on its Multus network with its MAC, the first
// named as on every VM before.
func TestVirtualMachineWithSeveralNICs(t *testing.T) {
	s := testSpec()
	s.NICs = []NIC{
		{Network: ObjectRef{Namespace: "nets", Name: "vlan40"}, MAC: MACAddressFor("default", s.Name, 0)},
		{Network: ObjectRef{Namespace: "nets", Name: "storage"}, MAC: MACAddressFor("default", s.Name, 1)},
	}
	vm := BuildVirtualMachine(s)
	ifaces, networks := vm.Spec.Template.Spec.Domain.Devices.Interfaces, vm.Spec.Template.Spec.Networks
	if len(ifaces) != 2 || len(networks) != 2 {
		t.Fatalf("%d interfaces, %d networks", len(ifaces), len(networks))
	}
	for i, want := range []struct{ name, network string }{{NICName, "nets/vlan40"}, {"nic-2", "nets/storage"}} {
		if ifaces[i].Name != want.name || ifaces[i].MacAddress != s.NICs[i].MAC || ifaces[i].Bridge == nil || ifaces[i].Model != "virtio" {
			t.Errorf("interface %d: %+v", i, ifaces[i])
		}
		if networks[i].Name != want.name || networks[i].Multus == nil || networks[i].Multus.NetworkName != want.network {
			t.Errorf("network %d: %+v", i, networks[i])
		}
	}
	if NICOf(vm) != NICName {
		t.Errorf("the primary NIC is %q", NICOf(vm))
	}
}

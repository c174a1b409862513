package harvester

import (
	"slices"
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

func TestSelectAddresses(t *testing.T) {
	type iface = kubevirtv1.VirtualMachineInstanceNetworkInterface
	for name, tc := range map[string]struct {
		in      []iface
		primary string
		all     []string
		mac     string
	}{
		"none reported yet": {nil, "", nil, ""},
		"guest agent noise": {[]iface{
			{Name: "", InterfaceName: "lo", IP: "127.0.0.1", IPs: []string{"127.0.0.1", "::1"}},
			{Name: NICName, InterfaceName: "eth0", MAC: "52:54:00:aa:bb:cc", IP: "fe80::5054:ff:feaa:bbcc",
				IPs: []string{"fe80::5054:ff:feaa:bbcc", "169.254.3.4", "10.40.0.21/24", "2001:db8::21", "10.40.0.21"}},
		}, "10.40.0.21", []string{"10.40.0.21", "fe80::5054:ff:feaa:bbcc", "169.254.3.4", "2001:db8::21"}, "52:54:00:aa:bb:cc"},
		"only IPv6":         {[]iface{{Name: NICName, IP: "2001:db8::5"}}, "", []string{"2001:db8::5"}, ""},
		"other NIC ignored": {[]iface{{Name: "nic-2", IP: "192.168.1.5"}}, "", nil, ""},
		"garbage skipped":   {[]iface{{Name: NICName, IPs: []string{"not-an-ip", "", "0.0.0.0", "10.0.0.9"}}}, "10.0.0.9", []string{"10.0.0.9", "0.0.0.0"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := SelectAddresses(tc.in, NICName)
			if got.Primary != tc.primary || !slices.Equal(got.All, tc.all) || got.MAC != tc.mac {
				t.Fatalf("SelectAddresses = %+v, want primary %q all %v mac %q", got, tc.primary, tc.all, tc.mac)
			}
		})
	}
}

// The published provider named its VMs' interface "default": an adopted VM's address is read
// from that entry, ours from NICName.
func TestNICOf(t *testing.T) {
	published := &kubevirtv1.VirtualMachine{Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}}}
	published.Spec.Template.Spec.Domain.Devices.Interfaces = []kubevirtv1.Interface{{Name: "default"}}
	if got := NICOf(published); got != "default" {
		t.Fatalf("NICOf(published VM) = %q", got)
	}
	if got := NICOf(BuildVirtualMachine(testSpec())); got != NICName {
		t.Fatalf("NICOf(our VM) = %q, want %q", got, NICName)
	}
	ifaces := []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "10.0.0.7"}}
	if a := SelectAddresses(ifaces, NICOf(published)); a.Primary != "10.0.0.7" {
		t.Fatalf("the published VM's address was not read: %+v", a)
	}
	if a := SelectAddresses(ifaces, NICName); a.Primary != "" {
		t.Fatalf("another interface's address was taken for ours: %+v", a)
	}
}

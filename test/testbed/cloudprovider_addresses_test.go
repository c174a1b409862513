package testbed

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// vmiOn is a VMI with one NIC per network, named as the provider names them, reporting ips.
func vmiOn(networks []string, ips ...[]string) *kubevirtv1.VirtualMachineInstance {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	for i, n := range networks {
		name := []string{"nic-1", "nic-2", "nic-3"}[i]
		vmi.Spec.Networks = append(vmi.Spec.Networks, kubevirtv1.Network{Name: name,
			NetworkSource: kubevirtv1.NetworkSource{Multus: &kubevirtv1.MultusNetwork{NetworkName: n}}})
		if i < len(ips) {
			vmi.Status.Interfaces = append(vmi.Status.Interfaces, kubevirtv1.VirtualMachineInstanceNetworkInterface{Name: name, IPs: ips[i]})
		}
	}
	return vmi
}

func addrs(pairs ...string) []corev1.NodeAddress {
	var out []corev1.NodeAddress
	for len(pairs) >= 2 {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(pairs[0]), Address: pairs[1]})
		pairs = pairs[2:]
	}
	return append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n"})
}

// TestNodeAddresses follows cloud-provider-harvester's getNodeAddresses: one NIC's addresses (the
// management network's, else the first), the first of each family InternalIP (inside
// --node-ip-cidr when it is given), the others ExternalIP less --node-exclude-ip-ranges.
func TestNodeAddresses(t *testing.T) {
	twoNICs := vmiOn([]string{"vms/vlan40", "vms/storage"}, []string{"10.40.0.7"}, []string{"10.60.0.5"})
	for _, tc := range []struct {
		name  string
		vmi   *kubevirtv1.VirtualMachineInstance
		flags []string
		want  []corev1.NodeAddress
	}{
		{"the first address InternalIP, the next ExternalIP", vmiOn([]string{"vms/vlan40"}, []string{"10.40.0.7", "10.40.0.250"}), nil,
			addrs("InternalIP", "10.40.0.7", "ExternalIP", "10.40.0.250")},
		{"two NICs, no management network: the first NIC's only", twoNICs, nil, addrs("InternalIP", "10.40.0.7")},
		{"the management network is the second NIC's", twoNICs, []string{"--management-network=vms/storage"}, addrs("InternalIP", "10.60.0.5")},
		{"a management network the VM is not on: the Hostname only", twoNICs, []string{"--management-network=other"}, addrs()},
		{"no addresses reported yet", vmiOn([]string{"vms/vlan40"}), nil, addrs()},
		{"link-local and loopback addresses dropped", vmiOn([]string{"vms/vlan40"}, []string{"fe80::1", "127.0.0.1", "10.40.0.7"}), nil,
			addrs("InternalIP", "10.40.0.7")},
		{"one InternalIP per family", vmiOn([]string{"vms/vlan40"}, []string{"10.40.0.7", "fd00::7", "fd00::8"}), nil,
			addrs("InternalIP", "10.40.0.7", "InternalIP", "fd00::7", "ExternalIP", "fd00::8")},
		{"--node-ip-cidr chooses the InternalIP", vmiOn([]string{"vms/vlan40"}, []string{"10.60.0.5", "10.40.0.7"}), []string{"--node-ip-cidr=10.40.0.0/24"},
			addrs("ExternalIP", "10.60.0.5", "InternalIP", "10.40.0.7")},
		{"--node-exclude-ip-ranges drops ExternalIPs", vmiOn([]string{"vms/vlan40"}, []string{"10.60.0.5", "10.40.0.7", "10.40.0.250"}),
			[]string{"--node-ip-cidr=10.40.0.0/24", "--node-exclude-ip-ranges=10.60.0.0/24,10.40.0.250"}, addrs("InternalIP", "10.40.0.7")},
		{"--node-exclude-ip-ranges without --node-ip-cidr does nothing", vmiOn([]string{"vms/vlan40"}, []string{"10.40.0.7", "10.40.0.250"}),
			[]string{"--node-exclude-ip-ranges=10.40.0.250", "--node-ip-cidr="}, addrs("InternalIP", "10.40.0.7", "ExternalIP", "10.40.0.250")},
	} {
		f, err := ParseCloudProviderFlags(tc.flags)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := NodeAddresses("n", tc.vmi, f); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: addresses %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestParseCloudProviderFlags(t *testing.T) {
	f, err := ParseCloudProviderFlags([]string{"--cloud-config=/etc/kubernetes/cloud-config", "--management-network=vlan40", "--node-ip-cidr=10.40.0.0/24, fd00::/64", "--node-exclude-ip-ranges=10.40.0.9"})
	if err != nil || f.ManagementNetwork != "default/vlan40" || len(f.NodeIPCIDR) != 2 || f.NodeExcludeIPRanges[0] != netip.MustParsePrefix("10.40.0.9/32") {
		t.Errorf("flags %+v, %v", f, err)
	}
	for _, bad := range []string{"--node-ip-cidr=10.40.0.0/24,10.60.0.0/24", "--node-ip-cidr=not-an-ip", "--management-network=a/b/c", "--node-exclude-ip-ranges=x"} {
		if _, err := ParseCloudProviderFlags([]string{bad}); err == nil || !strings.Contains(err.Error(), strings.SplitN(bad[2:], "=", 2)[0]) {
			t.Errorf("%s: error %v, want one naming the flag", bad, err)
		}
	}
}

package harvester

import (
	"net/netip"
	"slices"
	"strings"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// Addresses are what the guest agent reports for the machine's NIC.
type Addresses struct {
	// Primary is the first routable IPv4 address: what the bootstrap pushes configs to.
	Primary string
	// All lists every address reported for the NIC without duplicates: Primary first (callers
	// take element 0 as the node's address), then the others in the order reported.
	All []string
	MAC string
}

// SelectAddresses picks the machine's addresses from a VMI's status.interfaces. Only the entry of
// the VM's NIC counts (nic: see NICOf; KubeVirt names each entry after the VM spec's interface); for Primary, loopback, link-local, unspecified, multicast and IPv6 addresses are
// skipped (guests report all of them, and only IPv4 is routable on Harvester VLANs by default).
func SelectAddresses(ifaces []kubevirtv1.VirtualMachineInstanceNetworkInterface, nic string) Addresses {
	var out Addresses
	for _, iface := range ifaces {
		if iface.Name != nic {
			continue
		}
		out.MAC = iface.MAC
		seen := map[string]bool{}
		for _, raw := range append([]string{iface.IP}, iface.IPs...) {
			addr, ok := parseAddr(raw)
			if !ok || seen[addr.String()] {
				continue
			}
			seen[addr.String()] = true
			out.All = append(out.All, addr.String())
			if out.Primary == "" && isRoutableIPv4(addr) {
				out.Primary = addr.String()
			}
		}
		if i := slices.Index(out.All, out.Primary); i > 0 {
			out.All = slices.Insert(slices.Delete(out.All, i, i+1), 0, out.Primary)
		}
		break
	}
	return out
}

// parseAddr accepts "10.0.0.5", "10.0.0.5/24" and "fe80::1%eth0".
func parseAddr(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Addr{}, false
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone(""), true
}

func isRoutableIPv4(a netip.Addr) bool {
	return a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() &&
		!a.IsMulticast() && a != netip.IPv4Unspecified() && a.As4() != [4]byte{255, 255, 255, 255}
}

// NICOf names the VM's NIC: its first interface, NICName on the VMs this provider creates, and
// "default" on those the published provider created (it adopts them).
func NICOf(vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.Template != nil {
		if ifaces := vm.Spec.Template.Spec.Domain.Devices.Interfaces; len(ifaces) > 0 {
			return ifaces[0].Name
		}
	}
	return NICName
}

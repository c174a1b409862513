package harvester

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// MaxNICs is how many network interfaces a machine may have.
const MaxNICs = 8

// NIC is one network interface of a machine's VM. The first of a machine's is its primary: the
// one whose address is the machine's.
type NIC struct {
	// Network is the NetworkAttachmentDefinition the NIC attaches to.
	Network ObjectRef
	// MAC is the NIC's MAC address as the VM is created with it (MACAddressFor), so that the
	// guest's network configuration, which names NICs by MAC, reaches each the right one whatever
	// order the guest finds them in. Empty: KubeVirt, or Harvester's mutator, picks one, and the
	// guest is given no network configuration for the NIC.
	MAC string
	// Addressing is what the guest is told to configure on the NIC; nil: nothing (the image's own
	// default, DHCP on Harvester's images).
	Addressing *Addressing
}

// Addressing is how the guest configures a NIC: DHCP, static addresses, or both (an IPv4 address
// from a pool and IPv6 by DHCP, say).
type Addressing struct {
	DHCP4, DHCP6 bool
	// Addresses are static addresses, each with its prefix length.
	Addresses []netip.Prefix
	// Gateway4 and Gateway6 are the default routes' next hops (zero: none).
	Gateway4, Gateway6 netip.Addr
	// Nameservers are the DNS servers.
	Nameservers []netip.Addr
}

// nicName is the name of the VM's i-th interface, and of the network it attaches: NICName for the
// first, as on every VM this provider made before machines had several.
func nicName(i int) string {
	if i == 0 {
		return NICName
	}
	return fmt.Sprintf("nic-%d", i+1)
}

// MACAddressFor is the MAC address of a machine's i-th NIC: locally administered and unicast, and
// derived from where the VM lives (its Harvester namespace and name) and the NIC's index, so that
// every reconcile, and a management cluster that took the machine over, computes the same one for
// the same machine. The provider chooses it rather than reading Harvester's back: Harvester's own
// assignment (its VM mutator) exists only from v1.7, and without one KubeVirt gives the NIC a new
// random MAC at every start, which network configuration matched by MAC cannot follow.
func MACAddressFor(namespace, vm string, i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%d", namespace, vm, i)))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&0xfc | 0x02 // locally administered, unicast
	return mac.String()
}

// NetworkConfig is the cloud-init network configuration (NoCloud's network-config, version 2)
// that gives each NIC with Addressing its configuration, matched by its MAC address. It is empty
// when no NIC has any.
func NetworkConfig(nics []NIC) (string, error) {
	type nameservers struct {
		Addresses []string `json:"addresses"`
	}
	type route struct {
		To  string `json:"to"`
		Via string `json:"via"`
	}
	type ethernet struct {
		Match       map[string]string `json:"match"`
		SetName     string            `json:"set-name"`
		DHCP4       bool              `json:"dhcp4"`
		DHCP6       bool              `json:"dhcp6"`
		Addresses   []string          `json:"addresses,omitempty"`
		Routes      []route           `json:"routes,omitempty"`
		Nameservers *nameservers      `json:"nameservers,omitempty"`
	}
	ethernets := map[string]ethernet{}
	for i, nic := range nics {
		a := nic.Addressing
		if a == nil {
			continue
		}
		if nic.MAC == "" {
			return "", fmt.Errorf("NIC %d (network %s) has addressing but no MAC address to match it by", i+1, nic.Network)
		}
		e := ethernet{Match: map[string]string{"macaddress": strings.ToLower(nic.MAC)}, SetName: guestInterfaceName(i), DHCP4: a.DHCP4, DHCP6: a.DHCP6}
		for _, p := range a.Addresses {
			e.Addresses = append(e.Addresses, p.String())
		}
		for _, r := range []struct {
			via netip.Addr
			to  string
		}{{a.Gateway4, "0.0.0.0/0"}, {a.Gateway6, "::/0"}} {
			if r.via.IsValid() {
				e.Routes = append(e.Routes, route{To: r.to, Via: r.via.String()})
			}
		}
		if len(a.Nameservers) > 0 {
			e.Nameservers = &nameservers{}
			for _, ns := range a.Nameservers {
				e.Nameservers.Addresses = append(e.Nameservers.Addresses, ns.String())
			}
		}
		ethernets[guestInterfaceName(i)] = e
	}
	if len(ethernets) == 0 {
		return "", nil
	}
	out, err := yaml.Marshal(map[string]any{"version": 2, "ethernets": ethernets})
	return string(out), err
}

// guestInterfaceName is what the guest names the i-th NIC (network config's set-name): the same on
// every image, so that the i-th NIC is found by one name in the guest whatever its driver calls it.
func guestInterfaceName(i int) string { return fmt.Sprintf("eth%d", i) }

// CheckAddressing says what is wrong with a NIC's static addressing, "" if nothing is: an address
// given twice, or a gateway that is the NIC's own address or in no prefix of its addresses (the
// guest could not reach it).
func CheckAddressing(a Addressing) string {
	seen := map[netip.Addr]bool{}
	for _, p := range a.Addresses {
		if !p.IsValid() {
			return fmt.Sprintf("address %s is not an address with a prefix length", p)
		}
		if seen[p.Addr()] {
			return fmt.Sprintf("address %s is given twice", p.Addr())
		}
		seen[p.Addr()] = true
	}
	for _, gw := range []netip.Addr{a.Gateway4, a.Gateway6} {
		if !gw.IsValid() {
			continue
		}
		if seen[gw] {
			return fmt.Sprintf("gateway %s is the NIC's own address", gw)
		}
		inPrefix := slices.ContainsFunc(a.Addresses, func(p netip.Prefix) bool { return p.Contains(gw) })
		if !inPrefix {
			return fmt.Sprintf("gateway %s is in no prefix of the NIC's addresses (%s): it could not be reached", gw, prefixesOf(a.Addresses))
		}
	}
	return ""
}

func prefixesOf(ps []netip.Prefix) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Masked().String())
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

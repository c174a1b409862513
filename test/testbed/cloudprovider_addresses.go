package testbed

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// CloudProviderFlags are the flags of Harvester's cloud provider that choose a Node's addresses
// (harvester/cloud-provider-harvester main.go, registerHarvesterFlags, from v0.2.6), as its
// Deployment in the tenant cluster passes them.
type CloudProviderFlags struct {
	// ManagementNetwork (--management-network) is the network, "namespace/name", whose NIC the
	// addresses are read from; empty: the VM's first.
	ManagementNetwork string
	// NodeIPCIDR (--node-ip-cidr): a Node's InternalIP is its first address of each family in
	// these prefixes; none: its first address of each family.
	NodeIPCIDR []netip.Prefix
	// NodeExcludeIPRanges (--node-exclude-ip-ranges), with NodeIPCIDR only: ExternalIPs in these
	// prefixes are left off the Node.
	NodeExcludeIPRanges []netip.Prefix
}

// ParseCloudProviderFlags reads the address flags of a cloud provider's args (others are
// ignored), validated as pkg/utils/config.go's SyncAndValidateHarvesterConfig does: a bare network
// name is in namespace default; at most one IPv4 and one IPv6 entry in --node-ip-cidr; an entry
// is a prefix or an address.
func ParseCloudProviderFlags(args []string) (CloudProviderFlags, error) {
	var f CloudProviderFlags
	for _, arg := range args {
		name, value, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		var err error
		switch name {
		case "management-network":
			f.ManagementNetwork, err = normalizeNetworkName(value)
		case "node-ip-cidr":
			if f.NodeIPCIDR, err = parsePrefixes(value); err == nil {
				err = oneOfEachFamily(f.NodeIPCIDR)
			}
		case "node-exclude-ip-ranges":
			f.NodeExcludeIPRanges, err = parsePrefixes(value)
		}
		if err != nil {
			return f, fmt.Errorf("invalid configuration for --%s: %w", name, err)
		}
	}
	return f, nil
}

func normalizeNetworkName(name string) (string, error) {
	switch parts := strings.Split(name, "/"); {
	case name == "":
		return "", nil
	case len(parts) == 1:
		return "default/" + name, nil
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return name, nil
	default:
		return "", fmt.Errorf("network name %q, expected 'namespace/name'", name)
	}
}

func parsePrefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for entry := range strings.SplitSeq(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		if p, err := netip.ParsePrefix(entry); err == nil {
			out = append(out, p)
		} else if a, err := netip.ParseAddr(entry); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		} else {
			return nil, fmt.Errorf("invalid CIDR or IP format %q", entry)
		}
	}
	return out, nil
}

func oneOfEachFamily(prefixes []netip.Prefix) error {
	var v4, v6 int
	for _, p := range prefixes {
		if p.Addr().Is4() {
			v4++
		} else {
			v6++
		}
	}
	if v4 > 1 || v6 > 1 {
		return fmt.Errorf("more than one entry of a family in %v", prefixes)
	}
	return nil
}

// NodeAddresses are the addresses Harvester's cloud provider gives a Node from its VM's VMI
// (pkg/cloud-controller-manager/instance.go getNodeAddresses and instance_ip.go): the addresses of
// one NIC, the one on the management network or else the VMI's first; of those, the first of
// each family (with NodeIPCIDR, the first inside it) is InternalIP and the rest ExternalIP, less
// those NodeExcludeIPRanges names; then the Node's name as Hostname. A NIC without addresses yet
// gives the Hostname only. The legacy modes two Node annotations choose
// (alpha.kubernetes.io/provided-node-ip, set by a kubelet with --node-ip, and
// cloudprovider.harvesterhci.io/additional-internal-ips) are not played: nothing in the cluster
// templates sets them.
func NodeAddresses(node string, vmi *kubevirtv1.VirtualMachineInstance, f CloudProviderFlags) []corev1.NodeAddress {
	hostname := corev1.NodeAddress{Type: corev1.NodeHostName, Address: node}
	target := ""
	for _, n := range vmi.Spec.Networks {
		if n.Multus == nil {
			continue // only Multus networks are read on a guest cluster
		}
		if f.ManagementNetwork == "" || n.Multus.NetworkName == f.ManagementNetwork {
			target = n.Name
			break
		}
	}
	var raw []string
	for _, iface := range vmi.Status.Interfaces {
		if iface.Name == target {
			raw = iface.IPs
			if len(raw) == 0 && iface.IP != "" {
				raw = []string{iface.IP}
			}
		}
	}
	var addrs []netip.Addr
	for _, s := range raw {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return []corev1.NodeAddress{hostname} // malformed: the Hostname only
		}
		if a.IsValid() && !a.IsLoopback() && !a.IsMulticast() && !a.IsUnspecified() && !a.IsLinkLocalUnicast() &&
			!a.IsLinkLocalMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			addrs = append(addrs, a)
		}
	}
	var out []corev1.NodeAddress
	internal := map[bool]bool{} // by family (IPv4 or not): an InternalIP given
	for _, a := range addrs {
		typ := corev1.NodeExternalIP
		if !internal[a.Is4()] && (len(f.NodeIPCIDR) == 0 || inAny(f.NodeIPCIDR, a)) {
			typ, internal[a.Is4()] = corev1.NodeInternalIP, true
		}
		if typ == corev1.NodeExternalIP && len(f.NodeIPCIDR) > 0 && inAny(f.NodeExcludeIPRanges, a) {
			continue
		}
		out = append(out, corev1.NodeAddress{Type: typ, Address: a.String()})
	}
	return append(out, hostname)
}

// inAny reports whether a is in one of prefixes.
func inAny(prefixes []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
}

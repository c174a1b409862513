package sim

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// guestNetwork is how the guest configures its NICs: what cloud-init (or Talos's nocloud
// platform) makes of the network configuration the VM was given on its NoCloud disk
// (network-config, version 1 or 2). Without one, cloud-init's fallback brings up the first NIC
// with DHCP and leaves the others down.
type guestNetwork struct {
	// given says a configuration was given.
	given bool
	// byMAC and byName are what it says of each NIC it names, by MAC address (lower case) and by
	// the name the guest gives the NIC (eth0, eth1, ...).
	byMAC, byName map[string]nicConfig
}

// nicConfig is what the guest does with one NIC.
type nicConfig struct {
	dhcp4     bool
	addresses []netip.Prefix
}

// forNIC is how the guest configures its i-th NIC, and whether it brings it up at all.
func (g guestNetwork) forNIC(i int, mac, guestName string) (nicConfig, bool) {
	if !g.given {
		return nicConfig{dhcp4: i == 0}, i == 0
	}
	if c, ok := g.byMAC[strings.ToLower(mac)]; ok {
		return c, true
	}
	c, ok := g.byName[guestName]
	return c, ok
}

// guestNetworkConfig reads the network configuration of the VM's NoCloud disk: KubeVirt's
// cloudInitNoCloud volume, inline (networkData, networkDataBase64) or from its Secret (key
// networkdata, else networkData, as virt-launcher reads it).
func (r *vmReconciler) guestNetworkConfig(ctx context.Context, vm *kubevirtv1.VirtualMachine) (guestNetwork, error) {
	if vm.Spec.Template == nil {
		return guestNetwork{}, nil
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		ci := v.CloudInitNoCloud
		if ci == nil {
			continue
		}
		raw := ci.NetworkData
		switch {
		case ci.NetworkDataBase64 != "":
			data, err := base64.StdEncoding.DecodeString(ci.NetworkDataBase64)
			if err != nil {
				return guestNetwork{}, fmt.Errorf("networkDataBase64 of volume %s: %w", v.Name, err)
			}
			raw = string(data)
		case ci.NetworkDataSecretRef != nil:
			secret := &corev1.Secret{}
			if err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: ci.NetworkDataSecretRef.Name}, secret); err != nil {
				return guestNetwork{}, err
			}
			data, ok := secret.Data["networkdata"]
			if !ok {
				data = secret.Data["networkData"]
			}
			raw = string(data)
		}
		if strings.TrimSpace(raw) == "" {
			return guestNetwork{}, nil
		}
		return parseNetworkConfig(raw)
	}
	return guestNetwork{}, nil
}

// parseNetworkConfig reads a cloud-init network configuration of version 1 or 2 (its keys under
// a top-level "network" or not, as cloud-init accepts both).
func parseNetworkConfig(raw string) (guestNetwork, error) {
	var doc struct {
		Network *networkConfig `json:"network"`
		networkConfig
	}
	if err := yaml.Unmarshal([]byte(raw), &doc); err != nil {
		return guestNetwork{}, fmt.Errorf("network-config is not YAML: %w", err)
	}
	cfg := doc.networkConfig
	if doc.Network != nil {
		cfg = *doc.Network
	}
	g := guestNetwork{given: true, byMAC: map[string]nicConfig{}, byName: map[string]nicConfig{}}
	switch cfg.Version {
	case 2:
		for name, e := range cfg.Ethernets {
			c := nicConfig{dhcp4: bool(e.DHCP4)}
			for _, a := range e.Addresses {
				p, err := netip.ParsePrefix(a)
				if err != nil {
					return g, fmt.Errorf("network-config: ethernets.%s.addresses: %w", name, err)
				}
				c.addresses = append(c.addresses, p)
			}
			if e.Match.MACAddress != "" {
				g.byMAC[strings.ToLower(e.Match.MACAddress)] = c
			} else {
				g.byName[cmp.Or(e.Match.Name, name)] = c
			}
		}
	case 1:
		for _, entry := range cfg.Config {
			if entry.Type != "physical" {
				continue
			}
			var c nicConfig
			for _, sn := range entry.Subnets {
				switch sn.Type {
				case "dhcp", "dhcp4":
					c.dhcp4 = true
				case "static", "static6":
					p, err := v1Address(sn.Address, sn.Netmask)
					if err != nil {
						return g, fmt.Errorf("network-config: %s: %w", entry.Name, err)
					}
					c.addresses = append(c.addresses, p)
				}
			}
			if entry.MACAddress != "" {
				g.byMAC[strings.ToLower(entry.MACAddress)] = c
			} else {
				g.byName[entry.Name] = c
			}
		}
	default:
		return g, fmt.Errorf("network-config version %d: cloud-init reads versions 1 and 2", cfg.Version)
	}
	return g, nil
}

// networkConfig is what the simulated guest reads of cloud-init's network configuration.
type networkConfig struct {
	Version   int `json:"version"`
	Ethernets map[string]struct {
		Match struct {
			MACAddress string `json:"macaddress"`
			Name       string `json:"name"`
		} `json:"match"`
		DHCP4     yamlBool `json:"dhcp4"`
		Addresses []string `json:"addresses"`
	} `json:"ethernets"`
	Config []struct {
		Type       string `json:"type"`
		Name       string `json:"name"`
		MACAddress string `json:"mac_address"`
		Subnets    []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
			Netmask string `json:"netmask"`
		} `json:"subnets"`
	} `json:"config"`
}

// yamlBool is a YAML boolean as netplan writes them: true/false, or yes/no and on/off as strings.
type yamlBool bool

func (b *yamlBool) UnmarshalJSON(data []byte) error {
	switch strings.Trim(strings.ToLower(string(data)), `"`) {
	case "true", "yes", "on":
		*b = true
	case "false", "no", "off", "null":
		*b = false
	default:
		return fmt.Errorf("%s is no boolean", data)
	}
	return nil
}

// v1Address is a version 1 subnet's address, given as "10.0.0.5/24" or with a netmask.
func v1Address(address, netmask string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(address); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(address)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("address %q: %w", address, err)
	}
	if netmask == "" {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	m, err := netip.ParseAddr(netmask)
	if err != nil || !m.Is4() {
		return netip.Prefix{}, fmt.Errorf("netmask %q is no IPv4 netmask", netmask)
	}
	bits := 0
	for _, b := range m.As4() {
		for ; b&0x80 != 0; b <<= 1 {
			bits++
		}
	}
	return netip.PrefixFrom(a, bits), nil
}

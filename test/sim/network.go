package sim

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// errNetworkNotFound means the VM's NetworkAttachmentDefinition does not exist.
type errNetworkNotFound struct{ network string }

func (e errNetworkNotFound) Error() string {
	return fmt.Sprintf("network-attachment-definitions.k8s.cni.cncf.io %q not found", e.network)
}

// networkCIDR reads a network's address range as Harvester records it.
func (s *Simulator) networkCIDR(ctx context.Context, namespace, name string) (netip.Prefix, error) {
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(NetworkAttachmentDefinitionGVK)
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, nad); err != nil {
		if apierrors.IsNotFound(err) {
			return netip.Prefix{}, errNetworkNotFound{namespace + "/" + name}
		}
		return netip.Prefix{}, err
	}
	var route struct {
		CIDR string `json:"cidr"`
	}
	if raw := nad.GetAnnotations()[AnnotationRoute]; raw != "" && json.Unmarshal([]byte(raw), &route) == nil {
		if p, err := netip.ParsePrefix(route.CIDR); err == nil {
			return p.Masked(), nil
		}
	}
	var cni struct {
		IPAM struct {
			Subnet string `json:"subnet"`
		} `json:"ipam"`
	}
	if raw, _, _ := unstructured.NestedString(nad.Object, "spec", "config"); raw != "" && json.Unmarshal([]byte(raw), &cni) == nil {
		if p, err := netip.ParsePrefix(cni.IPAM.Subnet); err == nil {
			return p.Masked(), nil
		}
	}
	return netip.MustParsePrefix(s.cfg.DefaultCIDR).Masked(), nil
}

// pools hands out one address per VM per network, the way a DHCP server with leases keyed by MAC
// would: a VM that restarts gets its address back.
type pools struct {
	mu      sync.Mutex
	byNet   map[string]*pool
	byOwner map[types.UID]map[string]netip.Addr
}

type pool struct {
	prefix netip.Prefix
	next   netip.Addr
	used   map[netip.Addr]bool
}

func newPools() *pools {
	return &pools{byNet: map[string]*pool{}, byOwner: map[types.UID]map[string]netip.Addr{}}
}

// allocate returns owner's address on network, leasing a new one if it has none.
func (p *pools) allocate(network string, prefix netip.Prefix, owner types.UID) (netip.Addr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.byOwner[owner][network]; ok {
		return a, nil
	}
	pl := p.byNet[network]
	if pl == nil || pl.prefix != prefix {
		pl = &pool{prefix: prefix, next: firstLease(prefix), used: map[netip.Addr]bool{}}
		p.byNet[network] = pl
	}
	inRange := func(a netip.Addr) bool {
		return prefix.Contains(a) && !isBroadcast(prefix, a) && a.Compare(firstLease(prefix)) >= 0
	}
	if !inRange(pl.next) {
		pl.next = firstLease(prefix)
	}
	for a := pl.next; ; {
		if !pl.used[a] {
			pl.used[a] = true
			pl.next = a.Next()
			if p.byOwner[owner] == nil {
				p.byOwner[owner] = map[string]netip.Addr{}
			}
			p.byOwner[owner][network] = a
			return a, nil
		}
		if a = a.Next(); !inRange(a) {
			a = firstLease(prefix)
		}
		if a == pl.next {
			return netip.Addr{}, fmt.Errorf("no free address left in %s", prefix)
		}
	}
}

// release returns all of owner's leases.
func (p *pools) release(owner types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for network, a := range p.byOwner[owner] {
		if pl := p.byNet[network]; pl != nil {
			delete(pl.used, a)
		}
	}
	delete(p.byOwner, owner)
}

// firstLease skips the network address and, on networks large enough, the first ten addresses
// (gateway and infrastructure), as DHCP ranges usually do.
func firstLease(prefix netip.Prefix) netip.Addr {
	a := prefix.Addr().Next()
	skip := 1
	if prefix.Bits() <= 28 {
		skip = 9
	}
	for range skip {
		a = a.Next()
	}
	return a
}

func isBroadcast(prefix netip.Prefix, a netip.Addr) bool {
	return !prefix.Contains(a.Next())
}

// macFor derives a stable MAC address in KubeVirt's 52:54:00 range from the VM's UID.
func macFor(uid types.UID) string {
	h := sha256.Sum256([]byte(uid))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", h[0], h[1], h[2])
}

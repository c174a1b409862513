package testbed

import (
	"net/netip"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The played pool hands out what the in-cluster provider's would: its addresses, ranges and CIDRs
// in order, never the gateway, an excluded address, or the prefix's network and broadcast
// addresses (unless allocateReservedIPAddresses).
func TestInClusterIPPoolAddresses(t *testing.T) {
	a := netip.MustParseAddr
	for name, tc := range map[string]struct {
		spec map[string]any
		want []string
	}{
		"a range without its gateway": {map[string]any{"addresses": []any{"10.0.0.1-10.0.0.4"}, "prefix": int64(24), "gateway": "10.0.0.1"},
			[]string{"10.0.0.2", "10.0.0.3", "10.0.0.4"}},
		"a CIDR without network and broadcast": {map[string]any{"addresses": []any{"10.0.0.0/30"}, "prefix": int64(30)},
			[]string{"10.0.0.1", "10.0.0.2"}},
		"a CIDR with them": {map[string]any{"addresses": []any{"10.0.0.0/30"}, "prefix": int64(30), "allocateReservedIPAddresses": true},
			[]string{"10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3"}},
		"single addresses, one excluded": {map[string]any{"addresses": []any{"10.0.0.7", "10.0.0.9", "10.0.0.8"}, "prefix": int64(24), "excludedAddresses": []any{"10.0.0.9"}},
			[]string{"10.0.0.7", "10.0.0.8"}},
		"IPv6": {map[string]any{"addresses": []any{"2001:db8::10-2001:db8::11"}, "prefix": int64(64)},
			[]string{"2001:db8::10", "2001:db8::11"}},
	} {
		pool := &unstructured.Unstructured{Object: map[string]any{"spec": tc.spec}}
		spec, err := poolSpecOf(pool)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		for _, addr := range spec.addresses() {
			got = append(got, addr.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
		if free, ok := spec.firstFree(map[netip.Addr]bool{a(tc.want[0]): true}); len(tc.want) > 1 && (!ok || free.String() != tc.want[1]) {
			t.Errorf("%s: first free with the first in use: %s %v, want %s", name, free, ok, tc.want[1])
		}
	}
	if got := lastOf(netip.MustParsePrefix("10.1.2.0/23")); got.String() != "10.1.3.255" {
		t.Errorf("last of 10.1.2.0/23 is %s", got)
	}
}

package harvester

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// The seed corpus of each fuzz target runs in `make test`; `go test -fuzz=FuzzX ./internal/harvester`
// explores further.

func FuzzLabelSafe(f *testing.F) {
	for _, s := range []string{"cp-0", strings.Repeat("a", 100), "a.b-c", strings.Repeat("x.", 40) + "y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if len(validation.IsDNS1123Subdomain(name)) > 0 {
			return // MachineRequest names are DNS subdomains
		}
		got := labelSafe(name)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Fatalf("labelSafe(%q) = %q: %v", name, got, errs)
		}
		if got != labelSafe(name) {
			t.Fatal("not deterministic")
		}
	})
}

func FuzzSelectAddresses(f *testing.F) {
	f.Add("10.40.0.5", "fe80::1", "127.0.0.1")
	f.Add("10.40.0.5/24", "2001:db8::1", "garbage")
	f.Add("", "169.254.1.1", "0.0.0.0")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		got := SelectAddresses([]kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: NICName, IP: a, IPs: []string{b, c, a}}}, NICName)
		seen := map[string]bool{}
		for _, x := range got.All {
			if seen[x] {
				t.Fatalf("duplicate %s in %v", x, got.All)
			}
			seen[x] = true
		}
		if got.Primary == "" {
			return
		}
		if got.All[0] != got.Primary {
			t.Fatalf("ipAddresses[0] is %s, not the primary address %s", got.All[0], got.Primary)
		}
		ip, err := netip.ParseAddr(got.Primary)
		if err != nil || !isRoutableIPv4(ip) || !seen[got.Primary] {
			t.Fatalf("primary %q from %q %q %q", got.Primary, a, b, c)
		}
	})
}

func FuzzParseObjectRef(f *testing.F) {
	for _, s := range []string{"default/talos", "talos", "a/b/c", "/x", "x/", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseObjectRef(s, "ns")
		if err != nil {
			return
		}
		if ref.Namespace == "" || ref.Name == "" || strings.Contains(ref.Name, "/") || strings.Contains(ref.Namespace, "/") {
			t.Fatalf("ParseObjectRef(%q) = %+v", s, ref)
		}
		if strings.Contains(s, "/") && ref.String() != s {
			t.Fatalf("round trip %q -> %q", s, ref.String())
		}
	})
}

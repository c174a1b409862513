package harvester

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// The seed corpus of each fuzz target runs in `make test`; `go test -fuzz=FuzzX ./internal/harvester`
// explores further.

func FuzzRESTConfigFromKubeconfig(f *testing.F) {
	f.Add(kubeconfig(tokenUser), "", false)
	f.Add(kubeconfig("    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n"), "", false)
	f.Add(kubeconfig("    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"), "", false)
	f.Add(kubeconfig(tokenUser), "https://evil.example:6443", false)
	f.Add(kubeconfigWith("https://harvester.example", "", tokenUser), "https://evil.example", true)
	f.Add(kubeconfigWith("https://harvester.example", "    insecure-skip-tls-verify: true\n", tokenUser), "https://harvester.example:1", true)
	f.Add(kubeconfigWith("http://harvester.example", "    proxy-url: http://p\n", tokenUser), "", false)
	f.Add([]byte("token: "+secretToken+"\n\t{{{"), "", false)
	f.Add([]byte{}, "", false)
	f.Fuzz(func(t *testing.T, data []byte, endpoint string, allowInsecure bool) {
		cfg, err := RESTConfigFromKubeconfig(data, KubeconfigOptions{Endpoint: endpoint, AllowInsecure: allowInsecure})
		if err != nil {
			if strings.Contains(err.Error(), secretToken) {
				t.Fatalf("error echoes the token: %v", err)
			}
			return
		}
		if cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.BearerTokenFile != "" ||
			cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "" {
			t.Fatalf("accepted a kubeconfig that is not self-contained: %+v", cfg)
		}
		target, err := url.Parse(cfg.Host)
		if err != nil {
			t.Fatalf("accepted a server that is not a URL: %v", err)
		}
		if !allowInsecure && (cfg.Insecure || cfg.Proxy != nil || target.Scheme != "https") {
			t.Fatalf("accepted an insecure kubeconfig without the opt-in: %+v", cfg)
		}
		if endpoint == "" || (len(cfg.CAData) > 0 && !cfg.Insecure && target.Scheme == "https") {
			return
		}
		// Without a verified pinned CA, the endpoint may only move to another port or path.
		raw, _ := clientcmd.Load(data)
		server, _ := url.Parse(raw.Clusters[raw.Contexts[raw.CurrentContext].Cluster].Server)
		if !sameHost(target.Hostname(), server.Hostname()) {
			t.Fatalf("endpoint %q took the credentials from %q to %q", endpoint, server.Host, target.Host)
		}
	})
}

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
		got := SelectAddresses([]kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: NICName, IP: a, IPs: []string{b, c, a}}})
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

package clustercache

import (
	"net/url"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// The seed corpus runs in `make test`; `go test -fuzz=FuzzRESTConfigFromKubeconfig
// ./internal/clustercache` explores further.

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

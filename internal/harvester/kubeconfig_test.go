package harvester

import (
	"strings"
	"testing"
)

const secretToken = "s3cr3t-t0ken-value"

func kubeconfig(user string) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: h
  cluster:
    server: https://harvester.example:6443
    certificate-authority-data: ZmFrZQ==
contexts:
- name: h
  context: {cluster: h, user: u}
current-context: h
users:
- name: u
  user:
` + user)
}

func TestRESTConfigFromKubeconfig(t *testing.T) {
	for name, tc := range map[string]struct {
		user    string
		wantErr string
	}{
		"token":         {"    token: " + secretToken + "\n", ""},
		"exec plugin":   {"    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n", "exec plugin"},
		"auth provider": {"    auth-provider:\n      name: oidc\n", "auth provider"},
		"token file":    {"    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n", "refers to files"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := RESTConfigFromKubeconfig(kubeconfig(tc.user), "")
			if tc.wantErr == "" {
				if err != nil || cfg.Host != "https://harvester.example:6443" || cfg.BearerToken != secretToken {
					t.Fatalf("got %v, %v", cfg, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
	t.Run("garbage never echoed", func(t *testing.T) {
		_, err := RESTConfigFromKubeconfig([]byte("token: "+secretToken+"\n\t{{{"), "")
		if err == nil || strings.Contains(err.Error(), secretToken) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("endpoint override", func(t *testing.T) {
		cfg, err := RESTConfigFromKubeconfig(kubeconfig("    token: x\n"), "https://10.0.0.1:6443")
		if err != nil || cfg.Host != "https://10.0.0.1:6443" {
			t.Fatalf("got %v, %v", cfg, err)
		}
	})
}

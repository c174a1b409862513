package testbed

import (
	"strings"
	"testing"
)

// joinCloudConfig is a worker's bootstrap data in the shape of the kubeadm bootstrap provider's
// cloud-config (bootstrap/kubeadm/pkg/cloudinit/node.go): the JoinConfiguration as a YAML document
// after "---".
const joinCloudConfig = `## template: jinja
#cloud-config

write_files:
-   path: /etc/extra
    content: "x"
-   path: /run/kubeadm/kubeadm-join-config.yaml
    owner: root:root
    permissions: '0640'
    content: |
      ---
      apiVersion: kubeadm.k8s.io/v1beta4
      discovery:
        bootstrapToken:
          apiServerEndpoint: 10.40.0.250:6443
          caCertHashes:
          - sha256:0123
          token: abcdef.0123456789abcdef
      kind: JoinConfiguration
runcmd:
  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete
`

func TestParseKubeadmJoin(t *testing.T) {
	join, err := ParseKubeadmJoin([]byte(joinCloudConfig))
	if err != nil {
		t.Fatal(err)
	}
	if join.APIServerEndpoint != "10.40.0.250:6443" || join.Token != "abcdef.0123456789abcdef" || len(join.CACertHashes) != 1 || join.CACertHashes[0] != "sha256:0123" {
		t.Errorf("ParseKubeadmJoin = %+v", join)
	}
	for name, data := range map[string]string{
		"no join file":     "#cloud-config\nwrite_files:\n- path: /etc/extra\n  content: x\n",
		"not a join":       strings.Replace(joinCloudConfig, "kind: JoinConfiguration", "kind: InitConfiguration", 1),
		"not a cloud-conf": "write_files: [",
	} {
		if _, err := ParseKubeadmJoin([]byte(data)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestCAHash checks kubeadm's CA pin: "sha256:" and the hex SHA-256 of the CA's public key, one
// per CA.
func TestCAHash(t *testing.T) {
	ca, err := newCA("a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := newCA("b")
	if err != nil {
		t.Fatal(err)
	}
	got, err := caHash(ca.certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, "sha256:") || len(got) != len("sha256:")+64 {
		t.Errorf("caHash = %q, want sha256: and 64 hex digits", got)
	}
	if again, _ := caHash(ca.certPEM); again != got {
		t.Errorf("caHash is not stable: %s, %s", got, again)
	}
	if theirs, _ := caHash(other.certPEM); theirs == got {
		t.Error("two CAs of different keys pin alike")
	}
	if _, err := caHash([]byte("no pem")); err == nil {
		t.Error("caHash of no PEM: no error")
	}
}

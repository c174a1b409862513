package clusterapi

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// The delivered Secret follows the fixed contract the cluster templates' ClusterResourceSets are
// written against.
func TestBuildGuestCloudConfigSecret(t *testing.T) {
	hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "infra-1", UID: "hc-uid"}}
	kubeconfig := []byte("apiVersion: v1\nkind: Config\n")
	s, err := buildGuestCloudConfigSecret(hc, "tenant", harvester.GuestCredentials{Kubeconfig: kubeconfig, Token: []byte("tok"), TokenSecret: "sa-token2", Source: "src", Endpoint: "https://10.0.0.9:6443#ab"}, "vms", "sa-token,2026-11-29T00:10:00Z")
	if err != nil {
		t.Fatal(err)
	}
	for name, check := range map[string]func() bool{
		"named after the Cluster, in the HarvesterCluster's namespace": func() bool {
			return s.Namespace == "tenants" && s.Name == "tenant-harvester-cloud-config"
		},
		"of the ClusterResourceSet type": func() bool { return s.Type == "addons.cluster.x-k8s.io/resource-set" },
		"labelled with the Cluster's name": func() bool {
			return len(s.Labels) == 1 && s.Labels["cluster.x-k8s.io/cluster-name"] == "tenant"
		},
		"controlled by the HarvesterCluster": func() bool {
			c := metav1.GetControllerOf(s)
			return c != nil && c.Kind == "HarvesterCluster" && c.Name == "infra-1" && c.UID == "hc-uid" && c.APIVersion == infrav1.GroupVersion.String()
		},
		"one key": func() bool { return len(s.Data) == 1 && s.Data["cloud-config.yaml"] != nil },
		"records its source, namespace, endpoint, token Secret and the token retiring": func() bool {
			return s.Annotations[annotationGuestSource] == "src" && s.Annotations[annotationGuestNamespace] == "vms" &&
				s.Annotations[annotationGuestEndpoint] == "https://10.0.0.9:6443#ab" && s.Annotations[annotationGuestTokenSecret] == "sa-token2" &&
				s.Annotations[annotationGuestRetiring] == "sa-token,2026-11-29T00:10:00Z"
		},
		"reads back": func() bool { return string(deliveredKubeconfig(s)) == string(kubeconfig) },
	} {
		if !check() {
			t.Errorf("%s: %+v", name, s)
		}
	}
	embedded := &corev1.Secret{}
	if err := yaml.UnmarshalStrict(s.Data["cloud-config.yaml"], embedded); err != nil {
		t.Fatal(err)
	}
	if embedded.APIVersion != "v1" || embedded.Kind != "Secret" || embedded.Namespace != "kube-system" || embedded.Name != "cloud-config" ||
		embedded.Type != corev1.SecretTypeOpaque || len(embedded.Data) != 2 || string(embedded.Data["cloud-config"]) != string(kubeconfig) ||
		string(embedded.Data["token"]) != "tok" {
		t.Fatalf("embedded manifest %+v", embedded)
	}
}

func TestDeliveredToken(t *testing.T) {
	for name, tc := range map[string]struct {
		kubeconfig, want string
	}{
		"token": {"apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: h, user: u}\nusers:\n- name: u\n  user: {token: abc}\n", "abc"},
		"none":  {"apiVersion: v1\nkind: Config\n", ""},
		"junk":  {"{", ""},
	} {
		t.Run(name, func(t *testing.T) {
			if got := string(deliveredToken([]byte(tc.kubeconfig))); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Only the HarvesterCluster's own delivered Secret is rewritten or deleted: one controlled by
// another object of the name (another provider's HarvesterCluster kind included) is not.
func TestDeliveredBy(t *testing.T) {
	hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "infra-1", UID: "hc-uid"}}
	ours, err := buildGuestCloudConfigSecret(hc, "tenant", harvester.GuestCredentials{}, "vms", "")
	if err != nil {
		t.Fatal(err)
	}
	moved := ours.DeepCopy()
	moved.OwnerReferences[0].UID = "other-uid" // as clusterctl move rebuilds it
	caphv := ours.DeepCopy()
	caphv.OwnerReferences[0].APIVersion = "infrastructure.cluster.x-k8s.io/v1beta1"
	notController := ours.DeepCopy()
	notController.OwnerReferences[0].Controller = nil
	for name, tc := range map[string]struct {
		s    *corev1.Secret
		want bool
	}{
		"ours":                     {ours, true},
		"ours, moved":              {moved, true},
		"CAPHV's HarvesterCluster": {caphv, false},
		"owned but not controlled": {notController, false},
		"nobody's":                 {&corev1.Secret{}, false},
	} {
		if got := deliveredBy(tc.s, hc); got != tc.want {
			t.Errorf("%s: deliveredBy = %v, want %v", name, got, tc.want)
		}
	}
}

func TestTenantServerProblem(t *testing.T) {
	for server, problem := range map[string]string{
		"https://harvester.example.com":      "",
		"https://10.0.0.9:6443":              "",
		"https://[fd00::9]:6443/":            "",
		"http://10.0.0.9:6443":               "is not https (tenants never talk to Harvester unencrypted)",
		"https://":                           "names no host",
		"https://u:p@harvester.example.com":  "has more than a scheme, host and port",
		"https://harvester.example.com/k8s":  "has more than a scheme, host and port",
		"https://harvester.example.com/?a=b": "has more than a scheme, host and port",
		"://":                                "is not a URL",
	} {
		if got := tenantServerProblem(server); got != problem {
			t.Errorf("%q: %q, want %q", server, got, problem)
		}
	}
}

func TestRetiringRecord(t *testing.T) {
	at := time.Date(2026, 11, 29, 0, 10, 0, 0, time.UTC)
	if name, got := parseRetiring(formatRetiring("sa-token", at)); name != "sa-token" || !got.Equal(at) {
		t.Fatalf("round trip: %q %v", name, got)
	}
	if name, got := parseRetiring("sa-token,yesterday"); name != "sa-token" || !got.IsZero() {
		t.Fatalf("unreadable time: %q %v, want the name and a time already past", name, got)
	}
	if name, _ := parseRetiring(""); name != "" {
		t.Fatalf("nothing retiring: %q", name)
	}
	if note := retiringNote(formatRetiring("sa-token", at)); !strings.Contains(note, "Secret sa-token") || !strings.Contains(note, "2026-11-29T00:10:00Z") {
		t.Fatalf("event note %q", note)
	}
}

package main

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestCapiTable(t *testing.T) {
	got := capiTable([]machineRow{
		{Machine: "demo-md-0-a", Phase: "Running", Infra: "Provisioned", VM: "Running", IP: "10.40.0.10", Node: "demo-md-0-a", ProviderID: "harvester://uid-a"},
		{Machine: "demo-md-0-b", Phase: "Running", Infra: "Provisioned", VM: "Running", IP: "10.40.0.11", Node: "demo-md-0-b", ProviderID: "harvester://uid-b", Deleting: true},
		{Machine: "demo-md-0-c", Infra: "WaitingForBootstrapData"},
	})
	want := `  MACHINE       PHASE                HARVESTERMACHINE          VM        IP           NODE          PROVIDERID
  demo-md-0-a   Running              Provisioned               Running   10.40.0.10   demo-md-0-a   harvester://uid-a
  demo-md-0-b   Running (deleting)   Provisioned               Running   10.40.0.11   demo-md-0-b   harvester://uid-b
  demo-md-0-c   -                    WaitingForBootstrapData   -         -            -             -
`
	if got != want {
		t.Errorf("capiTable:\n%s\nwant:\n%s", got, want)
	}
	if got := capiTable(nil); !strings.HasSuffix(got, "  (no Machines)\n") {
		t.Errorf("capiTable(nil) = %q, want the header and (no Machines)", got)
	}
}

func TestAllRunning(t *testing.T) {
	running := machineRow{Machine: "a", Phase: "Running", Node: "a", ProviderID: "harvester://u", VM: "Running"}
	for _, tc := range []struct {
		name string
		rows []machineRow
		want int
		ok   bool
	}{
		{"all running", []machineRow{running, running}, 2, true},
		{"one too many", []machineRow{running, running}, 1, false},
		{"no node yet", []machineRow{running, {Machine: "b", Phase: "Running", ProviderID: "harvester://v", VM: "Running"}}, 2, false},
		{"being deleted", []machineRow{running, func() machineRow { r := running; r.Deleting = true; return r }()}, 2, false},
		{"VM not running", []machineRow{func() machineRow { r := running; r.VM = "Starting"; return r }()}, 1, false},
	} {
		if got := allRunning(tc.rows, tc.want); got != tc.ok {
			t.Errorf("%s: allRunning = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// TestBootstrapData checks the played kubeadm bootstrap data: a cloud-config (kubeadm's jinja
// header first) that writes the KubeadmConfig's JoinConfiguration, discovering the cluster's
// endpoint, and runs kubeadm join with it; no bootstrap token.
func TestBootstrapData(t *testing.T) {
	kc := &unstructured.Unstructured{Object: map[string]any{}}
	kc.SetNamespace("butler-system")
	kc.SetName("demo-md-0-abc")
	_ = unstructured.SetNestedSlice(kc.Object, []any{map[string]any{"name": "cloud-provider", "value": "external"}},
		"spec", "joinConfiguration", "nodeRegistration", "kubeletExtraArgs")
	data, err := bootstrapData(kc, "127.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if !strings.HasPrefix(text, "## template: jinja\n#cloud-config\n") {
		t.Fatalf("bootstrap data starts %q, want kubeadm's jinja header and #cloud-config", strings.SplitN(text, "\n", 3)[:2])
	}
	var cloudConfig struct {
		WriteFiles []struct{ Path, Owner, Permissions, Content string } `json:"write_files"`
		RunCmd     []string                                             `json:"runcmd"`
	}
	if err := yaml.UnmarshalStrict(data, &cloudConfig); err != nil {
		t.Fatalf("not a cloud-config: %v\n%s", err, text)
	}
	if len(cloudConfig.WriteFiles) != 1 || cloudConfig.WriteFiles[0].Path != "/run/kubeadm/kubeadm-join-config.yaml" ||
		!reflect.DeepEqual(cloudConfig.RunCmd, []string{"kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"}) {
		t.Fatalf("cloud-config writes %+v and runs %v", cloudConfig.WriteFiles, cloudConfig.RunCmd)
	}
	var join map[string]any
	if err := yaml.Unmarshal([]byte(cloudConfig.WriteFiles[0].Content), &join); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
		"discovery": map[string]any{"bootstrapToken": map[string]any{"apiServerEndpoint": "127.0.0.1:6443"}},
		"nodeRegistration": map[string]any{"name": "{{ ds.meta_data.local_hostname }}",
			"kubeletExtraArgs": []any{map[string]any{"name": "cloud-provider", "value": "external"}}},
	}
	if !reflect.DeepEqual(join, want) {
		t.Errorf("JoinConfiguration %v, want %v", join, want)
	}
	if strings.Contains(text, "token:") || strings.Contains(text, "caCertHashes") {
		t.Errorf("the played bootstrap data carries a token or CA hash:\n%s", text)
	}
}

func TestStewardStatus(t *testing.T) {
	scp := &unstructured.Unstructured{Object: map[string]any{}}
	_ = unstructured.SetNestedField(scp.Object, int64(2), "spec", "replicas")
	_ = unstructured.SetNestedField(scp.Object, "v1.33.1", "spec", "version")
	got := stewardStatus(scp, "demo")
	want := map[string]any{
		"initialized": true, "ready": true, "externalManagedControlPlane": true, "version": "v1.33.1",
		"replicas": int64(2), "readyReplicas": int64(2), "updatedReplicas": int64(2), "unavailableReplicas": int64(0),
		"selector": "cluster.x-k8s.io/cluster-name=demo",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stewardStatus = %v, want %v", got, want)
	}
}

func TestHostPort(t *testing.T) {
	host, port, err := hostPort("https://127.0.0.1:40013")
	if err != nil || host != "127.0.0.1" || port != 40013 {
		t.Errorf("hostPort = %s, %d, %v", host, port, err)
	}
	if _, _, err := hostPort("https://127.0.0.1"); err == nil {
		t.Error("hostPort without a port: no error")
	}
}

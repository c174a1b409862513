package main

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

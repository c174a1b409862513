package main

import (
	"strings"
	"testing"
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

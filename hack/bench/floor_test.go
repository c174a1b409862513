package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestFloorRatiosAddTheManagementSideToTheDirectRunsCPU(t *testing.T) {
	d := directResult{cpu: [2]float64{200, 100}}
	f := floorResult{serverCPU: [2]float64{16, 20}, clientCPU: [2]float64{4, 5}}
	if got, want := f.ratios(d), "create 1.10x, delete 1.25x"; got != want {
		t.Errorf("ratios = %q, want %q", got, want)
	}
	line := f.describe(d, 1000)
	for _, want := range []string{"16.0 s creating + 20.0 s deleting", "9.0 ms per machine (4.0 + 5.0)", "can beat create 1.10x, delete 1.25x"} {
		if !strings.Contains(line, want) {
			t.Errorf("describe = %q, want it to contain %q", line, want)
		}
	}
	f.clientCPUErr = errors.New("cpu profiling already in use")
	if line := f.describe(d, 1000); !strings.Contains(line, "not measured: cpu profiling already in use") {
		t.Errorf("describe without the client's CPU = %q, want it to say why", line)
	}
}

func TestReconcileCountSumsTheControllersResults(t *testing.T) {
	metrics := "# TYPE controller_runtime_reconcile_total counter\n" +
		"controller_runtime_reconcile_total{controller=\"machinerequest\",result=\"success\"} 7\n" +
		"controller_runtime_reconcile_total{controller=\"machinerequest\",result=\"requeue_after\"} 5\n" +
		"controller_runtime_reconcile_total{controller=\"imagesync\",result=\"success\"} 100\n"
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(metrics))
	if err != nil {
		t.Fatal(err)
	}
	if got := reconcileCount(fams, "machinerequest"); got != 12 {
		t.Errorf("reconcileCount = %v, want 12 (7 + 5, the other controller's left out)", got)
	}
}

package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

func TestVsFloorMeasuresTheMarginOverBothFloors(t *testing.T) {
	d := directResult{
		toRunning: 40 * time.Second, toDeleted: 20 * time.Second,
		cpu:           [2]float64{80, 40},
		providerCPU:   [2]float64{1.5, 0.5},
		floor:         floorResult{serverCPU: [2]float64{8, 3.5}, clientCPU: [2]float64{0.5, 0.5}},
		contractFloor: floorResult{contract: true, serverCPU: [2]float64{15, 7}, clientCPU: [2]float64{1, 1}},
	}
	ours := result{toRunning: 60 * time.Second, toDeleted: 30 * time.Second, cpuSeconds: 12}
	got, err := vsFloor(ours, d)
	if err != nil {
		t.Fatal(err)
	}
	// Least times: 40 s by (80 + 8.5) / 80 = 44.25 s, 20 s by (40 + 4) / 40 = 22 s; a perfect
	// provider's CPU 2 + 1 = 3 s. Over the contract's floor: 40 s by 96 / 80 = 48 s, 20 s by
	// 48 / 40 = 24 s, 2 + 2 = 4 s.
	want := "vs floor: create 1.36x, delete 1.36x; manager CPU 4.0x a perfect provider's; " +
		"vs the contract's floor: create 1.25x, delete 1.25x; manager CPU 3.0x a perfect provider's"
	if got != want {
		t.Errorf("vsFloor =\n%s\nwant\n%s", got, want)
	}
	if line := d.floorLine(1000); !strings.Contains(line, "no MachineRequest provider can beat create 1.11x, delete 1.10x") ||
		!strings.Contains(line, "7 writes per machine") || !strings.Contains(line, "no provider that keeps the contract can beat create 1.20x, delete 1.20x") {
		t.Errorf("floorLine = %q, want both floors and their least ratios", line)
	}

	d.contractFloor = floorResult{}
	if got, _ := vsFloor(ours, d); strings.Contains(got, "contract") {
		t.Errorf("vsFloor without a contract's floor = %q, want the management floor alone", got)
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

func TestStandingCPUIsPerSecondOfItsWindow(t *testing.T) {
	if got, want := (standingCPU{window: standingWindow, seconds: 0.25}).perSecond(), 1000*0.25/standingWindow.Seconds(); got != want || got <= 0 {
		t.Errorf("perSecond = %v, want %v ms per second", got, want)
	}
}

func TestSpreadCreatesEvenlyFromTheFirst(t *testing.T) {
	for _, tc := range []struct {
		i    int
		want time.Duration
	}{{0, 0}, {50, 10 * time.Second}, {99, 19800 * time.Millisecond}} {
		if got := spreadAt(tc.i, 100, 20*time.Second); got != tc.want {
			t.Errorf("spreadAt(%d, 100, 20s) = %s, want %s", tc.i, got, tc.want)
		}
	}
}

func TestVsFloorOfClusterAPISaysWhereTheRunsCPUWent(t *testing.T) {
	d := directResult{capiFloor: clusterAPIFloor{
		toRunning: 20 * time.Second, toDeleted: 10 * time.Second, providerCPU: [2]float64{0.8, 0.2},
		createCPU: map[string]float64{"bench and simulator": 5, "management kube-apiserver": 14, "capi-manager": 3.02},
	}}
	ours := result{scenario: scenario{clusterAPI: true}, toRunning: 22 * time.Second, toDeleted: 10500 * time.Millisecond, cpuSeconds: 2.5,
		obs: observation{cpu: map[string]float64{"bench and simulator": 4.8, "management kube-apiserver": 15.8, "capi-manager": 3.04, "manager": 2}}}
	got, err := vsFloor(ours, d)
	if err != nil {
		t.Fatal(err)
	}
	// 25.64 s over 22.02 s; the capi-manager's 0.02 s is left out, the bench's -0.2 s is not.
	want := "vs floor: create 1.10x, delete 1.05x; manager CPU 2.5x a perfect provider's; CPU until all Running 1.16x the floor's run's " +
		"(+3.6 s: manager +2.0, management kube-apiserver +1.8, bench and simulator -0.2)"
	if got != want {
		t.Errorf("vsFloor =\n%s\nwant\n%s", got, want)
	}
	d.capiFloor.createCPU = nil
	if got, _ := vsFloor(ours, d); strings.Contains(got, "CPU until all Running") {
		t.Errorf("vsFloor without the floor's CPU = %q, want no ratio of CPU", got)
	}
}

func TestRepeatedMarginsSummaryIsTheMedianOfEachRatio(t *testing.T) {
	r := repeatedMargins{name: "Cluster API MachineDeployment", margins: []floorMargin{
		{create: 1.20, del: 0.95, cpu: 2.5}, {create: 1.01, del: 1.30, cpu: 3.0}, {create: 1.05, del: 1.00, cpu: 2.0},
	}}
	want := "- Cluster API MachineDeployment, vs floor over 3 runs, median: create 1.05x (1.20, 1.01, 1.05), " +
		"delete 1.00x (0.95, 1.30, 1.00); manager CPU 2.5x a perfect provider's (2.50, 3.00, 2.00)"
	if got := r.summary(); got != want {
		t.Errorf("summary =\n%s\nwant\n%s", got, want)
	}
	r.margins[0].runCPU, r.margins[1].runCPU = 1.20, 1.02
	if got := r.summary(); strings.Contains(got, "CPU until all Running") {
		t.Errorf("summary with a run's CPU not measured = %s, want no median of it", got)
	}
	r.margins[2].runCPU = 1.10
	if got, want := r.summary(), "; CPU until all Running 1.10x the floor's run's (1.20, 1.02, 1.10)"; !strings.HasSuffix(got, want) {
		t.Errorf("summary = %s, want it to end with %s", got, want)
	}
	// An even count: the mean of the middle two.
	r.margins = append(r.margins, floorMargin{create: 1.11, del: 1.10, cpu: 4.0})
	if got := r.summary(); !strings.Contains(got, "median: create 1.08x") || !strings.Contains(got, "delete 1.05x") || !strings.Contains(got, "CPU 2.8x") {
		t.Errorf("summary of four runs = %s, want create 1.08x, delete 1.05x, CPU 2.8x (the middle two's means)", got)
	}
}

// A cluster's share of the machines fits the VM network with room to spare; a /20 at least.
func TestNetworkFor(t *testing.T) {
	for _, tc := range []struct {
		n, k int
		want string
	}{
		{100, 1, "10.40.0.0/20"}, {5000, 5, "10.40.0.0/20"}, {5000, 1, "10.40.0.0/19"}, {20000, 2, "10.40.0.0/18"},
	} {
		if got := networkFor(tc.n, tc.k); got != tc.want {
			t.Errorf("networkFor(%d, %d) = %s, want %s", tc.n, tc.k, got, tc.want)
		}
	}
}

// The bench's manager takes the Go memory limit a Deployment of the chart gives it: 90% of the
// chart's memory limit.
func TestChartMemoryLimit(t *testing.T) {
	got, err := chartMemoryLimit(filepath.Join("..", ".."))
	if err != nil || got != "GOMEMLIMIT=241591910" {
		t.Fatalf("chartMemoryLimit = %q, %v; want GOMEMLIMIT=241591910 (90%% of the chart's 256Mi)", got, err)
	}
}

package main

import "testing"

// Cluster API core's work is per machine, between two snapshots: reconciles and failures by
// controller (those under 0.05 per machine left out), the mean wait of what was queued in between,
// and its requests by API server.
func TestDescribeCoreWork(t *testing.T) {
	start := coreWork{
		reconciles: map[string]float64{"machine": 100, "machineset": 10, "cluster": 5},
		errors:     map[string]float64{"machine": 10},
		queueWait:  map[string]float64{"machine": 20, "machineset": 1},
		queued:     map[string]float64{"machine": 100, "machineset": 10},
		requests:   map[string]float64{"management": 1000, "tenant's": 10},
		writes:     map[string]float64{"management": 900, "tenant's": 0},
	}
	end := coreWork{
		reconciles: map[string]float64{"machine": 3100, "machineset": 60, "cluster": 8},
		errors:     map[string]float64{"machine": 110},
		queueWait:  map[string]float64{"machine": 320, "machineset": 1},
		queued:     map[string]float64{"machine": 3100, "machineset": 60},
		requests:   map[string]float64{"management": 3000, "tenant's": 110},
		writes:     map[string]float64{"management": 2800, "tenant's": 100},
	}
	want := "machine 30.0 (1.0 errors, mean wait in its queue 100 ms), machineset 0.5 (0.0 errors, mean wait in its queue 0 ms), " +
		"requests to the management API server 20.0 (19.0 writes), requests to the tenant's API server 1.0 (1.0 writes)"
	if got := describeCoreWork(start, end, 100); got != want {
		t.Fatalf("describeCoreWork =\n%s\nwant\n%s", got, want)
	}
	if got := describeCoreWork(end, end, 100); got != "none, requests to the management API server 0.0 (0.0 writes), requests to the tenant's API server 0.0 (0.0 writes)" {
		t.Fatalf("nothing done: %s", got)
	}
}

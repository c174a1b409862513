package main

import (
	"context"
	"crypto/sha256"
	"sync"
	"testing"
)

// The direct provider's CPU is what its labelled goroutines, and those they start, used: work
// done beside them without the label does not count.
func TestLabelledCPUCountsOnlyTheDirectProvidersWork(t *testing.T) {
	// A fixed amount of work, about 0.35 s of CPU here: the profiler samples CPU time at 100 Hz,
	// so however loaded the machine, it is some 35 samples.
	work := func() {
		sum := sha256.Sum256(nil)
		for range 4_000_000 {
			sum = sha256.Sum256(sum[:])
		}
	}
	measure := func(labelled bool) float64 {
		t.Helper()
		profile := startLabelledCPU()
		var wg sync.WaitGroup
		if labelled {
			asDirectProvider(context.Background(), func(context.Context) {
				wg.Go(work) // started under the label: inherits it
			})
		} else {
			wg.Go(work)
		}
		wg.Wait()
		seconds, err := profile.stop()
		if err != nil {
			t.Fatal(err)
		}
		return seconds
	}
	if s := measure(false); s != 0 {
		t.Errorf("work without the label counted as the direct provider's: %.2f s", s)
	}
	if s := measure(true); s == 0 {
		t.Error("the direct provider's work (a goroutine started under its label) counted for nothing")
	}
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime/pprof"
	"slices"

	"github.com/google/pprof/profile"
	"k8s.io/client-go/rest"
)

// The direct twin runs in the bench's process, beside the simulated Harvester, so the process's
// CPU says nothing of its own. Its work (its creates, its watch of VMIs, its deletion) runs under
// a profiler label instead, which every goroutine it starts inherits, and a CPU profile of the
// process taken meanwhile tells its share: what a perfect provider's Harvester side costs, the
// floor under the manager's CPU per machine.
const (
	labelKey            = "bench"
	directProviderLabel = "direct provider"
)

// asDirectProvider runs f with ctx and its goroutines labelled as the direct provider's.
func asDirectProvider(ctx context.Context, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(labelKey, directProviderLabel), f)
}

// ownConnection is cfg with a transport of its own. client-go shares one transport, and so one
// HTTP/2 connection, among the clients of equal configs, and the goroutine that reads that
// connection (TLS and framing for every answer) belongs to whoever dialled first: the simulator.
// A dialer of its own (client-go never shares a transport with one) gives the direct provider a
// connection whose reading goroutine it starts, and so its label.
func ownConnection(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Dial = (&net.Dialer{}).DialContext
	return c
}

// labelledCPU profiles this process's CPU from start to stop and says how much of it the
// goroutines labelled as the direct provider used.
type labelledCPU struct {
	buf bytes.Buffer
	err error
}

// startLabelledCPU starts the profile. Only one CPU profile of a process runs at a time: if
// another one does (the bench's -profile-dir), stop reports that instead of a figure.
func startLabelledCPU() *labelledCPU {
	l := &labelledCPU{}
	l.err = pprof.StartCPUProfile(&l.buf)
	return l
}

// stop ends the profile and returns the CPU seconds of the samples labelled as the direct provider's.
func (l *labelledCPU) stop() (float64, error) {
	if l.err != nil {
		return 0, l.err
	}
	pprof.StopCPUProfile()
	p, err := profile.Parse(&l.buf)
	if err != nil {
		return 0, err
	}
	return labelledSeconds(p, labelKey, directProviderLabel)
}

// labelledSeconds sums the CPU time of p's samples that carry label key=value.
func labelledSeconds(p *profile.Profile, key, value string) (float64, error) {
	cpu := slices.IndexFunc(p.SampleType, func(t *profile.ValueType) bool { return t.Type == "cpu" && t.Unit == "nanoseconds" })
	if cpu < 0 {
		return 0, fmt.Errorf("the CPU profile has no cpu/nanoseconds samples")
	}
	var ns int64
	for _, s := range p.Sample {
		if slices.Contains(s.Label[key], value) {
			ns += s.Value[cpu]
		}
	}
	return float64(ns) / 1e9, nil
}

package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// statusWrites counts the writes that changed a MachineRequest's status, as a watch on the
// management API server sees them: what a healthy boot costs the API server in status updates.
type statusWrites struct {
	mu         sync.Mutex
	total      int
	perMachine map[string]int
	stop       func()
	done       chan struct{}
}

// countStatusWrites watches the demo's MachineRequests from now until stop is called.
func (d *demo) countStatusWrites(ctx context.Context) (*statusWrites, error) {
	c, err := client.NewWithWatch(d.tb.MgmtConfig, client.Options{Scheme: d.tb.Mgmt.Scheme()})
	if err != nil {
		return nil, err
	}
	w, err := c.Watch(ctx, &v1alpha1.MachineRequestList{}, client.InNamespace(testbed.Namespace))
	if err != nil {
		return nil, err
	}
	s := &statusWrites{perMachine: map[string]int{}, stop: w.Stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		last := map[string]v1alpha1.MachineRequestStatus{}
		for ev := range w.ResultChan() {
			mr, ok := ev.Object.(*v1alpha1.MachineRequest)
			if !ok {
				continue
			}
			switch ev.Type {
			case watch.Added:
				last[mr.Name] = mr.Status
			case watch.Modified:
				if !equality.Semantic.DeepEqual(last[mr.Name], mr.Status) {
					s.mu.Lock()
					s.total++
					s.perMachine[mr.Name]++
					s.mu.Unlock()
				}
				last[mr.Name] = mr.Status
			case watch.Deleted:
				delete(last, mr.Name)
			}
		}
	}()
	return s, nil
}

// sofar says how many writes there were until now.
func (s *statusWrites) sofar() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// result stops the count and says how many writes there were, in all and per machine.
func (s *statusWrites) result() (int, map[string]int) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, maps.Clone(s.perMachine)
}

// warningEvents counts the Warning events recorded on the management cluster in the demo's
// namespace (those the provider records on MachineRequests, ProviderConfigs and ImageSyncs), by
// reason.
func (d *demo) warningEvents(ctx context.Context) (int, map[string]int, error) {
	list := &corev1.EventList{}
	if err := d.tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
		return 0, nil, err
	}
	n, byReason := 0, map[string]int{}
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning {
			count := max(int(e.Count), 1) // the events.k8s.io API leaves count 0 and counts in series
			if e.Series != nil {
				count = max(count, int(e.Series.Count))
			}
			n += count
			byReason[e.Reason] += count
		}
	}
	return n, byReason, nil
}

// reportCounts prints the figures of the run: Warning events and status writes.
func (d *demo) reportCounts(ctx context.Context, writes *statusWrites, untilRunning int) error {
	total, perMachine := writes.result()
	warnings, byReason, err := d.warningEvents(ctx)
	if err != nil {
		return err
	}
	reasons := make([]string, 0, len(byReason))
	for _, r := range slices.Sorted(maps.Keys(byReason)) {
		reasons = append(reasons, fmt.Sprintf("%s=%d", r, byReason[r]))
	}
	per := make([]string, 0, len(perMachine))
	for _, m := range slices.Sorted(maps.Keys(perMachine)) {
		per = append(per, fmt.Sprintf("%s=%d", m, perMachine[m]))
	}
	d.say("Warning events: %d%s, status writes: %d (%d until all were Running; per machine %s)",
		warnings, parenthesised(reasons), total, untilRunning, strings.Join(per, " "))
	return nil
}

func parenthesised(items []string) string {
	if len(items) == 0 {
		return ""
	}
	return " (" + strings.Join(items, " ") + ")"
}

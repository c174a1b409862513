package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// What Cluster API core itself did for a MachineDeployment's machines, from its own metrics
// (controller-runtime's, by controller): the same MachineDeployment costs Cluster API core more or
// less work depending on how the infrastructure provider answers it (each write to a
// HarvesterMachine wakes its Machine's reconcile), and a reconcile that fails on a conflict waits
// out a back-off before the next. Set side by side for the provider's run and the floor's, it
// says whether Cluster API core's steps take longer because it did more, failed more, or waited
// longer in its queues.

// coreWork is a snapshot of Cluster API core's counters, by controller.
type coreWork struct {
	// reconciles and errors count reconciles that ended, and those that ended in an error.
	reconciles, errors map[string]float64
	// queueWait and queued are the seconds items waited in each controller's work queue, and how
	// many items waited.
	queueWait, queued map[string]float64
	// requests and writes count its client's requests by the API server's name (hosts): the
	// management cluster's is limited to 100 per second (--kube-api-qps), each tenant's to 20
	// (--clustercache-client-qps).
	requests, writes map[string]float64
}

// scrapeCoreWork reads Cluster API core's counters now; hosts names the API servers whose
// requests it counts, by host (several hosts may share a name).
func scrapeCoreWork(ctx context.Context, metricsURL string, hosts map[string]string) (coreWork, error) {
	fams, err := scrape(ctx, http.DefaultClient, metricsURL)
	if err != nil {
		return coreWork{}, fmt.Errorf("reading the metrics of Cluster API core: %w", err)
	}
	w := coreWork{reconciles: map[string]float64{}, errors: map[string]float64{}, queueWait: map[string]float64{}, queued: map[string]float64{},
		requests: map[string]float64{}, writes: map[string]float64{}}
	for _, m := range fams["controller_runtime_reconcile_total"].GetMetric() {
		controller, result := labelValue(m, "controller"), labelValue(m, "result")
		w.reconciles[controller] += m.GetCounter().GetValue()
		if result == "error" {
			w.errors[controller] += m.GetCounter().GetValue()
		}
	}
	for _, m := range fams["rest_client_requests_total"].GetMetric() {
		if name, ok := hosts[labelValue(m, "host")]; ok {
			w.requests[name] += m.GetCounter().GetValue()
			if labelValue(m, "method") != "GET" {
				w.writes[name] += m.GetCounter().GetValue()
			}
		}
	}
	for _, m := range fams["workqueue_queue_duration_seconds"].GetMetric() {
		name := labelValue(m, "name")
		w.queueWait[name] += m.GetHistogram().GetSampleSum()
		w.queued[name] += float64(m.GetHistogram().GetSampleCount())
	}
	return w, nil
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// describeCoreWork renders what Cluster API core did between two snapshots, per machine, by
// controller (those with at least 0.05 reconciles per machine), most reconciles first.
func describeCoreWork(start, end coreWork, n int) string {
	type row struct {
		controller               string
		reconciles, errors, wait float64
	}
	var rows []row
	for c, total := range end.reconciles {
		reconciles := total - start.reconciles[c]
		if reconciles < 0.05*float64(n) {
			continue
		}
		r := row{controller: c, reconciles: reconciles / float64(n), errors: (end.errors[c] - start.errors[c]) / float64(n)}
		if queued := end.queued[c] - start.queued[c]; queued > 0 {
			r.wait = (end.queueWait[c] - start.queueWait[c]) / queued
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].reconciles != rows[j].reconciles {
			return rows[i].reconciles > rows[j].reconciles
		}
		return rows[i].controller < rows[j].controller
	})
	parts := make([]string, 0, len(rows))
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %.1f (%.1f errors, mean wait in its queue %.0f ms)", r.controller, r.reconciles, r.errors, 1000*r.wait))
	}
	if len(parts) == 0 {
		parts = append(parts, "none")
	}
	names := make([]string, 0, len(end.requests))
	for name := range end.requests {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		parts = append(parts, fmt.Sprintf("requests to the %s API server %.1f (%.1f writes)", name,
			(end.requests[name]-start.requests[name])/float64(n), (end.writes[name]-start.writes[name])/float64(n)))
	}
	return strings.Join(parts, ", ")
}

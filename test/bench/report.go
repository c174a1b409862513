package main

import (
	"bufio"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// requestCounts are client-go requests by cluster, split into reads and writes.
type requestCounts struct {
	mgmtReads, mgmtWrites, hvReads, hvWrites float64
}

// scrapeRequests sums rest_client_requests_total from the manager's metrics by host and method.
// GET (including lists and watches) is a read; POST, PUT, PATCH and DELETE are writes.
func scrapeRequests(metricsURL string, tb *testbed.Testbed) (requestCounts, error) {
	var rc requestCounts
	resp, err := http.Get(metricsURL) //nolint:gosec // G107: the URL is the metrics endpoint of the manager this tool started itself
	if err != nil {
		return rc, err
	}
	defer resp.Body.Close()
	mgmtHost := hostOf(tb.MgmtConfig.Host)
	onHarvester := func(labels string) bool {
		for _, hv := range tb.Harvesters {
			if strings.Contains(labels, `host="`+hostOf(hv.Config.Host)+`"`) {
				return true
			}
		}
		return false
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		found = true
		labels, value, _ := strings.Cut(line[len("rest_client_requests_total{"):], "} ")
		var v float64
		_, _ = fmt.Sscanf(value, "%g", &v) // a malformed sample counts as 0
		write := !strings.Contains(labels, `method="GET"`)
		switch {
		case strings.Contains(labels, `host="`+mgmtHost+`"`) && write:
			rc.mgmtWrites += v
		case strings.Contains(labels, `host="`+mgmtHost+`"`):
			rc.mgmtReads += v
		case onHarvester(labels) && write:
			rc.hvWrites += v
		case onHarvester(labels):
			rc.hvReads += v
		}
	}
	if !found {
		return rc, fmt.Errorf("no rest_client_requests_total in %s", metricsURL)
	}
	return rc, sc.Err()
}

func hostOf(h string) string {
	if u, err := url.Parse(h); err == nil && u.Host != "" {
		return u.Host
	}
	return h
}

func (r result) summary() string {
	n := float64(r.n)
	out := fmt.Sprintf("   all Running in %s; IP->Running p50 %s p99 %s; deleted in %s, %s objects left; per machine: management %.1f reads %.1f writes, Harvester %.1f reads %.1f writes (all clients' writes: management %.1f, Harvester %.1f); manager peak RSS %.0f MB, CPU %s\n   until all Running: %s",
		r.toRunning.Round(10*time.Millisecond), percentile(r.ipDelays, 0.5).Round(time.Millisecond), percentile(r.ipDelays, 0.99).Round(time.Millisecond),
		r.deletedIn(), r.leftIn(), r.requests.mgmtReads/n, r.requests.mgmtWrites/n, r.requests.hvReads/n, r.requests.hvWrites/n,
		r.mgmtWritesAll, r.hvWritesAll, r.peakRSSMB, r.cpu(),
		r.obs.describe()) + "\n   management API server writes per machine: " + r.mgmtWrites +
		"\n   the manager's Harvester requests per machine: " + r.hvRequests +
		"\n   Harvester API server writes per machine (manager and simulator): " + r.hvWrites +
		"\n   manager RSS (MB) every 5 s from the first create, | at all Running: " + r.rss +
		fmt.Sprintf("\n   reconciles per machine: %.1f until all Running, %.1f deleting", r.obs.reconciles/n, r.deletionReconciles/n) +
		fmt.Sprintf("\n   manager CPU while all run and nothing is asked of it: %.1f ms per second (over %s, left out of its CPU above); management API server writes per second meanwhile: %s", r.standing.perSecond(), r.standing.window, r.standing.writes()) +
		"\n   deletion: " + r.deletion
	if r.notes != "" {
		out += "\n   " + r.notes
	}
	return out
}

// cpu is the manager's CPU time, in all and per machine.
func (r result) cpu() string {
	return fmt.Sprintf("%.1f s (%.1f ms per machine)", r.cpuSeconds, 1000*r.cpuSeconds/float64(r.n))
}

func renderTable(o options, results []result) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "### N=%d on %s (%s, %d CPUs, %s), %s\n\n", o.n, host, cpuModel(), runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 MST"))
	b.WriteString(o.world())
	fmt.Fprintln(&b, "| run | all Running | IP to Running p50 / p99 | delete all | left on Harvester | mgmt reads / writes per machine | Harvester reads / writes per machine | writes per machine | all clients' writes per machine, mgmt / Harvester | manager peak RSS | manager CPU |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		n := float64(r.n)
		fmt.Fprintf(&b, "| %s | %s | %s / %s | %s | %s | %.1f / %.1f | %.1f / %.1f | %.1f | %.1f / %.1f | %.0f MB | %s |\n",
			r.runName(), r.toRunning.Round(10*time.Millisecond),
			percentile(r.ipDelays, 0.5).Round(time.Millisecond), percentile(r.ipDelays, 0.99).Round(time.Millisecond),
			r.deletedIn(), r.leftIn(),
			r.requests.mgmtReads/n, r.requests.mgmtWrites/n, r.requests.hvReads/n, r.requests.hvWrites/n,
			(r.requests.mgmtWrites+r.requests.hvWrites)/n, r.mgmtWritesAll, r.hvWritesAll, r.peakRSSMB, r.cpu())
	}
	fmt.Fprintln(&b, "\nWhere the time went, from the first create to all Running:")
	for _, r := range results {
		fmt.Fprintf(&b, "\n- %s: %s Management API server writes per machine over the lifecycle: %s. The manager's Harvester requests per machine: %s. Harvester API server writes per machine, the manager's and the simulated Harvester's: %s. The manager's RSS in MB every 5 s from the first create over the whole run (| where all are Running): %s.",
			r.runName(), r.obs.describe(), r.mgmtWrites, r.hvRequests, r.hvWrites, r.rss)
		if r.notes != "" {
			fmt.Fprintf(&b, " %s", r.notes)
		}
		fmt.Fprintln(&b)
	}
	return b.String()
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "model name") {
			if _, v, ok := strings.Cut(line, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown CPU"
}

// appendReport adds the table to the report file, creating it with an introduction if needed.
func appendReport(path, table string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if _, err := os.Stat(path); os.IsNotExist(err) {
		intro := "# Benchmarks\n\n`make bench` (N=100) or `make bench N=1000` adds a table here per run: N MachineRequests\n" +
			"created at once on the testbed (management API server, simulated Harvester, manager process), first with zero\n" +
			"boot delay, then with a realistic one, then without userData; then a Cluster API MachineDeployment of N through\n" +
			"the real Cluster API core manager. Columns: wall time from the first create to all Running; delay from the\n" +
			"simulated VMI reporting its IP to the machine showing Running; wall time to delete all; objects left in the\n" +
			"Harvester namespace once it has settled; the manager's client-go requests per machine to each cluster over the\n" +
			"whole lifecycle (create, run, delete; reads are GETs including lists and watches, writes are POST/PUT/PATCH/DELETE,\n" +
			"events included); what each API server was asked to write per machine by all its clients; the manager's peak RSS\n" +
			"and CPU time. Everything runs on the one machine named, so the API servers and the simulator compete with the\n" +
			"manager for its CPUs.\n\n"
		if err := os.WriteFile(path, []byte(intro), 0o644); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o644) //nolint:gosec // G304: the path is the -report flag given by the developer running the benchmark
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString("\n" + table)
	return err
}

package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// observation is where the time of a run went: what each process used of the CPUs, how deep the
// manager's work queue was and how long items waited in it, how long client-side rate limiting
// held requests, and how fast each API server answered.
type observation struct {
	// cpu is CPU seconds used during the run by kind of process.
	cpu map[string]float64
	// depth is the front door's work queue's depth, sampled every second.
	depth []float64
	// queueWait is the mean time an item waited in the work queue, and adds the number of items.
	queueWait time.Duration
	adds      float64
	// reconciles is how many reconciles of the front door's controller ended, and the
	// manager's reconcile count when the run ended (the deletion's count starts there).
	reconciles, reconcilesAtEnd float64
	// limiterWait is the total time client-go's rate limiter held requests, by cluster (none when
	// the manager does not expose it).
	limiterWait map[string]time.Duration
	// latency is the API servers' request latency (p50, p99; watches excluded), by cluster.
	latency map[string][2]time.Duration
}

// observer samples a run while it goes.
type observer struct {
	tb         *testbed.Testbed
	managerURL string
	queue      string // the controller whose work queue is watched
	cpuStart   map[int]procCPU
	apiStart   map[string]*dto.MetricFamily
	mgrStart   map[string]*dto.MetricFamily

	mu    sync.Mutex
	depth []float64
	stop  func()
}

type procCPU struct {
	kind    string
	seconds float64
}

// observe starts sampling, the work queue of the manager's controller named queue among the rest;
// finish ends it and returns what it saw.
func observe(ctx context.Context, tb *testbed.Testbed, managerURL, queue string) (*observer, error) {
	o := &observer{tb: tb, managerURL: managerURL, queue: queue, cpuStart: processCPU(tb)}
	var err error
	if o.apiStart, err = o.apiServerMetrics(ctx); err != nil {
		return nil, err
	}
	if o.mgrStart, err = scrape(ctx, http.DefaultClient, managerURL); err != nil {
		return nil, err
	}
	o.stop = everySecond(ctx, func(ctx context.Context) {
		if fams, err := scrape(ctx, http.DefaultClient, managerURL); err == nil {
			o.mu.Lock()
			o.depth = append(o.depth, sumOf(fams["workqueue_depth"], "name", o.queue))
			o.mu.Unlock()
		}
	})
	return o, nil
}

// everySecond calls sample every second in the background; stop ends it and waits for the sample
// under way, if any (calling it again is harmless).
func everySecond(ctx context.Context, sample func(context.Context)) (stop func()) {
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
				sample(sctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (o *observer) finish(ctx context.Context) (observation, error) {
	o.stop()
	obs := observation{cpu: cpuSince(o.tb, o.cpuStart), limiterWait: map[string]time.Duration{}, latency: map[string][2]time.Duration{}}
	mgr, err := scrape(ctx, http.DefaultClient, o.managerURL)
	if err != nil {
		return obs, err
	}
	sum := func(f map[string]*dto.MetricFamily, name string) (float64, float64) {
		return histogramSum(f[name], "name", o.queue), histogramCount(f[name], "name", o.queue)
	}
	s1, c1 := sum(o.mgrStart, "workqueue_queue_duration_seconds")
	s2, c2 := sum(mgr, "workqueue_queue_duration_seconds")
	if obs.adds = c2 - c1; obs.adds > 0 {
		obs.queueWait = seconds((s2 - s1) / obs.adds)
	}
	obs.reconcilesAtEnd = reconcileCount(mgr, o.queue)
	obs.reconciles = obs.reconcilesAtEnd - reconcileCount(o.mgrStart, o.queue)
	if waits := mgr[metrics.RateLimiterWaitName]; waits != nil {
		for cluster, host := range map[string]string{"management": hostOf(o.tb.MgmtConfig.Host), "Harvester": hostOf(o.tb.Harvester.Config.Host)} {
			obs.limiterWait[cluster] = seconds(histogramSum(waits, "host", host) - histogramSum(o.mgrStart[metrics.RateLimiterWaitName], "host", host))
		}
	}
	end, err := o.apiServerMetrics(ctx)
	if err != nil {
		return obs, err
	}
	for cluster, fam := range end {
		obs.latency[cluster] = [2]time.Duration{quantile(fam, o.apiStart[cluster], 0.5), quantile(fam, o.apiStart[cluster], 0.99)}
	}
	o.mu.Lock()
	obs.depth = append(obs.depth, o.depth...)
	o.mu.Unlock()
	return obs, nil
}

// apiServerMetrics reads apiserver_request_duration_seconds from both API servers.
func (o *observer) apiServerMetrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	out := map[string]*dto.MetricFamily{}
	for cluster, cfg := range map[string]*rest.Config{"management": o.tb.MgmtConfig, "Harvester": o.tb.Harvester.Config} {
		fams, err := scrapeAPIServer(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s API server metrics: %w", cluster, err)
		}
		out[cluster] = fams["apiserver_request_duration_seconds"]
	}
	return out, nil
}

// scrapeAPIServer reads a test API server's /metrics as its administrator.
func scrapeAPIServer(ctx context.Context, cfg *rest.Config) (map[string]*dto.MetricFamily, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return scrape(ctx, hc, strings.TrimSuffix(cfg.Host, "/")+"/metrics")
}

// apiServerWrites counts the writes an API server has answered, by verb and resource
// ("PATCH machinerequests/status", with the code if refused: "DELETE virtualmachines (409)"), from
// apiserver_request_total: all clients together.
func apiServerWrites(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	fams, err := scrapeAPIServer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return countRequests(fams["apiserver_request_total"], func(labels map[string]string) bool {
		switch labels["verb"] {
		case "GET", "LIST", "WATCH", "CONNECT":
			return false
		}
		return true
	}), nil
}

// countRequests sums a request counter by "verb resource[/subresource][ (code)]", the code only for
// refusals, over the samples keep accepts.
func countRequests(f *dto.MetricFamily, keep func(labels map[string]string) bool) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if !keep(labels) {
			continue
		}
		key := labels["verb"] + " " + labels["resource"]
		if labels["subresource"] != "" {
			key += "/" + labels["subresource"]
		}
		if code := labels["code"]; code >= "400" {
			key += " (" + code + ")"
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// managerHarvesterRequests counts the manager's requests to Harvester by verb and resource ("get
// virtualmachines.kubevirt.io", with the code if refused), from its
// butler_harvester_api_requests_total; nil if it has none (the published provider).
func managerHarvesterRequests(ctx context.Context, managerURL string) (map[string]float64, error) {
	fams, err := scrape(ctx, http.DefaultClient, managerURL)
	if err != nil || fams["butler_harvester_api_requests_total"] == nil {
		return nil, err
	}
	return countRequests(fams["butler_harvester_api_requests_total"], func(map[string]string) bool { return true }), nil
}

// describeWrites renders the requests between two counts (apiServerWrites,
// managerHarvesterRequests), per machine, largest first; those under 0.05 per machine are left out.
// No count at the end is "n/a" (a metric the manager does not expose).
func describeWrites(start, end map[string]float64, n int) string {
	if end == nil {
		return "n/a"
	}
	keys := make([]string, 0, len(end))
	for k := range end {
		if end[k]-start[k] >= 0.05*float64(n) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		di, dj := end[keys[i]]-start[keys[i]], end[keys[j]]-start[keys[j]]
		if di != dj {
			return di > dj
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, (end[k]-start[k])/float64(n)))
	}
	return strings.Join(parts, ", ")
}

// perMachine is the sum of the requests between two counts (apiServerWrites), per machine.
func perMachine(start, end map[string]float64, n int) float64 {
	var sum float64
	for k := range end {
		sum += end[k] - start[k]
	}
	return sum / float64(n)
}

// reconcileCount is how many reconciles of controller ended, whatever their result, from
// controller-runtime's controller_runtime_reconcile_total.
func reconcileCount(fams map[string]*dto.MetricFamily, controller string) float64 {
	return sumOf(fams["controller_runtime_reconcile_total"], "controller", controller)
}

// scrape reads the metrics at url, uncompressed: the bench reads the manager's every second, and
// gzipping them was 1.5 % of the manager's CPU in its profiles, a cost of the bench and not of
// the provider (Prometheus scrapes every 15 s or more).
func scrape(ctx context.Context, hc *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// matching yields the metrics of a family whose label has the value.
func matching(f *dto.MetricFamily, label, value string) []*dto.Metric {
	if f == nil {
		return nil
	}
	var out []*dto.Metric
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				out = append(out, m)
			}
		}
	}
	return out
}

// sumOf sums the values (gauges or counters) of f whose label has the value.
func sumOf(f *dto.MetricFamily, label, value string) float64 {
	var v float64
	for _, m := range matching(f, label, value) {
		v += m.GetGauge().GetValue() + m.GetCounter().GetValue() // a metric is one or the other
	}
	return v
}

func histogramSum(f *dto.MetricFamily, label, value string) float64 {
	var v float64
	for _, m := range matching(f, label, value) {
		v += m.GetHistogram().GetSampleSum()
	}
	return v
}

func histogramCount(f *dto.MetricFamily, label, value string) float64 {
	var v float64
	for _, m := range matching(f, label, value) {
		v += float64(m.GetHistogram().GetSampleCount())
	}
	return v
}

// quantile estimates the q-quantile of the requests an API server answered between start and end
// (watches and proxied connections excluded: they last as long as the client wants), from the
// cumulative buckets of apiserver_request_duration_seconds, as Prometheus' histogram_quantile does.
func quantile(end, start *dto.MetricFamily, q float64) time.Duration {
	buckets := map[float64]float64{}
	add := func(f *dto.MetricFamily, sign float64) {
		for _, m := range f.GetMetric() {
			skip := false
			for _, l := range m.GetLabel() {
				if l.GetName() == "verb" && (l.GetValue() == "WATCH" || l.GetValue() == "CONNECT") {
					skip = true
				}
			}
			if skip {
				continue
			}
			for _, b := range m.GetHistogram().GetBucket() {
				buckets[b.GetUpperBound()] += sign * float64(b.GetCumulativeCount())
			}
		}
	}
	add(end, 1)
	add(start, -1)
	bounds := make([]float64, 0, len(buckets))
	for b := range buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 || buckets[bounds[len(bounds)-1]] <= 0 {
		return 0
	}
	total := buckets[bounds[len(bounds)-1]]
	rank, lower, below := q*total, 0.0, 0.0
	for _, b := range bounds {
		if buckets[b] >= rank {
			if math.IsInf(b, 1) {
				return seconds(lower)
			}
			return seconds(lower + (b-lower)*(rank-below)/(buckets[b]-below))
		}
		lower, below = b, buckets[b]
	}
	return seconds(lower)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// processCPU reads the CPU time of this process (the benchmark, the simulator and the test API
// clients run in it) and of its children (API servers, etcds, the manager), by kind: each API
// server and etcd named after the cluster of the testbed it serves ("management kube-apiserver").
func processCPU(tb *testbed.Testbed) map[int]procCPU {
	out := map[int]procCPU{}
	self := os.Getpid()
	if s, ok := cpuOf(self); ok {
		out[self] = procCPU{kind: "bench and simulator", seconds: s}
	}
	type child struct {
		comm  string
		flags map[string]string
	}
	children := map[int]child{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		data, err := os.ReadFile(path) //nolint:gosec // G304: /proc files of this machine's processes
		if err != nil {
			continue
		}
		fields := strings.Fields(string(data)[strings.LastIndexByte(string(data), ')')+2:])
		if len(fields) < 13 || fields[1] != strconv.Itoa(self) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		comm, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "comm"))
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "cmdline"))
		flags := map[string]string{}
		for _, arg := range strings.Split(string(cmdline), "\x00") {
			if name, value, ok := strings.Cut(arg, "="); ok {
				flags[name] = value
			}
		}
		children[pid] = child{comm: strings.TrimSpace(string(comm)), flags: flags}
	}
	clusterOfPort := map[string]string{portOf(tb.MgmtConfig.Host): "management"}
	for _, hv := range tb.Harvesters { // several Harvester clusters count as one kind
		clusterOfPort[portOf(hv.Config.Host)] = "Harvester"
	}
	clusterOfEtcd := map[string]string{}
	for _, c := range children {
		if cluster, ok := clusterOfPort[c.flags["--secure-port"]]; ok && c.comm == "kube-apiserver" {
			clusterOfEtcd[c.flags["--etcd-servers"]] = cluster
		}
	}
	for pid, c := range children {
		kind := c.comm
		switch cluster := ""; c.comm {
		case "kube-apiserver":
			cluster = clusterOfPort[c.flags["--secure-port"]]
			kind = strings.TrimSpace(cluster + " " + kind)
		case "etcd":
			cluster = clusterOfEtcd[c.flags["--listen-client-urls"]]
			kind = strings.TrimSpace(cluster + " " + kind)
		}
		if s, ok := cpuOf(pid); ok {
			out[pid] = procCPU{kind: kind, seconds: s}
		}
	}
	return out
}

// portOf is the port of an API server's URL.
func portOf(host string) string {
	u, err := url.Parse(host)
	if err != nil {
		return ""
	}
	return u.Port()
}

// cpuSince is the CPU seconds each kind of process used since start (processCPU's answer then).
func cpuSince(tb *testbed.Testbed, start map[int]procCPU) map[string]float64 {
	used := map[string]float64{}
	for pid, end := range processCPU(tb) {
		used[end.kind] += end.seconds - start[pid].seconds
	}
	return used
}

// totalCPU is the sum of CPU seconds over every kind of process.
func totalCPU(cpu map[string]float64) float64 {
	total := 0.0
	for _, s := range cpu {
		total += s
	}
	return total
}

// describeCPU renders CPU seconds by kind of process, sorted by kind, with their total.
func describeCPU(cpu map[string]float64) string {
	kinds := make([]string, 0, len(cpu))
	for k := range cpu {
		kinds = append(kinds, k)
	}
	total := totalCPU(cpu)
	sort.Strings(kinds)
	parts := make([]string, 0, len(kinds)+1)
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.1f s", k, cpu[k]))
	}
	return fmt.Sprintf("%.1f s in all: %s", total, strings.Join(parts, ", "))
}

// cpuOf is a process's user and system CPU time in seconds.
func cpuOf(pid int) (float64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(data)[strings.LastIndexByte(string(data), ')')+2:])
	if len(fields) < 13 {
		return 0, false
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100, true // USER_HZ is 100 on Linux
}

// describe renders an observation for the console and the report.
func (o observation) describe() string {
	depth := make([]string, 0, len(o.depth))
	for _, d := range o.depth {
		depth = append(depth, strconv.Itoa(int(d)))
	}
	mgmtWait, exposed := o.limiterWait["management"]
	hvWait := o.limiterWait["Harvester"]
	return fmt.Sprintf("CPU: %s. Work queue depth every second: %s; mean wait in the queue %s over %.0f adds; %.0f reconciles. Rate limiter held requests for %s (management) and %s (Harvester) in all. API server latency p50/p99 (watches excluded): management %s/%s, Harvester %s/%s.",
		describeCPU(o.cpu), strings.Join(depth, " "), o.queueWait.Round(time.Millisecond), o.adds, o.reconciles,
		orNA(mgmtWait, exposed), orNA(hvWait, exposed),
		o.latency["management"][0].Round(time.Millisecond), o.latency["management"][1].Round(time.Millisecond),
		o.latency["Harvester"][0].Round(time.Millisecond), o.latency["Harvester"][1].Round(time.Millisecond))
}

// rssSampler records the manager's resident memory every second over a whole run (create, run,
// delete), so that the peak can be placed in time.
type rssSampler struct {
	mu      sync.Mutex
	mb      []float64
	running int // samples taken before all were Running
	stop    func()
}

func sampleRSS(ctx context.Context, pid int) *rssSampler {
	s := &rssSampler{}
	s.stop = everySecond(ctx, func(context.Context) {
		if mb, err := residentMB(pid, "VmRSS:"); err == nil {
			s.mu.Lock()
			s.mb = append(s.mb, mb)
			s.mu.Unlock()
		}
	})
	return s
}

// allRunning marks the moment all machines are Running.
func (s *rssSampler) allRunning() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = len(s.mb)
}

// finish stops sampling and describes the series: every 5 s, "|" where all became Running.
func (s *rssSampler) finish() string {
	s.stop()
	var out []string
	for i, mb := range s.mb {
		if i == s.running {
			out = append(out, "|")
		}
		if i%5 == 0 {
			out = append(out, strconv.Itoa(int(mb+0.5)))
		}
	}
	return strings.Join(out, " ")
}

// residentMB reads a memory figure of a process (VmRSS:, VmHWM:) from /proc, in MB.
func residentMB(pid int, field string) (float64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, field) {
			var kb float64
			_, _ = fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, field)), "%f", &kb) // the kernel writes it
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// gaugeMB is the value of the named gauge among scraped metric families, in MB.
func gaugeMB(fams map[string]*dto.MetricFamily, name string) (float64, bool) {
	m := fams[name].GetMetric()
	if len(m) == 0 {
		return 0, false
	}
	return m[0].GetGauge().GetValue() / 1e6, true
}

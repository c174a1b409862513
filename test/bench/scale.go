package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// A platform's shape: several Harvester clusters (-harvesters K, one ProviderConfig each, the
// MachineRequests spread over them round-robin), machines that run for long (-standing: the
// manager watched with nothing asked of it), and a manager restarted while they run (-restart).
// The runs then also say what the manager costs to stay up: its memory idle (K ProviderConfigs
// connected, no machine), at its peak and steady, per machine above idle; the watches and
// connections it keeps to each Harvester cluster; every process's memory (and the run stops if
// the machine swaps, which would make every figure meaningless); its CPU, reads and writes per
// minute while standing; and how long a restarted manager takes to observe every machine again.
//
// The floor of K clusters is the direct twin on K Harvester clusters at once (the bench creates
// each machine on its cluster as a perfect provider would) with the management floor on top: a
// perfect provider against K Harvesters.

// providerConfigName names the ProviderConfig of Harvester cluster k: the sample's for the first.
func providerConfigName(k int) string {
	if k == 0 {
		return "harvester-config"
	}
	return fmt.Sprintf("harvester-config-%d", k+1)
}

// providerConfigOf names the ProviderConfig of machine i on a testbed of k Harvester clusters.
func providerConfigOf(i, k int) string { return providerConfigName(i % max(k, 1)) }

// createProviderConfigs creates, beside the sample ProviderConfig (of the first Harvester
// cluster), one for each other Harvester cluster of the testbed: the same, with that cluster's
// credentials.
func createProviderConfigs(ctx context.Context, tb *testbed.Testbed) error {
	sample := &v1alpha1.ProviderConfig{}
	if err := tb.Mgmt.Get(ctx, client.ObjectKey{Namespace: testbed.Namespace, Name: providerConfigName(0)}, sample); err != nil {
		return err
	}
	for k := 1; k < len(tb.Harvesters); k++ {
		pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.Namespace, Name: providerConfigName(k)}, Spec: *sample.Spec.DeepCopy()}
		pc.Spec.CredentialsRef.Name = testbed.CredentialsSecretOf(k)
		if err := tb.Mgmt.Create(ctx, pc); err != nil {
			return err
		}
	}
	return nil
}

// networkFor is the VM network's range for n machines spread over k Harvester clusters: each
// cluster's simulator leases from the whole range, so it must hold a cluster's share (a /24 runs
// out at 245 machines); a /20 (4000 leases) at least.
func networkFor(n, k int) string {
	perCluster := (n + max(k, 1) - 1) / max(k, 1)
	prefix := 20
	for prefix > 12 && (1<<(32-prefix))-100 < perCluster {
		prefix--
	}
	return fmt.Sprintf("10.40.0.0/%d", prefix)
}

// chartMemoryLimit is the Go memory limit the manager takes in a Deployment of the chart:
// GOMEMLIMIT at 90% of the chart's default memory limit (cmd/manager's setMemoryLimit), which the
// bench gives the manager so that its memory is what it would be there.
func chartMemoryLimit(repoRoot string) (string, error) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "charts", "butler-provider-harvester", "values.yaml")) //nolint:gosec // G304: the repository's chart
	if err != nil {
		return "", err
	}
	var values struct {
		Resources corev1.ResourceRequirements `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		return "", err
	}
	limit := values.Resources.Limits.Memory()
	if limit.IsZero() {
		return "", fmt.Errorf("the chart's values.yaml sets no resources.limits.memory")
	}
	return fmt.Sprintf("GOMEMLIMIT=%d", limit.Value()*9/10), nil
}

// harvesterWrites is apiServerWrites summed over every Harvester cluster of the testbed.
func harvesterWrites(ctx context.Context, tb *testbed.Testbed) (map[string]float64, error) {
	sum := map[string]float64{}
	for _, hv := range tb.Harvesters {
		w, err := apiServerWrites(ctx, hv.Config)
		if err != nil {
			return nil, err
		}
		for k, v := range w {
			sum[k] += v
		}
	}
	return sum, nil
}

// memory is the manager's memory at one moment: resident (RSS), its Go heap (live objects and
// garbage not yet collected, go_memstats_heap_alloc_bytes) and the heap size at which the Go
// runtime collects next (go_memstats_next_gc_bytes: twice what was live at the last collection
// under GOGC=100, less when GOMEMLIMIT binds), in MB. The goal is what the runtime lets the heap,
// and so the resident memory, grow to: an RSS well above the live heap but at or under the goal
// is the runtime's choice, not memory the provider holds.
type memory struct{ rssMB, heapMB, goalMB float64 }

// managerMemory reads the manager's memory now.
func managerMemory(ctx context.Context, tb *testbed.Testbed, metricsURL string) (memory, error) {
	rss, err := residentMB(tb.ManagerPID(), "VmRSS:")
	if err != nil {
		return memory{}, err
	}
	fams, err := scrape(ctx, http.DefaultClient, metricsURL)
	if err != nil {
		return memory{}, err
	}
	gauge := func(name string) (float64, error) {
		if mb, ok := gaugeMB(fams, name); ok {
			return mb, nil
		}
		return 0, fmt.Errorf("no %s in %s", name, metricsURL)
	}
	heap, err := gauge("go_memstats_heap_alloc_bytes")
	if err != nil {
		return memory{}, err
	}
	goal, err := gauge("go_memstats_next_gc_bytes")
	if err != nil {
		return memory{}, err
	}
	return memory{rssMB: rss, heapMB: heap, goalMB: goal}, nil
}

// settledMemory samples the manager's memory every second for window and returns the least of
// each: the heap right after a collection (what is live, not the garbage of the moment), with the
// collection goal set then, and the resident memory the runtime keeps.
func settledMemory(ctx context.Context, tb *testbed.Testbed, metricsURL string, window time.Duration) (memory, error) {
	least := memory{rssMB: -1, heapMB: -1, goalMB: -1}
	for deadline := time.Now().Add(window); ; {
		m, err := managerMemory(ctx, tb, metricsURL)
		if err != nil {
			return least, err
		}
		if least.rssMB < 0 || m.rssMB < least.rssMB {
			least.rssMB = m.rssMB
		}
		if least.heapMB < 0 || m.heapMB < least.heapMB {
			least.heapMB, least.goalMB = m.heapMB, m.goalMB
		}
		if time.Now().After(deadline) {
			return least, nil
		}
		if err := pause(ctx, time.Second); err != nil {
			return least, err
		}
	}
}

// heapSampler records the peak of the manager's Go heap, sampled every second.
type heapSampler struct {
	peakMB float64
	stop   func()
}

func sampleHeap(ctx context.Context, metricsURL string) *heapSampler {
	s := &heapSampler{}
	s.stop = everySecond(ctx, func(ctx context.Context) {
		fams, err := scrape(ctx, http.DefaultClient, metricsURL)
		if err != nil {
			return
		}
		if heap, ok := gaugeMB(fams, "go_memstats_heap_alloc_bytes"); ok {
			s.peakMB = max(s.peakMB, heap)
		}
	})
	return s
}

// perMachineKB is how much memory above idle each of n machines costs, in KB.
func perMachineKB(steady, idle float64, n int) float64 { return 1000 * (steady - idle) / float64(n) }

// clusterLinks are what the manager keeps open to each Harvester cluster while all machines run:
// its watches (the API server's long-running WATCH requests, less those it had before the manager
// connected: the simulator's own) and its TCP connections.
type clusterLinks struct{ watches, connections []int }

func (l clusterLinks) String() string {
	parts := make([]string, len(l.watches))
	for k := range l.watches {
		parts[k] = fmt.Sprintf("cluster %d: %d watches, %d connections", k+1, l.watches[k], l.connections[k])
	}
	return strings.Join(parts, "; ")
}

// longRunningWatches are the WATCH requests each Harvester cluster's API server holds open.
func longRunningWatches(ctx context.Context, tb *testbed.Testbed) ([]int, error) {
	out := make([]int, len(tb.Harvesters))
	for k, hv := range tb.Harvesters {
		fams, err := scrapeAPIServer(ctx, hv.Config)
		if err != nil {
			return nil, err
		}
		out[k] = int(sumOf(fams["apiserver_longrunning_requests"], "verb", "WATCH"))
	}
	return out, nil
}

// managerLinks counts the manager's watches and connections to each Harvester cluster, its
// watches above baseline (longRunningWatches before it connected).
func managerLinks(ctx context.Context, tb *testbed.Testbed, baseline []int) (clusterLinks, error) {
	watches, err := longRunningWatches(ctx, tb)
	if err != nil {
		return clusterLinks{}, err
	}
	links := clusterLinks{watches: make([]int, len(tb.Harvesters)), connections: make([]int, len(tb.Harvesters))}
	remotePorts, err := established(tb.ManagerPID())
	if err != nil {
		return links, err
	}
	for k, hv := range tb.Harvesters {
		links.watches[k] = watches[k] - baseline[k]
		port, _ := strconv.Atoi(portOf(hv.Config.Host))
		links.connections[k] = remotePorts[port]
	}
	return links, nil
}

// established counts a process's established TCP connections by remote port: its sockets (the
// inodes of /proc/<pid>/fd) matched in /proc/<pid>/net/tcp and tcp6.
func established(pid int) (map[int]int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	sockets := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			sockets[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	byPort := map[int]int{}
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "01" || !sockets[fields[9]] { // 01: ESTABLISHED
				continue
			}
			_, portHex, _ := strings.Cut(fields[2], ":")
			if port, err := strconv.ParseInt(portHex, 16, 32); err == nil {
				byPort[int(port)]++
			}
		}
		_ = f.Close()
	}
	return byPort, nil
}

// processMemory renders every process's resident memory (the bench with the simulators, the API
// servers and etcds by cluster, the manager), largest first.
func processMemory(tb *testbed.Testbed) string {
	byKind := map[string]float64{}
	for pid, p := range processCPU(tb) {
		if mb, err := residentMB(pid, "VmRSS:"); err == nil {
			byKind[p.kind] += mb
		}
	}
	kinds := make([]string, 0, len(byKind))
	total := 0.0
	for k, mb := range byKind {
		kinds = append(kinds, k)
		total += mb
	}
	sort.Slice(kinds, func(i, j int) bool { return byKind[kinds[i]] > byKind[kinds[j]] })
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.0f MB", k, byKind[k]))
	}
	return fmt.Sprintf("%.0f MB in all: %s", total, strings.Join(parts, ", "))
}

// swapUsedMB is how much swap the machine uses, in MB (0 without swap).
func swapUsedMB() (float64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var total, free float64
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "SwapTotal:":
			total = kb
		case "SwapFree:":
			free = kb
		}
	}
	return (total - free) / 1000, nil
}

// requireNoSwapping fails a run during which the machine started swapping: its times would
// measure the disk.
func requireNoSwapping(atStart float64) error {
	now, err := swapUsedMB()
	if err != nil {
		return err
	}
	if now > atStart+50 {
		return fmt.Errorf("the machine swaps (%.0f MB of swap used, %.0f MB at the start): lower -n", now, atStart)
	}
	return nil
}

// standingCost is what the manager cost over the standing window with all machines running and
// nothing asked of it: CPU, and its requests to each side per minute.
type standingCost struct {
	window time.Duration
	// hvRequests are the manager's requests to Harvester (all clusters) by verb and resource,
	// mgmtRequests the management API server's by verb and resource (all clients: the bench asks
	// nothing of it meanwhile).
	hvRequests, mgmtRequests string
}

// perMinute renders the requests between two counts per minute of window.
func perMinute(start, end map[string]float64, window time.Duration) string {
	if end == nil {
		return "n/a"
	}
	keys := make([]string, 0, len(end))
	for k := range end {
		if end[k] > start[k] {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "none"
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, (end[k]-start[k])/window.Minutes()))
	}
	return strings.Join(parts, ", ")
}

// apiServerRequests counts every request an API server has answered (reads, watches and writes)
// by verb and resource, as apiServerWrites counts its writes.
func apiServerRequests(ctx context.Context, cfg *rest.Config) (map[string]float64, error) {
	fams, err := scrapeAPIServer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return countRequests(fams["apiserver_request_total"], func(map[string]string) bool { return true }), nil
}

// restartResult is what a restarted manager took to observe every machine again.
type restartResult struct {
	// observedIn is from the new process's start to butler_harvester_machines_observed_total
	// reaching n.
	observedIn time.Duration
	// hvRequests are the new process's requests to Harvester until then and for settleTime after
	// (by verb and resource, all clusters); mgmtWrites and hvWrites what the API servers were
	// asked to write meanwhile (all clients: the simulator's own writes to Harvester among them).
	hvRequests, mgmtWrites, hvWrites string
	// statusWrites are the management writes to the status of MachineRequests and
	// HarvesterMachines meanwhile: none when no machine's state changed.
	statusWrites float64
}

// measureRestart replaces the manager's process (replace: a restart after SIGKILL, or an
// upgrade), and measures how long the new process takes to observe all n machines, and what it
// reads and writes until then and for settleTime after.
func measureRestart(ctx context.Context, tb *testbed.Testbed, metricsURL string, n int, timeout time.Duration, replace func() error) (restartResult, error) {
	var res restartResult
	mgmtAtStart, err := apiServerWrites(ctx, tb.MgmtConfig)
	if err != nil {
		return res, err
	}
	hvAtStart, err := harvesterWrites(ctx, tb)
	if err != nil {
		return res, err
	}
	if err := replace(); err != nil {
		return res, err
	}
	start := time.Now()
	if err := waitFor(ctx, timeout, tb, func() (bool, error) {
		fams, err := scrape(ctx, http.DefaultClient, metricsURL)
		if err != nil {
			return false, nil // not listening yet
		}
		observed := fams[metrics.MachinesObservedName].GetMetric()
		return len(observed) > 0 && observed[0].GetCounter().GetValue() >= float64(n), nil
	}); err != nil {
		return res, fmt.Errorf("waiting for the restarted manager to observe %d machines: %w", n, err)
	}
	res.observedIn = time.Since(start)
	if err := pause(ctx, settleTime); err != nil {
		return res, err
	}
	hvRequests, err := managerHarvesterRequests(ctx, metricsURL)
	if err != nil {
		return res, err
	}
	res.hvRequests = describeWrites(nil, hvRequests, n)
	mgmtAtEnd, err := apiServerWrites(ctx, tb.MgmtConfig)
	if err != nil {
		return res, err
	}
	hvAtEnd, err := harvesterWrites(ctx, tb)
	if err != nil {
		return res, err
	}
	res.mgmtWrites, res.hvWrites = describeWrites(mgmtAtStart, mgmtAtEnd, n), describeWrites(hvAtStart, hvAtEnd, n)
	for k, v := range mgmtAtEnd {
		if resource := strings.Fields(k)[1]; strings.HasSuffix(resource, "machinerequests/status") || strings.HasSuffix(resource, "harvestermachines/status") {
			res.statusWrites += v - mgmtAtStart[k]
		}
	}
	return res, nil
}

func (r restartResult) String() string {
	none := func(s string) string {
		if s == "" {
			return "none"
		}
		return s
	}
	return fmt.Sprintf("every machine observed again %s after the restart; until then and %s after, per machine: the manager's Harvester requests %s; management writes %s (%.0f machine status writes in all); Harvester writes (all clients) %s",
		r.observedIn.Round(10*time.Millisecond), settleTime, none(r.hvRequests), none(r.mgmtWrites), r.statusWrites, none(r.hvWrites))
}

// processTotals are a manager process's peak RSS and CPU when it is replaced, and the CPU its
// successor had used once it observed every machine again (left out of the run's CPU).
type processTotals struct{ peakRSSMB, cpuSeconds, restartCPU float64 }

// platform renders the platform's figures of a run (see result).
func (r result) platform() string {
	out := fmt.Sprintf("\n   manager memory, RSS / Go heap: idle (%s, no machine) %.0f / %.0f MB; all running, settled %.0f / %.0f MB (the runtime's next collection at %.0f MB, %s); peak heap %.0f MB; per machine above idle %.1f / %.1f KB",
		providerConfigs(len(r.links.watches)), r.idle.rssMB, r.idle.heapMB, r.steady.rssMB, r.steady.heapMB, r.steady.goalMB, r.memoryLimit, r.peakHeapMB,
		perMachineKB(r.steady.rssMB, r.idle.rssMB, r.n), perMachineKB(r.steady.heapMB, r.idle.heapMB, r.n)) +
		"\n   to Harvester at all Running: " + r.links.String() +
		"\n   every process's RSS at all Running: " + r.processes +
		fmt.Sprintf("\n   standing over %s, per minute: the manager's Harvester requests %s; management API server requests (all clients) %s", r.standing.window, r.standing.cost.hvRequests, r.standing.cost.mgmtRequests)
	switch {
	case r.restart != nil && r.upgraded:
		out += "\n   upgrade to this provider (SIGTERM, then this repository's manager; leader election off): " + r.restart.String()
	case r.restart != nil:
		out += "\n   restart (SIGKILL, leader election off): " + r.restart.String()
	}
	return out
}

// providerConfigs says how many ProviderConfigs were connected.
func providerConfigs(k int) string {
	if k == 1 {
		return "1 ProviderConfig"
	}
	return fmt.Sprintf("%d ProviderConfigs", k)
}

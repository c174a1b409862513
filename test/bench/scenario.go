package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

type scenario struct {
	name     string
	boot, ip time.Duration
	// noUserData creates the machines without userData, as the Butler bootstrap does.
	noUserData bool
	// clusterAPI asks for the machines through a Cluster API MachineDeployment (clusterapi.go)
	// rather than MachineRequests.
	clusterAPI bool
	// staticAddresses gives the Cluster API run's machines their addresses from an IP pool
	// through the IPAM contract instead of DHCP.
	staticAddresses bool
}

// frontDoor is how a scenario asks for its machines, watches them and deletes them: MachineRequests
// (machineRequests), or a Cluster API MachineDeployment (machineDeployment).
type frontDoor interface {
	// queue names the manager's controller that serves the machines (its work queue's metrics).
	queue() string
	// prepare readies what the machines need and starts watching them, before the measurement;
	// close undoes it, also after an error.
	prepare(ctx context.Context, tb *testbed.Testbed) error
	close()
	// create asks for n machines.
	create(ctx context.Context, tb *testbed.Testbed, n int) error
	// running counts the machines Running, as an informer sees them.
	running() int
	// afterRunning returns, per machine, the delay from its VMI reporting an IP to the machine
	// seen Running, once all are.
	afterRunning(tb *testbed.Testbed) []time.Duration
	// deleteAll deletes the machines; gone says when the front door has let them all go (counts
	// counts what counted names first, then harvesterKinds).
	deleteAll(ctx context.Context, tb *testbed.Testbed) error
	gone(ctx context.Context, tb *testbed.Testbed, counts *deletionCounts) (bool, error)
	// harvesterPrefix begins the names of the machines' objects on Harvester, for what is left.
	harvesterPrefix() string
	// counted is what deletion progress counts of the machines on the management cluster.
	counted(tb *testbed.Testbed) countedKind
	// machines is how many machines the manager serves when n are asked for: the n, and any the
	// front door needs beside them (a Cluster's control plane Machine).
	machines(n int) int
	// ownWrites are the benchmark's own writes to the management API server (as apiServerWrites
	// counts them) for n machines: not the provider's, so not counted.
	ownWrites(n int) map[string]float64
	// finish runs after the measurement and returns what the report should add to the run's
	// figures.
	finish(ctx context.Context, tb *testbed.Testbed) (string, error)
}

func frontDoorOf(o options, sc scenario) frontDoor {
	if sc.clusterAPI {
		return &machineDeployment{timeout: o.timeout, static: sc.staticAddresses}
	}
	return &machineRequests{userData: !sc.noUserData, spread: o.spread}
}

type result struct {
	scenario scenario
	// provider labels the results of another provider than this one ("" for this one).
	provider  string
	n         int
	toRunning time.Duration
	ipDelays  []time.Duration // VMI reported its IP -> the machine shows Running
	toDeleted time.Duration
	// emptied is when the Harvester namespace was empty, from the delete (0: never).
	emptied time.Duration
	// left is how many objects were left on Harvester, and leftWhat which.
	left       int
	leftWhat   string
	requests   requestCounts
	peakRSSMB  float64
	cpuSeconds float64
	// obs is where the time went from the first create to all Running.
	obs observation
	// mgmtWrites is what the management API server was asked to write per machine, by verb and
	// resource, over the whole lifecycle (the manager's writes and the API server's own).
	mgmtWrites string
	// hvRequests is what the manager asked of Harvester per machine, reads and writes, by verb
	// and resource, from its own butler_harvester_api_requests_total.
	hvRequests string
	// hvWrites is what the Harvester API server was asked to write per machine, by verb and
	// resource, over the whole lifecycle: the manager's writes and the simulated Harvester's.
	hvWrites string
	// mgmtWritesAll and hvWritesAll are what each API server was asked to write per machine over
	// the whole lifecycle, all clients together (the sums of mgmtWrites and hvWrites).
	mgmtWritesAll, hvWritesAll float64
	// rss is the manager's resident memory over the run, every 5 s.
	rss string
	// deletion is what was left every second while everything was deleted.
	deletion string
	// deletionReconciles is how many reconciles of the front door's controller the deletion took.
	deletionReconciles float64
	// notes are what the front door adds (Cluster API: where each machine's time went).
	notes string
	// standing is the manager's CPU while all machines run and nothing is asked of it (see
	// measureStanding), left out of cpuSeconds.
	standing standingCPU
	// The platform's figures (scale.go): the manager's memory with its ProviderConfigs connected
	// and no machine, with all running (settled: the least over settleWindow) and at its peak;
	// what it keeps open to each Harvester cluster and every process's memory, at all Running;
	// and a restart's, with -restart.
	idle, steady memory
	// memoryLimit is the GOMEMLIMIT the manager ran under (the chart's), as the report shows it.
	memoryLimit string
	peakHeapMB  float64
	links       clusterLinks
	processes   string
	restart     *restartResult
	upgraded    bool
}

// settleWindow is how long the manager's memory is sampled for its settled figure.
const settleWindow = 20 * time.Second

// standingWindow is how long measureStanding watches the manager unless -standing says otherwise.
const standingWindow = 10 * time.Second

// standingCPU is the CPU the manager used in its window, and what the management API server was
// asked to write meanwhile, per second (the changes its watches heard); cost is every request to
// each side, per minute.
type standingCPU struct {
	window     time.Duration
	seconds    float64
	mgmtWrites string
	cost       standingCost
}

// measureStanding measures the manager's CPU for standingWindow once all machines run, with
// nothing asked of it and the bench's metrics scrapes stopped: what it costs per second only by
// running, watching what it watches (for Cluster API, the Machines Cluster API core keeps
// writing). It explains a run that takes longer costing more per machine. With prof, and once
// the creating CPU profile is done (a run of at least its window), the manager's CPU profile of
// the window is cpu-standing-manager.pprof.
func measureStanding(ctx context.Context, tb *testbed.Testbed, prof *profiler, runningAfter, window time.Duration, metricsURL string) (standingCPU, error) {
	res := standingCPU{window: window, cost: standingCost{window: window}}
	writesAtStart, err := apiServerWrites(ctx, tb.MgmtConfig)
	if err != nil {
		return res, err
	}
	mgmtAtStart, err := apiServerRequests(ctx, tb.MgmtConfig)
	if err != nil {
		return res, err
	}
	hvAtStart, err := managerHarvesterRequests(ctx, metricsURL)
	if err != nil {
		return res, err
	}
	_, atStart, err := processUsage(tb.ManagerPID())
	if err != nil {
		return res, err
	}
	if prof != nil && runningAfter > cpuWindowStart+cpuWindowSpan {
		prof.managerCPU(ctx, "cpu-standing-manager.pprof", window)
	} else if err := pause(ctx, window); err != nil {
		return res, err
	}
	_, atEnd, err := processUsage(tb.ManagerPID())
	if err != nil {
		return res, err
	}
	res.seconds = atEnd - atStart
	hvAtEnd, err := managerHarvesterRequests(ctx, metricsURL)
	if err != nil {
		return res, err
	}
	mgmtAtEnd, err := apiServerRequests(ctx, tb.MgmtConfig)
	if err != nil {
		return res, err
	}
	res.cost.hvRequests, res.cost.mgmtRequests = perMinute(hvAtStart, hvAtEnd, window), perMinute(mgmtAtStart, mgmtAtEnd, window)
	writesAtEnd, err := apiServerWrites(ctx, tb.MgmtConfig)
	res.mgmtWrites = describeWrites(writesAtStart, writesAtEnd, int(window.Seconds()))
	return res, err
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// writes are the management writes per second of the window, "none" if there were none.
func (s standingCPU) writes() string {
	if s.mgmtWrites == "" {
		return "none"
	}
	return s.mgmtWrites
}

// perSecond is the standing CPU in milliseconds per second.
func (s standingCPU) perSecond() float64 { return 1000 * s.seconds / s.window.Seconds() }

// runScenario measures a provider (this one, or the published one: see published.go) on a
// scenario.
func runScenario(ctx context.Context, o options, sc scenario, work string, p provider) (result, error) {
	res := result{scenario: sc, n: o.n, provider: p.label}
	var metricsAddr, pprofAddr string
	memLimit, err := chartMemoryLimit(o.repoRoot)
	if err != nil {
		return res, err
	}
	res.memoryLimit = memLimit
	opts := testbed.Options{WorkDir: work, ManagerBinary: p.binary, ManagerEnv: []string{memLimit}, ManagerArgsLate: func() (_ []string, err error) {
		addrs, err := testbed.FreeLocalAddrs(2)
		if err != nil {
			return nil, err
		}
		metricsAddr = addrs[0]
		if o.profileDir != "" && p.ours() {
			pprofAddr = addrs[1]
		}
		return p.managerArgs(o, metricsAddr, pprofAddr), nil
	}}
	startTestbed := startSeeded
	if sc.clusterAPI {
		startTestbed = startSeededWithClusterAPI
	}
	tb, err := startTestbed(ctx, o, sc, opts)
	defer tb.Stop()
	if err != nil {
		return res, err
	}
	metricsURL := "http://" + metricsAddr + "/metrics"
	swapAtStart, err := swapUsedMB()
	if err != nil {
		return res, err
	}
	watchesBefore, err := longRunningWatches(ctx, tb)
	if err != nil {
		return res, err
	}
	if _, err := tb.ApplyFile(ctx, o.repoRoot+"/config/samples/providerconfig.yaml"); err != nil {
		return res, err
	}
	if err := createProviderConfigs(ctx, tb); err != nil {
		return res, err
	}
	if err := p.waitReady(ctx, tb, metricsURL); err != nil {
		return res, err
	}
	if res.idle, err = settledMemory(ctx, tb, metricsURL, settleWindow); err != nil {
		return res, err
	}

	fd := frontDoorOf(o, sc)
	defer fd.close()
	if err := fd.prepare(ctx, tb); err != nil {
		return res, err
	}
	observer, err := observe(ctx, tb, "http://"+metricsAddr+"/metrics", fd.queue())
	if err != nil {
		return res, err
	}
	mgmtWritesAtStart, err := apiServerWrites(ctx, tb.MgmtConfig)
	if err != nil {
		return res, err
	}
	hvWritesAtStart, err := harvesterWrites(ctx, tb)
	if err != nil {
		return res, err
	}
	hvRequestsAtStart, err := managerHarvesterRequests(ctx, "http://"+metricsAddr+"/metrics")
	if err != nil {
		return res, err
	}
	var prof *profiler
	if pprofAddr != "" {
		if prof, err = newProfiler(o.profileDir, tb, pprofAddr); err != nil {
			return res, err
		}
		prof.startCPU(ctx, "create")
	}
	rss := sampleRSS(ctx, tb.ManagerPID())
	defer rss.stop()
	heap := sampleHeap(ctx, metricsURL)
	defer heap.stop()
	start := time.Now()
	if err := fd.create(ctx, tb, o.n); err != nil {
		return res, err
	}
	if err := waitFor(ctx, o.timeout, tb, func() (bool, error) { return fd.running() == o.n, nil }); err != nil {
		return res, fmt.Errorf("waiting for Running (%d of %d): %w", fd.running(), o.n, err)
	}
	res.toRunning = time.Since(start)
	rss.allRunning()
	heap.stop()
	res.peakHeapMB, res.processes = heap.peakMB, processMemory(tb)
	if res.links, err = managerLinks(ctx, tb, watchesBefore); err != nil {
		return res, err
	}
	if err := requireNoSwapping(swapAtStart); err != nil {
		return res, err
	}
	if prof != nil {
		prof.heap(ctx, "running")
	}
	if res.obs, err = observer.finish(ctx); err != nil {
		return res, err
	}
	res.ipDelays = fd.afterRunning(tb)
	if res.standing, err = measureStanding(ctx, tb, prof, res.toRunning, o.standing, metricsURL); err != nil {
		return res, err
	}
	if res.steady, err = settledMemory(ctx, tb, metricsURL, settleWindow); err != nil {
		return res, err
	}
	// A restart replaces the manager's process: what the first used is kept, and what the second
	// used to observe every machine again is reported apart (restartResult) and left out.
	var before processTotals
	// The published provider does not count the machines it observes: it is not restarted.
	if (o.restart && (p.ours() || p.ourFlags)) || p.upgrade {
		if before.peakRSSMB, before.cpuSeconds, err = processUsage(tb.ManagerPID()); err != nil {
			return res, err
		}
		replace := tb.KillManager
		if p.upgrade {
			replace = func() error { return tb.ReplaceManager("", thisProvider.managerArgs(o, metricsAddr, "")) }
		}
		r, err := measureRestart(ctx, tb, metricsURL, fd.machines(o.n), o.timeout, replace)
		if err != nil {
			return res, err
		}
		res.restart, res.upgraded = &r, p.upgrade
		if _, before.restartCPU, err = processUsage(tb.ManagerPID()); err != nil {
			return res, err
		}
	}
	if err := requireNoSwapping(swapAtStart); err != nil {
		return res, err
	}
	// Printed now: at thousands of machines a failure later in the run would lose what took the
	// standing window to measure.
	fmt.Println("   with all machines running:" + res.platform())

	counts, err := watchCounts(ctx, deletionKinds(fd, tb))
	if err != nil {
		return res, err
	}
	defer counts.stop()
	start = time.Now()
	if prof != nil {
		prof.startCPU(ctx, "delete")
	}
	progress := sampleDeletion(ctx, tb, counts)
	if err := fd.deleteAll(ctx, tb); err != nil {
		return res, err
	}
	if err := waitFor(ctx, o.timeout, tb, func() (bool, error) { return fd.gone(ctx, tb, counts) }); err != nil {
		return res, fmt.Errorf("waiting for deletion: %w", err)
	}
	res.toDeleted = time.Since(start)
	res.deletion = progress.finish()
	if fams, err := scrape(ctx, http.DefaultClient, "http://"+metricsAddr+"/metrics"); err == nil {
		res.deletionReconciles = reconcileCount(fams, fd.queue()) - res.obs.reconcilesAtEnd
	}
	res.rss = rss.finish()
	if prof != nil {
		prof.heap(ctx, "deleted")
		if err := prof.wait(); err != nil {
			return res, err
		}
	}
	if err := leftOnHarvester(ctx, tb, fd.harvesterPrefix(), start, &res); err != nil {
		return res, err
	}
	mgmtWritesAtEnd, err := apiServerWrites(ctx, tb.MgmtConfig)
	if err != nil {
		return res, err
	}
	for k, v := range fd.ownWrites(o.n) {
		mgmtWritesAtEnd[k] -= v
	}
	res.mgmtWrites, res.mgmtWritesAll = describeWrites(mgmtWritesAtStart, mgmtWritesAtEnd, o.n), perMachine(mgmtWritesAtStart, mgmtWritesAtEnd, o.n)
	hvRequestsAtEnd, err := managerHarvesterRequests(ctx, "http://"+metricsAddr+"/metrics")
	if err != nil {
		return res, err
	}
	res.hvRequests = describeWrites(hvRequestsAtStart, hvRequestsAtEnd, o.n)
	hvWritesAtEnd, err := harvesterWrites(ctx, tb)
	if err != nil {
		return res, err
	}
	res.hvWrites, res.hvWritesAll = describeWrites(hvWritesAtStart, hvWritesAtEnd, o.n), perMachine(hvWritesAtStart, hvWritesAtEnd, o.n)

	if res.requests, err = scrapeRequests("http://"+metricsAddr+"/metrics", tb); err != nil {
		return res, err
	}
	if res.peakRSSMB, res.cpuSeconds, err = processUsage(tb.ManagerPID()); err != nil {
		return res, err
	}
	res.peakRSSMB = max(res.peakRSSMB, before.peakRSSMB)
	res.cpuSeconds += before.cpuSeconds - before.restartCPU - res.standing.seconds
	res.notes, err = fd.finish(ctx, tb)
	return res, err
}

// machineRequests is the front door of the MachineRequest runs: n MachineRequests created at
// once, with a small cloud-config as userData or none, and deleted all together.
type machineRequests struct {
	userData bool
	// spread is how long the creates, and the deletes, are spread over (0: all at once).
	spread time.Duration
	// n is how many were created with spread, for deleteAll.
	n int
	// collectionDeletes counts deleteAll's requests to delete the collection (see deleteAll).
	collectionDeletes int
	seen              *ipSeen
	stopWatch         func()
}

func (m *machineRequests) queue() string { return "machinerequest" }

func (m *machineRequests) prepare(ctx context.Context, tb *testbed.Testbed) (err error) {
	m.seen, m.stopWatch, err = watchIPs(ctx, tb)
	return err
}

func (m *machineRequests) close() {
	if m.stopWatch != nil {
		m.stopWatch()
	}
}

// create creates the n MachineRequests, all at once or, with spread, machine i at i/n of it.
func (m *machineRequests) create(ctx context.Context, tb *testbed.Testbed, n int) error {
	if m.spread <= 0 {
		return createAll(ctx, tb, n, m.userData)
	}
	m.n = n
	return spreadOut(ctx, n, m.spread, func(i int) error { return createMachineRequest(ctx, tb, i, m.userData) })
}

// spreadOut calls do for 0..n-1, i at spreadAt(i, n, spread) from now.
func spreadOut(ctx context.Context, n int, spread time.Duration, do func(i int) error) error {
	start := time.Now()
	for i := range n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(start.Add(spreadAt(i, n, spread)))):
		}
		if err := do(i); err != nil {
			return err
		}
	}
	return nil
}

// spreadAt is when machine i of n is created (or deleted), from the first, when they are spread
// evenly over spread.
func spreadAt(i, n int, spread time.Duration) time.Duration {
	return spread * time.Duration(i) / time.Duration(n)
}

func (m *machineRequests) running() int { return m.seen.count() }

func (m *machineRequests) afterRunning(tb *testbed.Testbed) []time.Duration {
	return sinceIPReported(tb, m.seen.snapshot())
}

// deleteAll deletes the MachineRequests, all at once (deleteCollection) or, with spread, one after
// another.
func (m *machineRequests) deleteAll(ctx context.Context, tb *testbed.Testbed) error {
	if m.spread <= 0 {
		var err error
		m.collectionDeletes, err = deleteCollection(ctx, tb.Mgmt, &v1alpha1.MachineRequest{}, client.InNamespace(testbed.Namespace))
		return err
	}
	return spreadOut(ctx, m.n, m.spread, func(i int) error {
		mr := &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.Namespace, Name: machineName(i)}}
		return tb.Mgmt.Delete(ctx, mr)
	})
}

// deleteCollection deletes every obj the options select and returns how many requests that took.
// A collection of thousands takes the API server longer than its request timeout (one minute) to
// mark for deletion: it answers 504, or resets the HTTP/2 stream, and stops where it got to; the
// request is sent again until it completes, at most 10 times.
func deleteCollection(ctx context.Context, c client.Client, obj client.Object, opts ...client.DeleteAllOfOption) (int, error) {
	for sent := 1; ; sent++ {
		err := c.DeleteAllOf(ctx, obj, opts...)
		if !cutShort(err) || sent >= 10 || ctx.Err() != nil {
			return sent, err
		}
	}
}

// cutShort reports whether a request failed by taking longer than the API server lets it: a 504,
// or an error without an API status (the server's timeout handler resets an HTTP/2 stream).
func cutShort(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	return apierrors.IsTimeout(err) || !errors.As(err, &status)
}

// gone: no MachineRequest is left (counted() is the first kind counted).
func (m *machineRequests) gone(_ context.Context, _ *testbed.Testbed, counts *deletionCounts) (bool, error) {
	return counts.leftOf(0) == 0, nil
}

func (m *machineRequests) machines(n int) int { return n }

// harvesterPrefix: the whole Harvester namespace is theirs.
func (m *machineRequests) harvesterPrefix() string { return "" }

func (m *machineRequests) counted(tb *testbed.Testbed) countedKind {
	return countedKind{what: "MachineRequests", config: tb.MgmtConfig, namespace: testbed.Namespace, resource: v1alpha1.GroupVersion.WithResource("machinerequests")}
}

// ownWrites: the creates, and the deletes of the collection (with spread, one delete each).
func (m *machineRequests) ownWrites(n int) map[string]float64 {
	if m.spread > 0 {
		return map[string]float64{"POST machinerequests": float64(n), "DELETE machinerequests": float64(n)}
	}
	return map[string]float64{"POST machinerequests": float64(n), "DELETECOLLECTION machinerequests": float64(max(1, m.collectionDeletes))}
}

func (m *machineRequests) finish(context.Context, *testbed.Testbed) (string, error) { return "", nil }

// sinceIPReported returns, per machine (VM) name, the delay from its VMI reporting its IP to the
// time given.
func sinceIPReported(tb *testbed.Testbed, at map[string]time.Time) []time.Duration {
	var out []time.Duration
	for name, t := range at {
		if reported := ipReportedAt(tb, name); !reported.IsZero() {
			out = append(out, t.Sub(reported))
		}
	}
	return out
}

// ipReportedAt is when the VMI of the machine (VM) of that name reported its IP, on whichever
// Harvester cluster it runs; zero if none has.
func ipReportedAt(tb *testbed.Testbed, name string) time.Time {
	for _, hv := range tb.Harvesters {
		if reported := hv.Sim.IPReportedAt(testbed.HarvesterNamespace, name); !reported.IsZero() {
			return reported
		}
	}
	return time.Time{}
}

// startSeeded starts a testbed for the scenario (its boot and IP delays, room for 4000 machines)
// and seeds it; opts gives the work directory and the manager, if any. Stop it also after an error.
func startSeeded(ctx context.Context, o options, sc scenario, opts testbed.Options) (*testbed.Testbed, error) {
	opts.RepoRoot = o.repoRoot
	opts.NetworkCIDR = networkFor(o.n, o.harvesters)
	opts.Sim = sim.Config{BootDelay: sc.boot, IPDelay: sc.ip, LegacyImageStorageClassNames: o.legacyImageStorageClassNames}
	opts.Schema = o.schema
	opts.Harvesters = o.harvesters
	tb, err := testbed.Start(ctx, opts)
	if err != nil {
		return tb, err
	}
	return tb, tb.Seed(ctx)
}

// startSeededWithClusterAPI is startSeeded with the Cluster API core manager running too.
func startSeededWithClusterAPI(ctx context.Context, o options, sc scenario, opts testbed.Options) (*testbed.Testbed, error) {
	var err error
	if opts.ClusterAPI, err = clusterAPIAssets(ctx, o.repoRoot); err != nil {
		return &testbed.Testbed{}, err // nothing started: stopping it does nothing
	}
	if sc.staticAddresses {
		opts.CRDDirectories = append(opts.CRDDirectories, testbed.InClusterIPPoolCRDs(o.repoRoot))
	}
	return startSeeded(ctx, o, sc, opts)
}

// waitProviderConfigReady waits until the ProviderConfig of every Harvester cluster is Ready.
func waitProviderConfigReady(ctx context.Context, tb *testbed.Testbed) error {
	return waitFor(ctx, time.Minute, tb, func() (bool, error) {
		for k := range tb.Harvesters {
			pc := &v1alpha1.ProviderConfig{}
			err := tb.Mgmt.Get(ctx, client.ObjectKey{Namespace: testbed.Namespace, Name: providerConfigName(k)}, pc)
			if err != nil || !pc.Status.Ready {
				return false, client.IgnoreNotFound(err)
			}
		}
		return true, nil
	})
}

// createAll creates n MachineRequests from 8 goroutines, as a bootstrap controller would, with a
// small cloud-config as userData or none.
func createAll(ctx context.Context, tb *testbed.Testbed, n int, userData bool) error {
	return forEachMachine(n, func(i int) error { return createMachineRequest(ctx, tb, i, userData) })
}

// createMachineRequest creates machine i's MachineRequest, as a user does: the first three
// control plane nodes, the others workers.
func createMachineRequest(ctx context.Context, tb *testbed.Testbed, i int, userData bool) error {
	role := v1alpha1.MachineRoleWorker
	if i < 3 {
		role = v1alpha1.MachineRoleControlPlane
	}
	name := machineName(i)
	mr := &v1alpha1.MachineRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testbed.Namespace},
		Spec: v1alpha1.MachineRequestSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: providerConfigOf(i, len(tb.Harvesters))},
			MachineName: name, Role: role, CPU: 4, MemoryMB: 8192, DiskGB: 50,
		},
	}
	if userData {
		mr.Spec.UserData = "#cloud-config\nhostname: " + name + "\n"
	}
	return tb.Mgmt.Create(ctx, mr)
}

// machineName is the name of machine i, of its MachineRequest and of its objects on Harvester.
func machineName(i int) string { return fmt.Sprintf("bench-%04d", i) }

func waitFor(ctx context.Context, timeout time.Duration, tb *testbed.Testbed, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := tb.ManagerExited(); err != nil {
			return err
		}
		if tb.ClusterAPI != nil {
			if err := tb.ClusterAPI.Exited(); err != nil {
				return err
			}
		}
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ipSeen records when each object (a machine, by name) first reached a milestone (a
// MachineRequest showed an IP, ...), as an informer sees it.
type ipSeen struct {
	mu sync.Mutex
	at map[string]time.Time // machine name -> time
}

func (s *ipSeen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at)
}

func (s *ipSeen) snapshot() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.at))
	for k, v := range s.at {
		out[k] = v
	}
	return out
}

func (s *ipSeen) first(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, seen := s.at[name]; !seen {
		s.at[name] = time.Now()
	}
}

func watchIPs(ctx context.Context, tb *testbed.Testbed) (*ipSeen, func(), error) {
	return watchFirst(ctx, tb.MgmtConfig, tb.Mgmt.Scheme(), testbed.Namespace, &v1alpha1.MachineRequest{}, func(obj any) (string, bool) {
		mr, ok := obj.(*v1alpha1.MachineRequest)
		if !ok {
			return "", false
		}
		return mr.Spec.MachineName, mr.Status.Phase == v1alpha1.MachinePhaseRunning && mr.Status.IPAddress != ""
	})
}

// watchFirst records when each object of obj's kind in namespace is first seen done, as an
// informer sees it; done names the object and says whether it is.
func watchFirst(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, namespace string, obj client.Object, done func(any) (string, bool)) (*ipSeen, func(), error) {
	seen, stop, err := watchMilestones(ctx, cfg, scheme, namespace, obj, []string{"done"}, func(o any, deleted bool) (string, []string) {
		if name, ok := done(o); ok && !deleted {
			return name, []string{"done"}
		}
		return "", nil
	})
	if err != nil {
		return nil, nil, err
	}
	return seen["done"], stop, nil
}

// watchMilestones records when each object of obj's kind in namespace first reaches each of the
// milestones named, as an informer sees it; reached names the object and the milestones it has
// reached, deleted saying that the informer saw it go.
func watchMilestones(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, namespace string, obj client.Object, milestones []string, reached func(obj any, deleted bool) (string, []string)) (map[string]*ipSeen, func(), error) {
	seen := map[string]*ipSeen{}
	for _, m := range milestones {
		seen[m] = &ipSeen{at: map[string]time.Time{}}
	}
	c, err := ctrlcache.New(cfg, ctrlcache.Options{Scheme: scheme, DefaultNamespaces: map[string]ctrlcache.Config{namespace: {}}})
	if err != nil {
		return nil, nil, err
	}
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return nil, nil, err
	}
	record := func(obj any, deleted bool) {
		if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		name, reachedNow := reached(obj, deleted)
		for _, m := range reachedNow {
			seen[m].first(name)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { record(o, false) },
		UpdateFunc: func(_, o any) { record(o, false) },
		DeleteFunc: func(o any) { record(o, true) },
	}); err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { _ = c.Start(cctx) }()
	if !c.WaitForCacheSync(cctx) {
		cancel()
		return nil, nil, fmt.Errorf("%T informer did not sync", obj)
	}
	return seen, cancel, nil
}

// processUsage reads the manager's peak RSS and CPU time from /proc.
func processUsage(pid int) (rssMB, cpuSeconds float64, err error) {
	if rssMB, err = residentMB(pid, "VmHWM:"); err != nil {
		return 0, 0, err
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command name (which may contain spaces) start after the last ')'.
	fields := strings.Fields(string(stat)[strings.LastIndexByte(string(stat), ')')+2:])
	var utime, stime float64
	_, _ = fmt.Sscanf(fields[11], "%f", &utime) // the kernel writes these; a parse failure leaves 0
	_, _ = fmt.Sscanf(fields[12], "%f", &stime)
	return rssMB, (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

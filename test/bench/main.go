// Command bench measures the provider end to end on the testbed (management API server, simulated
// Harvester, manager process): N MachineRequests created at once, with zero boot delay, with a
// realistic one and without userData; then a Cluster API MachineDeployment of N through the real
// Cluster API core manager (clusterapi.go). It reports the wall time to all Running, the delay
// from a VMI reporting its IP to the machine showing Running, API requests per machine to each
// cluster (the manager's, from client-go's request metrics, and all clients', from the API
// servers' metrics), the manager's peak RSS and CPU time, and the time to delete everything with
// nothing left. `make bench` runs it (N=100; N=1000 works too); -runs and -only choose the runs.
// `make bench-published` runs the published provider side by side (published.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

type options struct {
	n                 int
	realisticBoot     time.Duration
	realisticIP       time.Duration
	concurrency       int
	harvesterQPS      int
	kubeQPS           int
	timeout           time.Duration
	workDir, repoRoot string
	report            string
	profileDir        string
	runs              int
	repeat            int
	only              string
	direct            bool
	// spread spreads the MachineRequests' creates, and their deletes, over this long (see
	// machineRequests.create and deleteAll).
	spread time.Duration
	// harvesters is how many simulated Harvester clusters the runs spread their machines over,
	// one ProviderConfig each (scale.go; clusterapi.go for the Cluster API runs).
	harvesters int
	// standing is how long the manager is watched with all machines running and nothing asked
	// of it; restart kills and starts it again once all run (scale.go).
	standing time.Duration
	restart  bool
	// upgradeFrom is a manager the runs start with, replaced by this repository's once all
	// machines run (upgradeFromLabel names it, upgradeFromPublished says it is the published
	// provider, with its flags).
	upgradeFrom, upgradeFromLabel string
	upgradeFromPublished          bool
	// The world and the other provider of make bench-published (see published.go).
	schema                       string
	legacyImageStorageClassNames bool
	publishedManager             string
	publishedCommit              string
}

func main() {
	o := options{}
	flag.IntVar(&o.n, "n", 100, "MachineRequests per run.")
	flag.DurationVar(&o.realisticBoot, "realistic-boot-delay", 20*time.Second, "Boot delay of the realistic run.")
	flag.DurationVar(&o.realisticIP, "realistic-ip-delay", 5*time.Second, "Guest-agent IP delay of the realistic run.")
	flag.IntVar(&o.concurrency, "max-concurrent-reconciles", 0, "Passed to the manager (0: its default).")
	flag.IntVar(&o.harvesterQPS, "harvester-qps", 0, "Passed to the manager, with burst twice as large (0: its default).")
	flag.IntVar(&o.kubeQPS, "kube-api-qps", 0, "Passed to the manager, with burst twice as large (0: its default).")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "Give up a run after this long.")
	flag.StringVar(&o.workDir, "work-dir", ".bench", "Directory for kubeconfigs, the manager binary and its log.")
	flag.StringVar(&o.repoRoot, "repo", ".", "Root of the repository.")
	flag.StringVar(&o.report, "report", ".bench/report.md", "Markdown file the results are added to, relative to -repo (empty: none). The default is in the work directory, which git ignores: figures worth keeping go into docs by hand, with the commit they were measured at.")
	flag.StringVar(&o.profileDir, "profile-dir", "", "If set, the first run writes CPU profiles of both API servers, the manager and the simulator, taken 5s to 35s after the first create and again after the deletion starts, and the manager's heap when all are Running and when all are deleted, to this directory.")
	flag.IntVar(&o.runs, "runs", 5, "How many of the five runs (zero boot delay, realistic boot, no userData, Cluster API MachineDeployment, the same with static addresses from an IP pool) to do, in that order.")
	flag.IntVar(&o.repeat, "repeat", 1, "Do the chosen runs this many times, one after the other, and print the median of each run's vs floor ratios over the repeats: on a shared 2-CPU machine the floor's own times vary by 10% and more from one run to the next, as much as the margins measured.")
	flag.StringVar(&o.only, "only", "", "If set, do only the runs among those -runs chooses whose names contain this (case-insensitive), e.g. -only 'cluster api'.")
	flag.DurationVar(&o.spread, "spread", 0, "Create the MachineRequests one after another over this long instead of all at once, and delete them so (the runs of MachineRequests only, not their direct twins or floors: use -direct=false), e.g. at the pace Cluster API core hands a MachineDeployment's machines to the provider and takes them back: what the provider costs per machine when its machines come and go a few at a time.")
	flag.IntVar(&o.harvesters, "harvesters", 1, "Simulated Harvester clusters the runs spread their machines over, one ProviderConfig each (their direct twin and floors too): a platform of several sites. MachineRequests go round-robin; the Cluster API runs make one Cluster on each, with a MachineDeployment of its share.")
	flag.DurationVar(&o.standing, "standing", standingWindow, "How long the manager is watched while all machines run and nothing is asked of it: its CPU, its reads and writes to each cluster and its memory then (30m takes in the periodic health checks and watch renewals).")
	flag.BoolVar(&o.restart, "restart", false, "Once all machines run (and the standing window is over), kill the manager (SIGKILL) and start it again: the time until it has observed every machine again (butler_harvester_machines_observed_total), and its reads and writes until then.")
	flag.StringVar(&o.upgradeFrom, "upgrade-from", "", "A manager binary the runs start with (this repository's at another commit: hack/tools/manager-at.sh; or the published provider's, with -upgrade-from-published): once all machines run it is replaced by this repository's, as a Deployment's rollout does, and the run measures as -restart does. The Cluster API runs need this repository's (the published provider has no Cluster API door).")
	flag.StringVar(&o.upgradeFromLabel, "upgrade-from-label", "another build", "Names the -upgrade-from manager in the report (a commit).")
	flag.BoolVar(&o.upgradeFromPublished, "upgrade-from-published", false, "The -upgrade-from manager is the published provider: its flags, and its readiness by its work queue (needs -schema=butler-api-v0.13.0 -legacy-image-storage-class-names, as make bench-published).")
	flag.BoolVar(&o.direct, "direct", true, "After each run, run its \"direct\" twin (the bench creates the Harvester objects itself, no provider: the machine's physical limit) and print the provider's time over it.")
	flag.StringVar(&o.schema, "schema", "", "Butler's CRDs for the management cluster instead of this project's: one of "+strings.Join(testbed.ButlerSchemas, ", ")+" (test/testdata/butler-crds).")
	flag.BoolVar(&o.legacyImageStorageClassNames, "legacy-image-storage-class-names", false, "Simulate a Harvester v0.3.0 to v1.7.x, which named image storage classes longhorn-<image name> (later versions: lh-<image uid>).")
	flag.StringVar(&o.publishedManager, "published-manager", "", "The published provider's manager binary (make bench-published builds it): each run is then also done with it, after this provider's. Needs -legacy-image-storage-class-names.")
	flag.StringVar(&o.publishedCommit, "published-commit", "", "The commit the published provider was built from, for the report.")
	flag.Parse()
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(io.Discard, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop() // before os.Exit, which skips deferred calls
	if err != nil {
		fmt.Fprintf(os.Stdout, "\nBENCHMARK FAILED: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run 'make bench', which builds kube-apiserver and etcd first")
	}
	work, err := filepath.Abs(o.workDir)
	if err != nil {
		return err
	}
	var results []result
	var comparisons []string
	scenarios := []scenario{
		{name: "zero boot delay", boot: 0, ip: 0},
		{name: fmt.Sprintf("boot %s + IP %s", o.realisticBoot, o.realisticIP), boot: o.realisticBoot, ip: o.realisticIP},
		{name: "zero boot delay, no userData", noUserData: true},
		{name: "Cluster API MachineDeployment, zero boot delay", clusterAPI: true},
		{name: "Cluster API MachineDeployment, static addresses from an IP pool, zero boot delay", clusterAPI: true, staticAddresses: true},
	}
	if o.runs < 1 || o.runs > len(scenarios) {
		return fmt.Errorf("-runs must be 1 to %d", len(scenarios))
	}
	chosen := chooseScenarios(scenarios[:o.runs], o.only)
	if len(chosen) == 0 {
		return fmt.Errorf("-only %q matches none of the runs -runs=%d chooses", o.only, o.runs)
	}
	for i := range chosen {
		if o.spread > 0 && !chosen[i].clusterAPI {
			chosen[i].name += fmt.Sprintf(", creates and deletes spread over %s", o.spread)
		}
	}
	published, withPublished := o.publishedProvider()
	if withPublished && !o.legacyImageStorageClassNames {
		return errors.New("-published-manager needs -legacy-image-storage-class-names: the published provider asks for the storage class longhorn-<image name>, which a Harvester from v1.8.0 refuses (make bench-published sets both)")
	}
	if o.repeat < 1 {
		return errors.New("-repeat must be at least 1")
	}
	if o.harvesters < 1 || o.standing <= 0 {
		return errors.New("-harvesters must be at least 1 and -standing positive")
	}
	repeats := make([]repeatedMargins, len(chosen))
	for i := range o.repeat * len(chosen) {
		sc := chosen[i%len(chosen)]
		fmt.Printf("== N=%d, %s\n", o.n, sc.name)
		dir := filepath.Join(work, fmt.Sprintf("run-%d", i+1))
		p := thisProvider
		if up, ok := o.upgradedProvider(); ok && (!sc.clusterAPI || !o.upgradeFromPublished) {
			p = up
		}
		r, err := runScenario(ctx, o, sc, dir, p)
		o.profileDir = "" // profiles of the first run only
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		results = append(results, r)
		fmt.Println(r.summary())
		var d directResult
		if o.direct {
			if d, err = runDirect(ctx, o, sc, dir); err != nil {
				return fmt.Errorf("%s, direct: %w", sc.name, err)
			}
			fmt.Printf("   direct: all Running in %s, deleted in %s, %d objects left; %s\n   direct, until all Running: CPU %s\n   direct deletion: %s\n   direct, Harvester API server writes per machine (the direct provider and the simulator): %s\n   %s\n", d.toRunning.Round(10*time.Millisecond), d.toDeleted.Round(10*time.Millisecond), d.left, d.providerCPUPerMachine(o.n), d.createCPU, d.deletion, d.hvWrites, d.floorLine(o.n))
			comparisons = append(comparisons, compareWithDirect(r, d))
			if m, err := floorMarginOf(r, d); err == nil {
				rep := &repeats[i%len(chosen)]
				rep.name, rep.margins = r.runName(), append(rep.margins, m)
			}
		}
		if withPublished && !sc.clusterAPI { // the published provider has no Cluster API front door
			p, err := runPublished(ctx, o, sc, dir, published)
			if err != nil {
				return err
			}
			results = append(results, p)
			if o.direct {
				comparisons = append(comparisons, compareWithDirect(p, d))
			}
		}
	}
	table := renderTable(o, results)
	if len(comparisons) > 0 {
		table += "\n" + strings.Join(comparisons, "\n") + "\n"
	}
	if o.repeat > 1 {
		var medians []string
		for _, r := range repeats {
			if len(r.margins) > 0 {
				medians = append(medians, r.summary())
			}
		}
		if len(medians) > 0 {
			table += "\n" + strings.Join(medians, "\n") + "\n"
		}
	}
	fmt.Println()
	fmt.Print(table)
	if o.report != "" {
		return appendReport(filepath.Join(o.repoRoot, o.report), table)
	}
	return nil
}

// chooseScenarios returns the scenarios whose names contain only (case-insensitive), all if only
// is empty.
func chooseScenarios(scenarios []scenario, only string) []scenario {
	var out []scenario
	for _, sc := range scenarios {
		if strings.Contains(strings.ToLower(sc.name), strings.ToLower(only)) {
			out = append(out, sc)
		}
	}
	return out
}

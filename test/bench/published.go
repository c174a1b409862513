package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The published provider side by side (make bench-published): -published-manager names its
// manager binary (hack/tools/published-provider.sh builds it from its source), and each scenario
// then runs with it too, after this provider's, in the same world: a Harvester that names image
// storage classes as v1.7 and earlier did (-legacy-image-storage-class-names; the published
// provider guesses longhorn-<image name>, so on a newer Harvester every root disk it asks for is
// refused) and Butler's CRDs (-schema). It is kubebuilder's scaffold: its metrics are
// controller-runtime's alone (what this provider adds is reported "n/a"), it has no pprof and no
// tuning flags, and it does not report whether a ProviderConfig is usable.

// provider is the manager a run measures.
type provider struct {
	// label names its results ("" for this provider).
	label string
	// binary is a prebuilt manager; "" builds this repository's cmd/manager.
	binary string
	// ourFlags is set for a prebuilt manager of this repository (another commit's), which takes
	// this provider's flags and says when it is ready as this provider does.
	ourFlags bool
	// upgrade replaces it with this repository's manager once all machines run (-upgrade-from).
	upgrade bool
}

// thisProvider is the provider of this repository.
var thisProvider = provider{}

func (p provider) ours() bool { return p.binary == "" }

// upgradedProvider is the manager -upgrade-from names, if any: the runs start with it and replace
// it with this repository's once all machines run.
func (o options) upgradedProvider() (provider, bool) {
	if o.upgradeFrom == "" {
		return provider{}, false
	}
	return provider{label: "upgraded from " + o.upgradeFromLabel, binary: o.upgradeFrom, ourFlags: !o.upgradeFromPublished, upgrade: true}, true
}

// publishedProvider is the published provider given by -published-manager, if any.
func (o options) publishedProvider() (provider, bool) {
	if o.publishedManager == "" {
		return provider{}, false
	}
	label := "published provider"
	if o.publishedCommit != "" {
		label += " " + o.publishedCommit[:min(7, len(o.publishedCommit))]
	}
	return provider{label: label, binary: o.publishedManager}, true
}

// managerArgs are the manager's flags: metrics over plain HTTP on metricsAddr, nothing logged
// below warnings; for this provider also pprof on pprofAddr (if not empty) and the tuning flags.
func (p provider) managerArgs(o options, metricsAddr, pprofAddr string) []string {
	if !p.ours() && !p.ourFlags {
		// controller-runtime's zap knows no warn level; the published provider logs nothing between
		// info and error anyway.
		return []string{"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false", "--health-probe-bind-address=0", "--zap-log-level=error"}
	}
	args := []string{"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false", "--log-level=warn"}
	if pprofAddr != "" {
		args = append(args, "--pprof-bind-address="+pprofAddr)
	}
	if o.concurrency > 0 {
		args = append(args, fmt.Sprintf("--max-concurrent-reconciles=%d", o.concurrency))
	}
	if o.harvesterQPS > 0 {
		args = append(args, fmt.Sprintf("--harvester-qps=%d", o.harvesterQPS), fmt.Sprintf("--harvester-burst=%d", 2*o.harvesterQPS))
	}
	if o.kubeQPS > 0 {
		args = append(args, fmt.Sprintf("--kube-api-qps=%d", o.kubeQPS), fmt.Sprintf("--kube-api-burst=%d", 2*o.kubeQPS))
	}
	return args
}

// waitReady waits until the manager can take MachineRequests: this provider says so in the
// ProviderConfig's status; the published provider says nothing, so the bench waits for its
// MachineRequest controller to have started (its work queue shows in the metrics once it watches
// MachineRequests; the first list of an empty namespace follows within milliseconds).
func (p provider) waitReady(ctx context.Context, tb *testbed.Testbed, metricsURL string) error {
	if p.ours() || p.ourFlags {
		return waitProviderConfigReady(ctx, tb)
	}
	return waitFor(ctx, time.Minute, tb, func() (bool, error) {
		fams, err := scrape(ctx, http.DefaultClient, metricsURL)
		return err == nil && len(matching(fams["workqueue_depth"], "name", "machinerequest")) > 0, nil
	})
}

// runPublished runs the scenario with the published provider and prints what it measured as for
// this provider.
func runPublished(ctx context.Context, o options, sc scenario, work string, p provider) (result, error) {
	fmt.Printf("== N=%d, %s, %s\n", o.n, sc.name, p.label)
	r, err := runScenario(ctx, o, sc, filepath.Join(work, "published"), p)
	if err != nil {
		return r, fmt.Errorf("%s, %s: %w", sc.name, p.label, err)
	}
	fmt.Println(r.summary())
	return r, nil
}

// world says, for the report, what the runs ran on when it is not the default: Butler's CRDs,
// a Harvester of older storage class names, the published provider's commit.
func (o options) world() string {
	var parts []string
	if o.schema != "" {
		parts = append(parts, "management cluster with Butler's CRDs ("+o.schema+", test/testdata/butler-crds)")
	}
	if o.legacyImageStorageClassNames {
		parts = append(parts, "simulated Harvester naming image storage classes longhorn-<image name> as v0.3.0 to v1.7.x did")
	}
	if p, ok := o.publishedProvider(); ok {
		parts = append(parts, p.label+" built from its source at "+o.publishedCommit)
	}
	if len(parts) == 0 {
		return ""
	}
	return "Setup: " + strings.Join(parts, "; ") + ".\n\n"
}

// runName names a result's run in the report: the scenario, and the provider if not this one.
func (r result) runName() string {
	if r.provider == "" {
		return r.scenario.name
	}
	return r.scenario.name + ", " + r.provider
}

// settleTime is how long the Harvester namespace may take to empty once the last MachineRequest
// is gone: a VM whose deletion a provider has asked for is still removing its VMI, and the
// garbage collector deletes Secrets a while later. What is left after it is left for good.
const settleTime = 30 * time.Second

// leftOnHarvester records in res the objects of the machines whose names begin with prefix left
// in the Harvester namespace once it has settled, and when none were, from deleting: a provider
// may let a MachineRequest go before Harvester has removed what it had (the published provider
// does).
func leftOnHarvester(ctx context.Context, tb *testbed.Testbed, prefix string, deleting time.Time, res *result) error {
	deadline := time.Now().Add(settleTime)
	for {
		vms, vmis, pvcs, secrets, err := tb.HarvesterLeftOf(ctx, prefix)
		if err != nil {
			return err
		}
		if res.left = vms + vmis + pvcs + secrets; res.left == 0 {
			res.emptied = time.Since(deleting)
			return nil
		}
		if time.Now().After(deadline) {
			res.leftWhat = fmt.Sprintf("VMs %d, VMIs %d, PVCs %d, Secrets %d", vms, vmis, pvcs, secrets)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leftIn renders what was left on Harvester.
func (r result) leftIn() string {
	if r.left == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", r.left, r.leftWhat)
}

// deletedIn is the time to delete all MachineRequests, and when the Harvester namespace was empty
// if that was over a second later (or never): the namespace is listed every 200 ms, and each list
// takes a while on a busy machine.
func (r result) deletedIn() string {
	d := r.toDeleted.Round(10 * time.Millisecond).String()
	switch {
	case r.emptied == 0:
		return fmt.Sprintf("%s (Harvester not empty %s later)", d, settleTime)
	case r.emptied-r.toDeleted > time.Second:
		return fmt.Sprintf("%s (Harvester empty after %s)", d, r.emptied.Round(10*time.Millisecond))
	}
	return d
}

// orNA renders a figure the manager may not expose: "n/a" when it does not.
func orNA(d time.Duration, exposed bool) string {
	if !exposed {
		return "n/a"
	}
	return d.Round(time.Millisecond).String()
}

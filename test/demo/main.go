// Command demo runs the provider end to end with no cluster at hand: it starts a management API
// server and a simulated Harvester (both real kube-apiservers, built from Go modules), runs the
// manager binary against them, creates the samples of config/samples as the Butler bootstrap would
// (the ImageSync first, then the machines from its image), shows the machines come up, deletes
// them and shows that nothing is left on Harvester but the image. It exits 0 only if all of that
// happened. `make demo` runs it; KUBEBUILDER_ASSETS must point at kube-apiserver and etcd.
//
// With --capi (`make demo-capi`) it shows the Cluster API door instead (capi.go): the real Cluster
// API core manager (CAPI_ASSETS must point at what hack/tools/capi.sh builds) creates a tenant
// cluster that the real clusterctl rendered from the hosted flavour, scales it and deletes it.
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
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

type options struct {
	keep       bool
	capi       bool
	static     bool
	timeout    time.Duration
	bootDelay  time.Duration
	ipDelay    time.Duration
	cloneDelay time.Duration
	gcDelay    time.Duration
	workDir    string
	repoRoot   string
}

func main() {
	o := options{}
	flag.BoolVar(&o.capi, "capi", false, "The Cluster API door instead (make demo-capi): the real Cluster API core manager and clusterctl (CAPI_ASSETS, from hack/tools/capi.sh), a tenant cluster of the hosted flavour with a MachineDeployment of 3 workers, scaled to 1, then deleted.")
	flag.BoolVar(&o.static, "static-addresses", false, "With --capi: the workers take their addresses from an InClusterIPPool through Cluster API's IPAM contract (the in-cluster IPAM provider played), not from DHCP.")
	flag.BoolVar(&o.keep, "keep", false, "Leave both control planes, the simulator and the manager running once the machines are Running, and print how to explore them (Ctrl-C ends).")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "Give up if the machines are not all Running, or not all deleted, within this time.")
	flag.DurationVar(&o.cloneDelay, "clone-delay", 5*time.Second, "Simulated time Longhorn takes to clone the image into a VM's root disk (the disk is Pending meanwhile).")
	flag.DurationVar(&o.bootDelay, "boot-delay", 3*time.Second, "Simulated time from the VM's virt-launcher pod starting to the VM running.")
	flag.DurationVar(&o.ipDelay, "ip-delay", 2*time.Second, "Simulated time from the VM running to the guest agent reporting its IP.")
	flag.DurationVar(&o.gcDelay, "gc-delay", 2*time.Second, "Simulated time the garbage collector takes to delete a deleted VM's cloud-init Secret.")
	flag.StringVar(&o.workDir, "work-dir", ".demo", "Directory for the kubeconfigs, the manager binary and its log.")
	flag.StringVar(&o.repoRoot, "repo", ".", "Root of the repository (CRDs and samples are read from there).")
	flag.Parse()

	// Quiet the libraries: the demo prints what matters, the manager logs to its own file.
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(io.Discard, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stdout)
	stop() // before os.Exit, which skips deferred calls
	if err != nil {
		fmt.Fprintf(os.Stdout, "\nDEMO FAILED: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return errors.New("KUBEBUILDER_ASSETS is not set: run the demo with 'make demo', which builds kube-apiserver and etcd first")
	}
	start := time.Now()
	if o.capi {
		return runCAPI(ctx, o, &demo{o: o, out: out, start: start})
	}
	work, err := filepath.Abs(o.workDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o750); err != nil {
		return err
	}
	d := &demo{o: o, out: out, start: start}
	d.tb, err = testbed.Start(ctx, testbed.Options{
		RepoRoot: o.repoRoot, WorkDir: work,
		Sim:         sim.Config{BootDelay: o.bootDelay, IPDelay: o.ipDelay, ImportDelay: time.Second, CloneDelay: o.cloneDelay, GCDelay: o.gcDelay},
		ManagerArgs: []string{"--metrics-bind-address=0"},
		Progress:    d.say,
	})
	defer d.tb.Stop()
	if err != nil {
		return err
	}
	d.say("Creating the Harvester side (network, image), the credentials Secret from the simulated Harvester's kubeconfig, and the ButlerConfig with an image factory ...")
	if err := d.tb.Seed(ctx); err != nil {
		return err
	}
	d.say("Creating the ProviderConfig and the ImageSync (config/samples), and waiting for the image, as the Butler bootstrap does ...")
	image, err := d.syncImage(ctx)
	if err != nil {
		return err
	}
	writes, err := d.countStatusWrites(ctx)
	if err != nil {
		return err
	}
	d.say("Creating the MachineRequests (config/samples) with spec.image %s, the ImageSync's status.providerImageRef ...", image)
	if err := d.createMachines(ctx, image); err != nil {
		return err
	}
	d.say("Waiting for the machines to be Running")
	if err := d.waitRunning(ctx); err != nil {
		return err
	}
	untilRunning := writes.sofar()
	if err := d.showAll(ctx); err != nil {
		return err
	}
	if o.keep {
		d.explain()
		<-ctx.Done()
		return nil
	}
	d.say("Deleting the MachineRequests")
	if err := d.deleteAll(ctx); err != nil {
		return err
	}
	if err := d.checkHarvesterEmpty(ctx); err != nil {
		return err
	}
	if err := d.reportCounts(ctx, writes, untilRunning); err != nil {
		return err
	}
	d.say("Demo passed in %s.", time.Since(start).Round(100*time.Millisecond))
	return nil
}

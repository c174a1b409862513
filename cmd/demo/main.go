// Command demo runs the provider end to end with no cluster at hand: it starts a management API
// server and a simulated Harvester (both real kube-apiservers, built from Go modules), runs the
// manager binary against them, creates the samples of config/samples, shows the machines come up,
// deletes them and shows that nothing is left on Harvester. It exits 0 only if all of that
// happened. `make demo` runs it; KUBEBUILDER_ASSETS must point at kube-apiserver and etcd.
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

	"github.com/butlerdotdev/butler-provider-harvester/internal/sim"
	"github.com/butlerdotdev/butler-provider-harvester/internal/testbed"
)

type options struct {
	keep      bool
	timeout   time.Duration
	bootDelay time.Duration
	ipDelay   time.Duration
	workDir   string
	repoRoot  string
}

func main() {
	o := options{}
	flag.BoolVar(&o.keep, "keep", false, "Leave both control planes, the simulator and the manager running once the machines are Running, and print how to explore them (Ctrl-C ends).")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "Give up if the machines are not all Running, or not all deleted, within this time.")
	flag.DurationVar(&o.bootDelay, "boot-delay", 3*time.Second, "Simulated time from VM creation to the VM running.")
	flag.DurationVar(&o.ipDelay, "ip-delay", 2*time.Second, "Simulated time from the VM running to the guest agent reporting its IP.")
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
		Sim:         sim.Config{BootDelay: o.bootDelay, IPDelay: o.ipDelay, ImportDelay: time.Second},
		ManagerArgs: []string{"--metrics-bind-address=0"},
		Progress:    d.say,
	})
	defer d.tb.Stop()
	if err != nil {
		return err
	}
	d.say("Creating the Harvester side (network, image) and the credentials Secret from the simulated Harvester's kubeconfig ...")
	if err := d.tb.Seed(ctx); err != nil {
		return err
	}
	d.say("Creating the samples (config/samples) ...")
	if err := d.createSamples(ctx); err != nil {
		return err
	}
	d.say("Waiting for the machines to be Running")
	if err := d.waitRunning(ctx); err != nil {
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
	d.say("Demo passed in %s.", time.Since(start).Round(100*time.Millisecond))
	return nil
}

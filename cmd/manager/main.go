// Command manager runs the butler-provider-harvester controller: it provisions a VM on Harvester
// for every MachineRequest whose ProviderConfig says provider "harvester".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

type options struct {
	metricsAddr, probeAddr       string
	leaderElect                  bool
	leaderElectionID             string
	concurrency                  int
	creatingPoll, healthInterval time.Duration
	recheckInterval              time.Duration
	provisioningTimeout          time.Duration
	ipReportTimeout              time.Duration
	harvesterQPS                 float64
	harvesterBurst               int
	kubeQPS                      float64
	kubeBurst                    int
	logLevel, logFormat          string
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; \"0\" disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "butler-provider-harvester.butler.butlerlabs.dev", "Name of the Lease used for leader election.")
	fs.IntVar(&o.concurrency, "max-concurrent-reconciles", 16, "How many MachineRequests are reconciled in parallel.")
	fs.DurationVar(&o.creatingPoll, "creating-poll-interval", controller.DefaultCreatingPollInterval, "How often a Creating machine is looked at again while waiting for its IP address.")
	fs.DurationVar(&o.healthInterval, "health-check-interval", controller.DefaultHealthCheckInterval, "How often a Running machine's VM is checked on Harvester.")
	fs.DurationVar(&o.provisioningTimeout, "provisioning-timeout", controller.DefaultProvisioningTimeout, "How long a machine may stay Creating before its Degraded condition reports the diagnosis (it keeps waiting).")
	fs.DurationVar(&o.ipReportTimeout, "ip-report-timeout", controller.DefaultIPReportTimeout, "How long a running VM may go without reporting an IPv4 address before the diagnosis points at the guest agent and DHCP.")
	fs.DurationVar(&o.recheckInterval, "providerconfig-recheck-interval", controller.DefaultRecheckInterval, "How often a ProviderConfig's checks (credentials, image, network, storage, permissions) run again; a changed credentials Secret is noticed within 30s.")
	fs.Float64Var(&o.harvesterQPS, "harvester-qps", harvester.DefaultQPS, "Requests per second to each Harvester cluster.")
	fs.IntVar(&o.harvesterBurst, "harvester-burst", harvester.DefaultBurst, "Request burst to each Harvester cluster.")
	fs.Float64Var(&o.kubeQPS, "kube-api-qps", 100, "Requests per second to the management cluster's API server.")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", 200, "Request burst to the management cluster's API server.")
	fs.StringVar(&o.logLevel, "log-level", "info", "Log level: debug, info, warn or error.")
	fs.StringVar(&o.logFormat, "log-format", "json", "Log format: json or text.")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return o, nil
}

func newLogger(level, format string) (logr.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return logr.Logger{}, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text":
		return logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, opts)), nil
	default:
		return logr.Logger{}, fmt.Errorf("--log-format: %q is neither json nor text", format)
	}
}

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	logger, err := newLogger(o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("find the management cluster (in-cluster config, or KUBECONFIG): %w", err)
	}
	restConfig.QPS, restConfig.Burst = float32(o.kubeQPS), o.kubeBurst
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// Credentials Secrets are read directly, not through a cache: no cluster-wide Secret watch.
	// Harvester's informers report changes of our objects there through this channel.
	harvesterEvents := make(chan event.GenericEvent, 1024)
	factory := &harvester.CachingFactory{
		SecretReader: mgr.GetAPIReader(), QPS: float32(o.harvesterQPS), Burst: o.harvesterBurst,
		Notify: harvesterEvents, Context: ctx,
	}
	r := &controller.MachineRequestReconciler{
		Client:                  mgr.GetClient(),
		Harvester:               factory,
		HarvesterEvents:         harvesterEvents,
		Recorder:                mgr.GetEventRecorder("butler-provider-harvester"),
		CreatingPollInterval:    o.creatingPoll,
		HealthCheckInterval:     o.healthInterval,
		ProvisioningTimeout:     o.provisioningTimeout,
		IPReportTimeout:         o.ipReportTimeout,
		MaxConcurrentReconciles: o.concurrency,
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("set up controller: %w", err)
	}
	pcr := &controller.ProviderConfigReconciler{
		Client:          mgr.GetClient(),
		SecretReader:    mgr.GetAPIReader(),
		Harvester:       factory,
		Recorder:        mgr.GetEventRecorder("butler-provider-harvester"),
		RecheckInterval: o.recheckInterval,
	}
	if err := pcr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up ProviderConfig controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("caches have not synced")
		}
		return nil
	}); err != nil {
		return err
	}
	logger.Info("Starting manager")
	return mgr.Start(ctx)
}

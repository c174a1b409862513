// Command manager runs the butler-provider-harvester controller: it provisions a VM on Harvester
// for every MachineRequest whose ProviderConfig says provider "harvester". Its flags are defined in
// internal/options; `manager --help` lists them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// The secure metrics endpoint checks each scraper's token and permission with the API server.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

func main() {
	err := run(ctrl.SetupSignalHandler(), os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	o, err := options.Parse(args, os.Stderr)
	if err != nil {
		return err
	}
	logger, err := options.NewLogger(o.LogLevel, o.LogFormat, os.Stderr)
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
	restConfig.QPS, restConfig.Burst = float32(o.KubeQPS), o.KubeBurst
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOptions(o),
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Cache:                         cacheOptions(o),
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// Credentials Secrets are read directly, not through a cache: no cluster-wide Secret watch.
	// Harvester's informers report changes of our objects there through this channel.
	harvesterEvents := make(chan event.GenericEvent, 1024)
	factory := &harvester.CachingFactory{
		SecretReader: mgr.GetAPIReader(), QPS: float32(o.HarvesterQPS), Burst: o.HarvesterBurst,
		Notify: harvesterEvents, Context: ctx,
	}
	r := &controller.MachineRequestReconciler{
		Client:                  mgr.GetClient(),
		Harvester:               factory,
		HarvesterEvents:         harvesterEvents,
		Recorder:                mgr.GetEventRecorder("butler-provider-harvester"),
		CreatingPollInterval:    o.CreatingPoll,
		HealthCheckInterval:     o.HealthInterval,
		ProvisioningTimeout:     o.ProvisioningTimeout,
		IPReportTimeout:         o.IPReportTimeout,
		MaxConcurrentReconciles: o.Concurrency,
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("set up controller: %w", err)
	}
	pcr := &controller.ProviderConfigReconciler{
		Client:          mgr.GetClient(),
		SecretReader:    mgr.GetAPIReader(),
		Harvester:       factory,
		Recorder:        mgr.GetEventRecorder("butler-provider-harvester"),
		RecheckInterval: o.RecheckInterval,
	}
	if err := pcr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up ProviderConfig controller: %w", err)
	}
	if err := metrics.RegisterPhaseCollector(ctrlmetrics.Registry, mgr.GetCache(), mgr.Elected()); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		// Answer within the probe's timeout (kubelet's default is 1s) rather than hang until it.
		ctx, cancel := context.WithTimeout(req.Context(), 500*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("caches have not synced (can the manager list MachineRequests and ProviderConfigs?)")
		}
		return nil
	}); err != nil {
		return err
	}
	logger.Info("Starting manager", "watchNamespaces", o.WatchNamespaces, "leaderElect", o.LeaderElect)
	return mgr.Start(ctx)
}

func metricsOptions(o *options.Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsAddr, SecureServing: o.MetricsSecure, CertDir: o.MetricsCertDir}
	if o.MetricsSecure {
		m.FilterProvider = metrics.WithAuthenticationAndAuthorization
	}
	return m
}

func cacheOptions(o *options.Options) cache.Options {
	c := cache.Options{SyncPeriod: &o.SyncPeriod}
	if len(o.WatchNamespaces) > 0 {
		c.DefaultNamespaces = make(map[string]cache.Config, len(o.WatchNamespaces))
		for _, ns := range o.WatchNamespaces {
			c.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return c
}

// Command manager runs the butler-provider-harvester controller: it provisions a VM on Harvester
// for every MachineRequest whose ProviderConfig says provider "harvester". Its flags are defined in
// internal/options; `manager --help` lists them.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	platformv1alpha1 "github.com/butlerdotdev/butler-provider-harvester/api/platform/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/harvesterevents"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/machinerequest"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/setup"
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
	metrics.InstrumentRateLimiter()
	for _, note := range o.FlagNotes {
		logger.Info(note)
	}
	if limit := setMemoryLimit("/sys/fs/cgroup", os.Getenv); limit != "" {
		logger.Info(limit)
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := platformv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := infrav1.AddToScheme(scheme); err != nil {
		return err
	}
	restConfig, err := managementConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = float32(o.KubeQPS), o.KubeBurst
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOptions(o),
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &o.GracefulShutdownTimeout, // then the Lease is released, within the Pod's grace period
		Cache:                         cacheOptions(o),
		// Cluster API's Clusters are read as unstructured (the project does not import Cluster
		// API; its Machines by their metadata): from the informers their watches start anyway,
		// not live on every reconcile, which would cost dozens of reads per machine.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// Credentials Secrets are read directly, not through a cache: no cluster-wide Secret watch.
	// Harvester's informers report changes of our objects there through this channel.
	harvesterEvents := &harvesterevents.HarvesterEvents{}
	recorder := newEventRecorder(mgr, "butler-provider-harvester", logger)
	clusters := harvester.NewClusters(harvesterCache(ctx, o, mgr.GetAPIReader()), harvesterEvents)
	if err := setup.Controllers(ctx, mgr, o, setup.Shared{Harvester: clusters, HarvesterEvents: harvesterEvents, Recorder: recorder}); err != nil {
		return err
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
	if schema, err := machinerequest.InstalledSchema(restConfig); err != nil {
		logger.Info("Could not tell which MachineRequest schema is installed; the provider works with either", "reason", err.Error())
	} else {
		logger.Info("MachineRequest schema installed", "schema", schema,
			"note", "the provider records its finalizer, annotation "+v1alpha1.AnnotationPlacement+" and status.providerID, which every schema keeps")
	}
	logger.Info("Starting manager", "watchNamespaces", o.WatchNamespaces, "leaderElect", o.LeaderElect)
	return mgr.Start(ctx)
}

// managementConfig finds the management cluster: the file of --kubeconfig if given (as
// controller-runtime does with the standard flag set's --kubeconfig, which this manager does not
// parse), else through KUBECONFIG, the in-cluster config or ~/.kube/config.
func managementConfig(kubeconfig string) (*rest.Config, error) {
	c, err := loadManagementConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	// The manager runs beside its API server: gzip would cost CPU on both sides and save
	// bandwidth nobody lacks (kube-controller-manager and kube-scheduler turn it off too). Since
	// Kubernetes v1.37 the API server also compresses the streams of informers (watch-list),
	// each for its watcher: 5 % of the manager's CPU at 1000 machines went to gunzipping them.
	c.DisableCompression = true
	return c, nil
}

func loadManagementConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("find the management cluster (KUBECONFIG, the in-cluster config or --kubeconfig): %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// harvesterCache is the cache of Harvester clients, one per kubeconfig and namespace, each with
// the informers that wake machines when their VMs change. A client nobody asks for is stopped
// after o.HarvesterClientIdleTimeout, which outlasts the longest gap between two checks of a
// running machine: the client of a cluster with machines, and its watches, keep running between
// their checks.
func harvesterCache(ctx context.Context, o *options.Options, secrets client.Reader) *clustercache.Cache {
	return &clustercache.Cache{
		SecretReader: secrets, QPS: float32(o.HarvesterQPS), Burst: o.HarvesterBurst, Context: ctx,
		IdleTimeout: o.HarvesterClientIdleTimeout(),
	}
}

func metricsOptions(o *options.Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsAddr, SecureServing: o.MetricsSecure,
		CertDir: o.MetricsCertDir, CertName: o.MetricsCertName, KeyName: o.MetricsCertKey}
	if o.MetricsSecure {
		m.FilterProvider = metrics.WithAuthenticationAndAuthorization
	}
	if !o.EnableHTTP2 {
		// HTTP/2 is negotiated over TLS only (ALPN): offering just HTTP/1.1 turns it off, and with it
		// HTTP/2's stream-reset floods (CVE-2023-44487, CVE-2023-39325), as kubebuilder's scaffold does.
		m.TLSOpts = append(m.TLSOpts, disableHTTP2)
	}
	return m
}

func disableHTTP2(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }

func cacheOptions(o *options.Options) cache.Options {
	// Nothing reads managedFields: not caching them saves memory per object.
	c := cache.Options{SyncPeriod: &o.SyncPeriod, DefaultTransform: cache.TransformStripManagedFields()}
	if len(o.WatchNamespaces) > 0 {
		c.DefaultNamespaces = make(map[string]cache.Config, len(o.WatchNamespaces))
		for _, ns := range o.WatchNamespaces {
			c.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return c
}

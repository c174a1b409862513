// Package options defines the manager's command-line flags: their names, defaults, help and
// validation. It is a package of its own so that the tests of the Helm chart and the kustomize
// manifests can parse the container args they render with the very flag set the binary uses. It
// imports no controller: the controllers take the names of the flags their advice names, and the
// defaults of the settings flags give them, from here.
package options

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
)

// Flags the controllers name in their messages, where the advice is the platform operator's to
// follow: the manager's flag to set.
const (
	// HandOverFlag names the management clusters whose HarvesterMachines' objects may be handed
	// over (Options.HandOverFrom, clusterapi.HarvesterMachineReconciler.HandOverFrom).
	HandOverFlag = "harvestermachine-hand-over-from"
	// SkipCleanupFlag lets annotation skip-cleanup release a HarvesterCluster or HarvesterMachine
	// whose objects the provider can delete on Harvester (Options.SkipCleanupAnytime, and the
	// SkipCleanupAnytime of clusterapi.HarvesterMachineReconciler and HarvesterClusterReconciler).
	SkipCleanupFlag = "cluster-api-skip-cleanup-anytime"
)

// Defaults of the controllers' intervals and timeouts that flags set. They are the defaults of
// the reconcilers too: a reconciler given none (the tests') uses the flag's default.
const (
	// DefaultCreatingPollInterval is how often a Creating machine whose objects on Harvester are
	// not watched is looked at again (--creating-poll-interval).
	DefaultCreatingPollInterval = 10 * time.Second
	// DefaultWatchedPollInterval is how often a machine whose objects on Harvester are watched is
	// looked at again anyway (--watched-poll-interval).
	DefaultWatchedPollInterval = time.Minute
	// DefaultHealthCheckInterval is how often a Running machine's VM is checked when its
	// objects on Harvester are not watched (--health-check-interval).
	DefaultHealthCheckInterval = 5 * time.Minute
	// DefaultWatchedHealthCheckInterval is how often a Running machine whose VM is watched is
	// checked anyway (--watched-health-check-interval): the watch wakes it when its VM or VMI
	// changes or goes, and an informer that loses its watch lists again and delivers what it
	// missed, so this only catches a notification that was dropped. At 5,000 running machines a
	// check every 5 minutes was 17 reconciles a second of a manager otherwise idle.
	DefaultWatchedHealthCheckInterval = 30 * time.Minute
	// DefaultProvisioningTimeout is how long a machine may take to become Running before it is
	// Failed (--provisioning-timeout).
	DefaultProvisioningTimeout = 15 * time.Minute
	// DefaultIPReportTimeout is how long a running VM may go without an IPv4 address before the
	// diagnosis points at the guest agent and DHCP (--ip-report-timeout).
	DefaultIPReportTimeout = 3 * time.Minute
	// DefaultConfigGracePeriod is how long a MachineRequest or ImageSync waits on a problem only
	// the user can fix before it becomes Failed (--config-grace-period).
	DefaultConfigGracePeriod = time.Minute
	// DefaultRecheckInterval is how often a ProviderConfig that passed its checks is checked
	// again (--providerconfig-recheck-interval) when nothing else asks: its spec or credentials
	// changing have it checked at once, and a machine that Harvester refuses for a reason a check
	// covers once the last check is 5 minutes old (providerconfig.DefaultRefusalRecheckGap). A day: the checks cost a fixed number of requests to Harvester, and what only this
	// timer finds (a permission revoked that no machine has used since) harms no machine yet.
	DefaultRecheckInterval = 24 * time.Hour
)

// Defaults of the manager's own settings.
const (
	DefaultMetricsAddr      = ":8443"
	DefaultProbeAddr        = ":8081"
	DefaultLeaderElectionID = "butler-provider-harvester.butler.butlerlabs.dev"
	DefaultConcurrency      = 16
	DefaultKubeQPS          = 100
	DefaultKubeBurst        = 200
	DefaultSyncPeriod       = 10 * time.Hour
	// DefaultGracefulShutdownTimeout leaves 10s of the Pod's 30s termination grace period (the
	// chart's and config/manager's) for releasing the leader Lease and exiting.
	DefaultGracefulShutdownTimeout = 20 * time.Second
)

// Options are the manager's settings.
type Options struct {
	MetricsAddr             string
	MetricsSecure           bool
	MetricsCertDir          string
	MetricsCertName         string
	MetricsCertKey          string
	EnableHTTP2             bool
	ProbeAddr               string
	PprofAddr               string
	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	GracefulShutdownTimeout time.Duration
	WatchNamespaces         []string
	SyncPeriod              time.Duration
	Concurrency             int
	ClusterAPI              bool
	// HandOverFrom are the management clusters whose HarvesterMachines' objects may be handed over
	// (HandOverFlag).
	HandOverFrom []string
	// SkipCleanupAnytime lets annotation skip-cleanup release HarvesterClusters and
	// HarvesterMachines whose deletion is not blocked (SkipCleanupFlag).
	SkipCleanupAnytime  bool
	CreatingPoll        time.Duration
	WatchedPoll         time.Duration
	HealthInterval      time.Duration
	WatchedHealth       time.Duration
	RecheckInterval     time.Duration
	ProvisioningTimeout time.Duration
	IPReportTimeout     time.Duration
	ConfigGracePeriod   time.Duration
	HarvesterQPS        float64
	HarvesterBurst      int
	KubeQPS             float64
	KubeBurst           int
	LogLevel, LogFormat string
	// Kubeconfig, if set, is the kubeconfig file of the management cluster.
	Kubeconfig string
	// FlagNotes say what Parse did with each flag of the published provider's manager it was
	// given (mapped onto which flag, or ignored and why): the manager logs them at start-up.
	FlagNotes []string
}

// NewFlagSet returns the manager's flag set, bound to a new Options holding the defaults.
func NewFlagSet(output io.Writer) (*flag.FlagSet, *Options) {
	o := &Options{}
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: manager [flags]\n\n"+
			"Provisions a VM on Harvester for every MachineRequest whose ProviderConfig has provider \"harvester\".\n"+
			"Finds the management cluster through --kubeconfig, KUBECONFIG or the in-cluster config.\n"+
			"Accepts the flags of the published provider's manager too (zap's logging flags, --metrics-cert-path,\n"+
			"--webhook-cert-*): mapped onto this manager's where one fits, else ignored; the log says which.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", DefaultMetricsAddr, "Address the metrics endpoint binds to; \"0\" disables it.")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS, to clients whose token passes a TokenReview and that may \"get\" the non-resource URL /metrics (SubjectAccessReview). false serves plain HTTP to anyone.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "Directory holding the metrics endpoint's certificate and key (--metrics-cert-name, --metrics-cert-key); empty: a self-signed certificate made at start-up.")
	fs.StringVar(&o.MetricsCertName, "metrics-cert-name", "tls.crt", "File name of the metrics endpoint's certificate in --metrics-cert-dir.")
	fs.StringVar(&o.MetricsCertKey, "metrics-cert-key", "tls.key", "File name of the metrics endpoint's private key in --metrics-cert-dir.")
	fs.BoolVar(&o.EnableHTTP2, "enable-http2", false, "Offer HTTP/2 on the HTTPS metrics endpoint. Off: HTTP/1.1 only, so that HTTP/2's stream-reset floods (CVE-2023-44487, CVE-2023-39325) cannot reach the manager; scrapers need nothing more.")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", DefaultProbeAddr, "Address the /healthz and /readyz probes bind to; \"0\" disables them. /readyz passes once the caches have synced.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "", "Address Go's profiling endpoints (/debug/pprof/) bind to, plain HTTP without authentication; empty or \"0\": off. For diagnosing CPU or memory; bind it to localhost and reach it with kubectl port-forward.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time (needed with more than one replica).")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", DefaultLeaderElectionID, "Name of the Lease used for leader election.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader-election Lease; empty: the Pod's own namespace (required when running outside a cluster with --leader-elect).")
	fs.DurationVar(&o.GracefulShutdownTimeout, "graceful-shutdown-timeout", DefaultGracefulShutdownTimeout, "How long the manager waits on SIGTERM for reconciles in flight before it releases the leader Lease and exits; 0: no wait. Keep it well under the Pod's terminationGracePeriodSeconds, or the kubelet kills the manager before the Lease is released and the next leader waits for it to expire.")
	fs.Func("watch-namespaces", "Comma-separated namespaces whose MachineRequests and ProviderConfigs are reconciled; empty: all namespaces. A MachineRequest's ProviderConfig must be in a watched namespace too.", func(v string) error {
		ns, err := parseNamespaces(v)
		o.WatchNamespaces = ns
		return err
	})
	fs.DurationVar(&o.SyncPeriod, "sync-period", DefaultSyncPeriod, "How often every watched object is reconciled again even if nothing changed (a safety net; the provider's own rechecks are shorter).")
	fs.IntVar(&o.Concurrency, "max-concurrent-reconciles", DefaultConcurrency, "How many MachineRequests are reconciled in parallel.")
	fs.Func(HandOverFlag, "Comma-separated identities (kube-system namespace UIDs) of management clusters that are gone for good and whose HarvesterMachines' VMs, disks and cloud-init Secrets a HarvesterMachine of the same namespace and name here may take over, when annotated harvester.butler.butlerlabs.dev/hand-over=true; empty (the default): none. The platform operator's decision: a tenant's annotation alone never takes another management cluster's VM.", func(v string) error {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				o.HandOverFrom = append(o.HandOverFrom, id)
			}
		}
		return nil
	})
	fs.BoolVar(&o.SkipCleanupAnytime, SkipCleanupFlag, false, "Let annotation harvester.butler.butlerlabs.dev/skip-cleanup=true release a deleted HarvesterCluster or HarvesterMachine without deleting anything on Harvester even when the provider can delete it there. Off (the default): the annotation releases only a deletion that is blocked (its ProviderConfig, credentials or Harvester gone), so that a tenant who writes those objects cannot leave VMs or Harvester credentials that nothing manages. MachineRequests are not concerned: their annotation always counts.")
	fs.BoolVar(&o.ClusterAPI, "cluster-api", true, "Run the Cluster API infrastructure controllers (HarvesterCluster, HarvesterMachine) when the management cluster serves their CRDs and Cluster API's Cluster and Machine; false: never.")
	fs.DurationVar(&o.CreatingPoll, "creating-poll-interval", DefaultCreatingPollInterval, "How often a Creating machine is looked at again while waiting for its IP address, when its objects on Harvester are not watched (credentials without list and watch).")
	fs.DurationVar(&o.WatchedPoll, "watched-poll-interval", DefaultWatchedPollInterval, "How often a Creating or Deleting machine whose objects on Harvester are watched is looked at again anyway: their changes wake it at once, so this only catches an event that was missed. Never shorter than --creating-poll-interval.")
	fs.DurationVar(&o.HealthInterval, "health-check-interval", DefaultHealthCheckInterval, "How often a Running machine's VM is checked on Harvester when its objects there are not watched (credentials without list and watch).")
	fs.DurationVar(&o.WatchedHealth, "watched-health-check-interval", DefaultWatchedHealthCheckInterval, "How often a Running machine whose VM is watched is checked anyway: the watch wakes it when its VM or VMI changes or is deleted, so this only catches a notification that was missed. Never shorter than --health-check-interval.")
	fs.DurationVar(&o.ProvisioningTimeout, "provisioning-timeout", DefaultProvisioningTimeout, "How long a machine may take to become Running (from its creation or last retry) before it is Failed with reason ProvisioningTimeout and the diagnosis as its message, so that a caller waiting for Running or Failed (the Butler bootstrap) can act; 0 waits for ever. Transient Harvester errors never make a machine Failed by themselves.")
	fs.DurationVar(&o.ConfigGracePeriod, "config-grace-period", DefaultConfigGracePeriod, "How long a MachineRequest that has no VM yet, or an ImageSync, waits on a problem only you can fix (missing or unusable credentials, a missing setting, missing permissions, a ProviderConfig not shared, no ButlerConfig) before it becomes Failed with that reason, which the Butler bootstrap acts on. It is retried by itself once the problem is fixed.")
	fs.DurationVar(&o.IPReportTimeout, "ip-report-timeout", DefaultIPReportTimeout, "How long a running VM may go without reporting an IPv4 address before the diagnosis points at the guest agent and DHCP.")
	fs.DurationVar(&o.RecheckInterval, "providerconfig-recheck-interval", DefaultRecheckInterval, "How often a ProviderConfig that passed its checks (credentials, image, network, storage, permissions) is checked again; a change to it or to its credentials Secret (within 30s) has it checked at once, and a machine refused by Harvester for a reason a check covers once its last check is 5m old.")
	fs.Float64Var(&o.HarvesterQPS, "harvester-qps", clustercache.DefaultQPS, "Requests per second to each Harvester cluster.")
	fs.IntVar(&o.HarvesterBurst, "harvester-burst", clustercache.DefaultBurst, "Request burst to each Harvester cluster.")
	fs.Float64Var(&o.KubeQPS, "kube-api-qps", DefaultKubeQPS, "Requests per second to the management cluster's API server.")
	fs.IntVar(&o.KubeBurst, "kube-api-burst", DefaultKubeBurst, "Request burst to the management cluster's API server.")
	fs.StringVar(&o.LogLevel, "log-level", "info", "Log level: debug, info, warn or error.")
	fs.StringVar(&o.LogFormat, "log-format", "json", "Log format: json or text.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Kubeconfig file of the management cluster (its current context); empty: KUBECONFIG if set, else the in-cluster config, else ~/.kube/config.")
	addPublishedFlags(fs)
	return fs, o
}

// Parse parses and validates args, mapping the published provider's flags onto this manager's
// (see FlagNotes). Asking for --help returns flag.ErrHelp after printing the help to output.
func Parse(args []string, output io.Writer) (*Options, error) {
	fs, o := NewFlagSet(output)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: the manager takes flags only (see --help)", fs.Args())
	}
	if err := o.adoptPublishedFlags(fs); err != nil {
		return nil, err
	}
	return o, o.Validate()
}

// HarvesterClientIdleTimeout is how long a Harvester client (and its informers) that nobody asks
// for is kept before it is stopped. Every running machine is reconciled at least every health-check
// interval (watched or not), so the client of a cluster with machines is asked for at least that
// often; twice the longer interval keeps its informers, and the watches that wake a machine when
// its VM changes or goes, running between two checks even when every machine was checked at the
// same moment (after a mass creation). A client no machine asks for any more is still stopped.
func (o *Options) HarvesterClientIdleTimeout() time.Duration {
	return 2 * max(o.HealthInterval, o.WatchedHealth)
}

// Validate reports every flag whose value cannot work, naming the flag and what it accepts.
func (o *Options) Validate() error {
	var errs []error
	positive := func(name string, ok bool, what string) {
		if !ok {
			errs = append(errs, fmt.Errorf("--%s must be %s", name, what))
		}
	}
	positive("max-concurrent-reconciles", o.Concurrency > 0, "at least 1")
	positive("sync-period", o.SyncPeriod > 0, "a positive duration")
	positive("creating-poll-interval", o.CreatingPoll > 0, "a positive duration")
	positive("watched-poll-interval", o.WatchedPoll > 0, "a positive duration")
	positive("health-check-interval", o.HealthInterval > 0, "a positive duration")
	positive("watched-health-check-interval", o.WatchedHealth > 0, "a positive duration")
	positive("provisioning-timeout", o.ProvisioningTimeout >= 0, "zero (wait for ever) or a positive duration")
	positive("ip-report-timeout", o.IPReportTimeout > 0, "a positive duration")
	positive("config-grace-period", o.ConfigGracePeriod > 0, "a positive duration")
	positive("providerconfig-recheck-interval", o.RecheckInterval > 0, "a positive duration")
	positive("harvester-qps", o.HarvesterQPS > 0, "positive")
	positive("harvester-burst", o.HarvesterBurst > 0, "at least 1")
	positive("kube-api-qps", o.KubeQPS > 0, "positive")
	positive("kube-api-burst", o.KubeBurst > 0, "at least 1")
	positive("leader-election-id", o.LeaderElectionID != "", "set")
	// controller-runtime would wait for ever on a negative timeout: no grace period fits that.
	positive("graceful-shutdown-timeout", o.GracefulShutdownTimeout >= 0, "zero or a positive duration")
	positive("metrics-cert-name", o.MetricsCertName != "", "set")
	positive("metrics-cert-key", o.MetricsCertKey != "", "set")
	// Without a directory the certificate is self-signed: file names would be ignored silently.
	if o.MetricsCertDir == "" && (o.MetricsCertName != "tls.crt" || o.MetricsCertKey != "tls.key") {
		errs = append(errs, errors.New("--metrics-cert-name and --metrics-cert-key name files in --metrics-cert-dir (or --metrics-cert-path), which is not set: set it, or drop them"))
	}
	if _, err := NewLogger(o.LogLevel, o.LogFormat, io.Discard); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// NewLogger returns a log/slog logger behind logr, as controller-runtime and klog expect.
func NewLogger(level, format string, w io.Writer) (logr.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return logr.Logger{}, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return logr.FromSlogHandler(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return logr.FromSlogHandler(slog.NewTextHandler(w, opts)), nil
	default:
		return logr.Logger{}, fmt.Errorf("--log-format %q: use json or text", format)
	}
}

// parseNamespaces splits a comma-separated list of namespaces, refusing names Kubernetes would.
func parseNamespaces(v string) ([]string, error) {
	var out []string
	for _, ns := range strings.Split(v, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			continue
		}
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(msgs, "; "))
		}
		out = append(out, ns)
	}
	return out, nil
}

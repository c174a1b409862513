// Package integration runs the controller against two real API servers (kube-apiserver and etcd
// built from Go modules): a management cluster with our CRDs, and a simulated Harvester
// (test/sim) with the KubeVirt and Harvester CRDs and admission policies, connected by a real
// kubeconfig Secret. No test sets VMI status by hand: the simulator plays KubeVirt.
package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	platformv1alpha1 "github.com/butlerdotdev/butler-provider-harvester/api/platform/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/harvesterevents"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/imagesync"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/machinerequest"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/providerconfig"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The manager's --config-grace-period and --provisioning-timeout in these tests: short, but long
// enough for the slowest machine of the other tests (a quota wait of 15s) to come up.
const (
	configGrace         = 3 * time.Second
	provisioningTimeout = 25 * time.Second
	// startGrace is the manager's start grace period: longer than a healthy start takes here
	// (the clone, the boot and the IP), even on a busy machine.
	startGrace = 8 * time.Second
)

// The simulated Harvester's root-disk clone and garbage collection take this long, as on a real
// one they take a while (shorter here, for the tests' sake).
const (
	cloneDelay = 600 * time.Millisecond
	gcDelay    = 500 * time.Millisecond
)

var (
	mgmt, hv        client.Client // management cluster, simulated Harvester
	mgmtEnv         *envtest.Environment
	mgmtCfg         *rest.Config
	simulated       *sim.Harvester
	harvesterConfig []byte // a real kubeconfig for the simulated Harvester
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the integration tests with 'make test', which builds the control plane")
		os.Exit(1)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Warnings and errors only, so the test output stays readable; BUTLER_TEST_LOG=debug|info for more.
	level := slog.LevelWarn
	_ = level.UnmarshalText([]byte(os.Getenv("BUTLER_TEST_LOG")))
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))

	crds, err := testbed.CRDDirectories(repoRoot(), os.Getenv(schemaEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mgmtEnv = &envtest.Environment{CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true}
	if mgmtCfg, err = mgmtEnv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start management API server:", err)
		return 1
	}
	defer func() { _ = mgmtEnv.Stop() }()
	simulated, err = sim.StartHarvester(ctx, sim.Options{Sim: sim.Config{
		BootDelay: 300 * time.Millisecond, IPDelay: 100 * time.Millisecond, CloneDelay: cloneDelay, GCDelay: gcDelay,
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the simulated Harvester:", err)
		return 1
	}
	defer func() { _ = simulated.Stop() }()
	hv = simulated.Client
	harvesterConfig = simulated.Kubeconfig

	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = platformv1alpha1.AddToScheme(scheme)
	if mgmt, err = client.New(mgmtCfg, client.Options{Scheme: scheme}); err != nil {
		panic(err)
	}

	stopManager = startManager(ctx, mgmtCfg)
	code := m.Run()
	stopManager()
	cancel() // stop the simulator before its API server
	return code
}

// schemaEnv chooses the MachineRequest schema (and the other Butler CRDs) the management cluster
// has: unset, the project's CRDs; else one of Butler's published sets (see testbed.CRDDirectories).
const schemaEnv = "BUTLER_TEST_SCHEMA"

// stopManager stops the manager startManager started last.
var stopManager func()

// restartManager stops the manager and starts a new one: nothing it remembered survives, as
// after a crash or an upgrade; what it recorded must be read back from the API servers.
func restartManager(t *testing.T) {
	t.Helper()
	stopManager()
	stopManager = startManager(context.Background(), mgmtCfg)
}

// startManager starts a manager in this process for the management cluster cfg reaches, with
// the controllers internal/controller/setup registers (with the tests' intervals), and returns
// what stops it and waits until it has stopped.
func startManager(parent context.Context, cfg *rest.Config) (stop func()) {
	ctx, cancel := context.WithCancel(parent)
	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = platformv1alpha1.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}}) // the same controllers again after a restart
	if err != nil {
		panic(err)
	}
	harvesterEvents := &harvesterevents.HarvesterEvents{}
	r := &machinerequest.Reconciler{
		Client:          mgr.GetClient(),
		Harvester:       harvester.NewClusters(&clustercache.Cache{SecretReader: mgr.GetAPIReader(), Context: ctx}, harvesterEvents),
		HarvesterEvents: harvesterEvents,
		Recorder:        mgr.GetEventRecorder("butler-provider-harvester"),
		// Long safety-net polls: the tests pass only if Harvester's events drive the reconciles.
		CreatingPollInterval: time.Minute,
		WatchedPollInterval:  time.Minute,
		HealthCheckInterval:  time.Minute,
		DeletionPollInterval: time.Minute,
		ProvisioningTimeout:  provisioningTimeout,
		ConfigGracePeriod:    configGrace,
		IPReportTimeout:      time.Second,
		DeletionReportDelay:  10 * time.Second, // a held-up deletion is reported within the tests' timeout
		StartGracePeriod:     startGrace,
	}
	// The ProviderConfigs' checks with the default recheck interval (a day): what a machine meets
	// has them checked again (TestPreflightRecheckedWhenAMachineIsRefused), not a timer.
	pcr := &providerconfig.Reconciler{
		Client: mgr.GetClient(), SecretReader: mgr.GetAPIReader(), Harvester: r.Harvester,
		Recorder:        mgr.GetEventRecorder("butler-provider-harvester"),
		CredentialsPoll: 500 * time.Millisecond, NotReadyRetry: 500 * time.Millisecond, RefusalRecheckGap: 500 * time.Millisecond,
	}
	r.Preflight = pcr
	if err := r.SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 4}); err != nil {
		panic(err)
	}
	if err := pcr.SetupWithManager(ctx, mgr, controller.Options{}); err != nil {
		panic(err)
	}
	isr := &imagesync.Reconciler{
		Client: mgr.GetClient(), Harvester: r.Harvester, HarvesterEvents: harvesterEvents,
		Recorder: mgr.GetEventRecorder("butler-provider-harvester"), ConfigGracePeriod: configGrace,
	}
	// Off only where the schema has no ImageSync CRD (the Butler CLI's).
	if why := imagesync.Unavailable(ctx, mgr); why != "" {
		if os.Getenv(schemaEnv) != "butler-cli" {
			panic("ImageSync controller off: " + why)
		}
	} else if err := isr.SetupWithManager(ctx, mgr, controller.Options{}); err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// eventually retries check until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consistently fails if check returns an error at any time within the duration.
func consistently(t *testing.T, d time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := check(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func createNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

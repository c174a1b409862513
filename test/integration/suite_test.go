// Package integration runs the controller against two real API servers (kube-apiserver and etcd
// built from Go modules): a management cluster with our CRDs, and a Harvester stand-in with the
// KubeVirt and Harvester CRDs and admission policies, connected by a real kubeconfig Secret.
package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

var (
	mgmt, hv        client.Client // management cluster, Harvester stand-in
	mgmtCfg         *rest.Config
	harvesterConfig []byte // a real kubeconfig for the Harvester stand-in
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
	// Warnings and errors only: the test output stays readable, failures stay visible.
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

	root := repoRoot()
	mgmtEnv := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	hvEnv := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(root, "test", "harvester", "crds")}, ErrorIfCRDPathMissing: true}
	var err error
	if mgmtCfg, err = mgmtEnv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start management API server:", err)
		return 1
	}
	defer func() { _ = mgmtEnv.Stop() }()
	hvCfg, err := hvEnv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start Harvester API server:", err)
		return 1
	}
	defer func() { _ = hvEnv.Stop() }()

	scheme := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	if mgmt, err = client.New(mgmtCfg, client.Options{Scheme: scheme}); err != nil {
		panic(err)
	}
	if hv, err = client.New(hvCfg, client.Options{Scheme: harvester.RemoteScheme()}); err != nil {
		panic(err)
	}
	if err := applyDir(ctx, hv, filepath.Join(root, "test", "harvester", "policies")); err != nil {
		fmt.Fprintln(os.Stderr, "apply admission policies:", err)
		return 1
	}
	harvesterConfig = kubeconfigFor(hvCfg)

	mgr, err := ctrl.NewManager(mgmtCfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		panic(err)
	}
	r := &controller.MachineRequestReconciler{
		Client:                  mgr.GetClient(),
		Harvester:               &harvester.CachingFactory{SecretReader: mgr.GetAPIReader()},
		Recorder:                mgr.GetEventRecorder("butler-provider-harvester"),
		CreatingPollInterval:    200 * time.Millisecond,
		HealthCheckInterval:     500 * time.Millisecond,
		DeletionPollInterval:    200 * time.Millisecond,
		MaxConcurrentReconciles: 4,
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		panic(err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	go playHarvester(ctx, hv)
	return m.Run()
}

// kubeconfigFor writes a self-contained kubeconfig for an envtest API server.
func kubeconfigFor(cfg *rest.Config) []byte {
	server := cfg.Host
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	c := clientcmdapi.NewConfig()
	c.Clusters["harvester"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	c.Contexts["harvester"] = &clientcmdapi.Context{Cluster: "harvester", AuthInfo: "admin"}
	c.CurrentContext = "harvester"
	out, err := clientcmd.Write(*c)
	if err != nil {
		panic(err)
	}
	return out
}

// applyDir creates every object of every YAML file in dir.
func applyDir(ctx context.Context, c client.Client, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				break
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := c.Create(ctx, u); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	return nil
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

package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// ClusterAPIAssetsEnv names the variable that holds the directory hack/tools/capi.sh prints: the
// Cluster API core manager (capi-manager), clusterctl, the kubeadm bootstrap provider
// (kubeadm-bootstrap-manager) and the CRDs, built from the Go modules of hack/tools/capi. make test sets it, as it sets KUBEBUILDER_ASSETS.
const ClusterAPIAssetsEnv = "CAPI_ASSETS"

// BuildClusterAPI runs hack/tools/capi.sh in repoRoot (building Cluster API once; later calls
// find it cached) and returns the directory it prints, for tools that do not run under make.
func BuildClusterAPI(ctx context.Context, repoRoot string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join("hack", "tools", "capi.sh")) //nolint:gosec // G204: a fixed script of the repository
	cmd.Dir, cmd.Stdout, cmd.Stderr = repoRoot, &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/tools/capi.sh: %w\n%s", err, errOut.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// ClusterAPIAssets returns the directory CAPI_ASSETS names, once it holds what hack/tools/capi.sh
// builds; an error that says how to get it otherwise.
func ClusterAPIAssets() (string, error) {
	dir := os.Getenv(ClusterAPIAssetsEnv)
	if dir == "" {
		return "", fmt.Errorf("%s is not set: run the tests with 'make test', which builds Cluster API (make capi prints the directory)", ClusterAPIAssetsEnv)
	}
	for _, name := range []string{"capi-manager", "clusterctl", "kubeadm-bootstrap-manager", "crds", "kubeadm-crds", "core-rbac", "webhook", "kubeadm-bootstrap-webhook"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil { //nolint:gosec // G703: the directory the test's caller (make test) names
			return "", fmt.Errorf("%s=%s has no %s (%w): set it to what 'make capi' prints", ClusterAPIAssetsEnv, dir, name, err)
		}
	}
	return dir, nil
}

// ClusterAPICRDs is the directory of Cluster API core's CRDs in assets: the bases, before
// kustomize adds their conversion webhook, which StartClusterAPI turns on once the manager that
// serves it runs.
func ClusterAPICRDs(assets string) string { return filepath.Join(assets, "crds") }

// ClusterAPICoreRBAC is the kustomization, in assets, of Cluster API core's RBAC as its release
// installs it: ServiceAccount capi-system/capi-manager bound to ClusterRole
// capi-aggregated-manager-role, which aggregates core's own rules and every ClusterRole labelled
// cluster.x-k8s.io/aggregate-to-manager: "true".
func ClusterAPICoreRBAC(assets string) string { return filepath.Join(assets, "core-rbac") }

// ClusterAPIOptions configure StartClusterAPI and StartKubeadmBootstrap.
type ClusterAPIOptions struct {
	// Assets is the directory hack/tools/capi.sh prints (see ClusterAPIAssets).
	Assets string
	// Config reaches the management cluster; the manager uses it as it is: an admin's, or one
	// that impersonates core's ServiceAccount (ClusterAPICoreRBAC) to test the RBAC.
	Config *rest.Config
	// Admin installs the webhook configurations and turns the CRDs' conversion webhook on, as the
	// release's installer does (default: Config).
	Admin *rest.Config
	// WorkDir receives the manager's kubeconfig, its webhook serving port and certificates, and
	// its log (<program>.log). A manager started again in the same WorkDir serves its webhooks
	// where the API server calls them. Each program has files of its own, so two may share one.
	WorkDir string
	// Args are added to the manager's flags (after those its release gives it, so a flag given
	// here wins).
	Args []string
}

// ClusterAPI is a running Cluster API manager process: the core manager or the kubeadm
// bootstrap provider.
type ClusterAPI struct {
	program managerProgram
	cmd     *exec.Cmd
	exited  chan error
	// LogPath is the file that receives the manager's output.
	LogPath string
	// MetricsURL serves the manager's Prometheus metrics (controller-runtime's reconcile and
	// work queue counters by controller), over plain HTTP on loopback.
	MetricsURL string
}

// managerProgram is a Cluster API manager program of the build and how its release installs it.
// Both share Cluster API's manager flags and webhook server, and differ only in these.
type managerProgram struct {
	// binary is the program's file in the build, also the prefix of its files in WorkDir.
	binary string
	// title names the program in errors and logs.
	title string
	// webhooks is the build's directory of its webhook configurations and conversion patches.
	webhooks string
	// mutating and validating name its webhook configurations as its release does.
	mutating, validating string
	// called waits until the API server calls its webhooks.
	called func(ctx context.Context, c client.Client) error
	// args are flags its release gives it beside the testbed's own.
	args []string
}

// coreManager is Cluster API core (its kustomization's namePrefix "capi-").
var coreManager = managerProgram{
	binary: "capi-manager", title: "the Cluster API manager", webhooks: "webhook",
	mutating: "capi-mutating-webhook-configuration", validating: "capi-validating-webhook-configuration",
	called: waitForDefaulting,
	// ClusterTopology (ClusterClass and managed topologies) is an alpha feature gate of Cluster
	// API v1.14, which `clusterctl init` turns on with CLUSTER_TOPOLOGY=true, as the docs tell
	// users of the ClusterClass flavours to: the core manager here runs as they run it.
	args: []string{"--feature-gates=ClusterTopology=true"},
}

// kubeadmBootstrapManager is Cluster API's kubeadm bootstrap provider (its kustomization's
// namePrefix "capi-kubeadm-bootstrap-").
var kubeadmBootstrapManager = managerProgram{
	binary: "kubeadm-bootstrap-manager", title: "the kubeadm bootstrap provider", webhooks: "kubeadm-bootstrap-webhook",
	mutating:   "capi-kubeadm-bootstrap-mutating-webhook-configuration",
	validating: "capi-kubeadm-bootstrap-validating-webhook-configuration",
	called:     waitForKubeadmConfigValidation,
}

// StartClusterAPI starts the Cluster API core manager (the cluster-api-controller image's
// program: the Cluster, Machine, MachineSet, MachineDeployment, MachineHealthCheck, ... controllers)
// against the management cluster, waits until it is ready, and points the API server at its
// webhooks (conversion, defaulting, validation) as a release of Cluster API core does: objects
// are defaulted and validated by Cluster API's own code, and may be written in any version it
// serves. The webhooks are served on a loopback port with a certificate of a CA the testbed makes,
// both kept in WorkDir; they fail closed, as released, so Cluster API's objects cannot be written
// while the manager is stopped. Stop it with Stop, also after an error. Leader election is off; the
// health probes and the metrics (--insecure-diagnostics: plain HTTP, no pprof) listen on free
// loopback ports.
func StartClusterAPI(ctx context.Context, opts ClusterAPIOptions) (*ClusterAPI, error) {
	return startManager(ctx, coreManager, opts)
}

// StartKubeadmBootstrap starts Cluster API's kubeadm bootstrap provider (the
// kubeadm-bootstrap-controller image's program) as StartClusterAPI starts core, its own webhooks
// (defaulting and validation of KubeadmConfig and KubeadmConfigTemplate, their conversion)
// installed the same way: for each KubeadmConfig of a Machine it writes the bootstrap data Secret,
// with a bootstrap token it creates in the workload cluster (through <cluster>-kubeconfig) and the
// hashes of the cluster's CA (Secret <cluster>-ca, which a control plane provider writes; see
// Tenant.WriteClusterCA). The kubeadm CRDs (KubeadmCRDs) must be installed first.
func StartKubeadmBootstrap(ctx context.Context, opts ClusterAPIOptions) (*ClusterAPI, error) {
	return startManager(ctx, kubeadmBootstrapManager, opts)
}

func startManager(ctx context.Context, program managerProgram, opts ClusterAPIOptions) (*ClusterAPI, error) {
	c := &ClusterAPI{program: program, LogPath: filepath.Join(opts.WorkDir, program.binary+".log")}
	if err := os.MkdirAll(opts.WorkDir, 0o750); err != nil {
		return c, err
	}
	kubeconfig := filepath.Join(opts.WorkDir, program.binary+".kubeconfig")
	if err := os.WriteFile(kubeconfig, sim.KubeconfigFor(opts.Config), 0o600); err != nil {
		return c, err
	}
	webhooks, err := webhookServingIn(opts.WorkDir, program.binary)
	if err != nil {
		return c, err
	}
	addrs, err := FreeLocalAddrs(2, webhooks.port)
	if err != nil {
		return c, err
	}
	healthAddr, metricsAddr := addrs[0], addrs[1]
	c.MetricsURL = "http://" + metricsAddr + "/metrics"
	logFile, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return c, err
	}
	defer func() { _ = logFile.Close() }() // the child has its own descriptor
	args := append([]string{
		"--leader-elect=false",
		"--diagnostics-address=" + metricsAddr,
		"--insecure-diagnostics",
		"--health-addr=" + healthAddr,
		"--webhook-port=" + strconv.Itoa(webhooks.port),
		"--webhook-cert-dir=" + webhooks.certDir,
	}, append(slices.Clone(program.args), opts.Args...)...)
	//nolint:gosec // G204: runs a manager hack/tools/capi.sh built, with the caller's (test) flags
	c.cmd = exec.Command(filepath.Join(opts.Assets, program.binary), args...)
	c.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	if err := c.cmd.Start(); err != nil {
		return c, err
	}
	c.exited = make(chan error, 1)
	go func() { c.exited <- c.cmd.Wait() }()
	if err := c.waitReady(ctx, "http://"+healthAddr+"/readyz", 2*time.Minute); err != nil {
		return c, err
	}
	admin := opts.Admin
	if admin == nil {
		admin = opts.Config
	}
	if err := installWebhooks(ctx, admin, opts.Assets, program, webhooks); err != nil {
		return c, fmt.Errorf("point the API server at the webhooks of %s: %w\n%s", program.title, err, c.LogTail())
	}
	return c, nil
}

// waitReady polls the manager's readiness endpoint until it answers 200, the manager exits or
// the timeout passes.
func (c *ClusterAPI) waitReady(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if err := c.Exited(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s was not ready (%s) within %s:\n%s", c.program.title, url, timeout, c.LogTail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// PID is the manager's process ID (0 before it started).
func (c *ClusterAPI) PID() int {
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Exited returns an error if the manager has exited.
func (c *ClusterAPI) Exited() error {
	if c.exited == nil {
		return nil
	}
	select {
	case err := <-c.exited:
		c.exited = nil
		if err == nil {
			err = errors.New("exit status 0")
		}
		return fmt.Errorf("%s exited (%w):\n%s", c.program.title, err, c.LogTail())
	default:
		return nil
	}
}

// Log returns everything the manager has logged.
func (c *ClusterAPI) Log() string {
	data, err := os.ReadFile(c.LogPath)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// LogTail returns the last lines of the manager's log.
func (c *ClusterAPI) LogTail() string {
	lines := strings.Split(strings.TrimSpace(c.Log()), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return "last lines of " + c.LogPath + ":\n  " + strings.Join(lines, "\n  ") + "\n"
}

// Stop stops the manager: SIGINT (it shuts down gracefully), SIGKILL after 10 seconds.
func (c *ClusterAPI) Stop() {
	if c.cmd == nil || c.cmd.Process == nil || c.exited == nil {
		return
	}
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case exitErr := <-c.exited:
		_ = exitErr // how an interrupted manager exits does not matter when stopping
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		exitErr := <-c.exited
		_ = exitErr // "signal: killed"
	}
	c.exited = nil
}

// KubeadmCRDs writes the kubeadm providers' CRDs of assets into dir with the contract
// labels their release adds (bootstrap/kubeadm/config/crd/kustomization.yaml and the control
// plane's: cluster.x-k8s.io/v1beta1: v1beta1, cluster.x-k8s.io/v1beta2: v1beta2). hack/tools/capi.sh
// copies the bases, which lack them, and Cluster API reads a KubeadmConfig's contract from them
// (to convert a Machine that names one, to delete it). It returns dir.
func KubeadmCRDs(assets, dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(assets, "kubeadm-crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("no kubeadm CRDs in %s: run 'make capi' (%w)", assets, err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // G304: the CRDs hack/tools/capi.sh copied
		if err != nil {
			return "", err
		}
		crd := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &crd.Object); err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
		labels := crd.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["cluster.x-k8s.io/v1beta1"], labels["cluster.x-k8s.io/v1beta2"] = "v1beta1", "v1beta2"
		crd.SetLabels(labels)
		out, err := yaml.Marshal(crd.Object)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), out, 0o600); err != nil {
			return "", err
		}
	}
	return dir, nil
}

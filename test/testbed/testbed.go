// Package testbed runs the provider end to end without a cluster: a management API server with the
// CRDs, a simulated Harvester (test/sim), and the manager binary as a separate process, as a
// user would run it. The demo and the benchmarks are built on it. For Cluster API it also runs the
// Cluster API core manager (capi.go) and the world of a tenant cluster (tenant.go: the Cluster and
// MachineDeployment builders and a second API server as the tenant; kubelets.go: the kubelets
// that register its Nodes), shared by test/capi and the bench.
package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	platformv1alpha1 "github.com/butlerdotdev/butler-provider-harvester/api/platform/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// The world the samples in config/samples expect.
const (
	Namespace          = "butler-system"
	HarvesterNamespace = "default"
	NetworkName        = "vlan40-workloads"
	NetworkCIDR        = "10.40.0.0/24" // the samples' VLAN: 244 leases, plenty for a demo
	ImageName          = "talos-1-9"
	CredentialsSecret  = "harvester-kubeconfig" //nolint:gosec // G101: the name of the Secret, not a credential
	// FactoryURL is the Butler Image Factory of the ButlerConfig the testbed creates; the
	// simulated Harvester downloads nothing from it.
	FactoryURL = "https://factory.butlerlabs.example"
)

// Options configure Start.
type Options struct {
	// RepoRoot holds config/crd/bases and cmd/manager.
	RepoRoot string
	// Schema chooses the management cluster's CRDs: "" for the project's, else one of
	// ButlerSchemas (see CRDDirectories).
	Schema string
	// CRDDirectories are directories of further CRDs the management cluster serves from the
	// start (e.g. Cluster API core's, ClusterAPICRDs).
	CRDDirectories []string
	// WorkDir receives the kubeconfigs, the manager binary and its log.
	WorkDir string
	Sim     sim.Config
	// NetworkCIDR is the VM network's range (default NetworkCIDR, 244 leases).
	NetworkCIDR string
	// ManagerArgs are passed to the manager.
	ManagerArgs []string
	// ManagerArgsLate, if set, gives more of them when the manager first starts, once the API
	// servers listen: for the addresses it is to listen on, as a port chosen (and let go) before
	// may be one of theirs by then.
	ManagerArgsLate func() ([]string, error)
	// ManagerBinary, if set, is the manager to run instead of this repository's cmd/manager (the
	// bench runs the published provider with it). It gets ManagerArgs alone: the flags the testbed
	// gives its own manager (log format, probes off) are ones another program may not know.
	ManagerBinary string
	// ManagerImpersonate, if set, is who the manager acts as on the management cluster: its
	// kubeconfig impersonates that user (a ServiceAccount, to test the RBAC it is bound by).
	ManagerImpersonate *rest.ImpersonationConfig
	// ManagerEnv is added to the manager's environment, and ManagerDir, if set, is its working
	// directory.
	ManagerEnv []string
	ManagerDir string
	// BeforeManager, if set, runs once both clusters are up, before the manager starts.
	BeforeManager func(context.Context, *Testbed) error
	// ClusterAPI, if set, is the directory hack/tools/capi.sh prints (ClusterAPIAssets): the
	// management cluster then also serves Cluster API core's CRDs and this provider's
	// infrastructure CRDs, and the Cluster API core manager runs (Testbed.ClusterAPI), started
	// before the manager so that the manager turns its Cluster API controllers on.
	ClusterAPI string
	// KubeadmBootstrap, with ClusterAPI, also runs Cluster API's kubeadm bootstrap provider
	// (Testbed.KubeadmBootstrap, see StartKubeadmBootstrap); the management cluster then serves
	// the kubeadm CRDs (KubeadmCRDs).
	KubeadmBootstrap bool
	// NoManager starts both clusters but no manager: the caller plays the provider itself (the
	// bench's "direct" scenario, the physical limit of the machine).
	NoManager bool
	// WithProxy puts the simulator's FaultProxy between the manager and Harvester: the
	// credentials Secret then holds the proxy's kubeconfig.
	WithProxy bool
	// Harvesters is how many simulated Harvester clusters run (default 1): a platform's sites,
	// each with its own API server and simulator, seeded alike, and each with a credentials
	// Secret of its own (CredentialsSecretOf).
	Harvesters int
	// Progress, if set, is told what happens.
	Progress func(format string, args ...any)
}

// Testbed is a running management cluster, simulated Harvester and manager.
type Testbed struct {
	opts       Options
	mgmtEnv    *envtest.Environment
	MgmtConfig *rest.Config
	Mgmt       client.Client
	// Harvester is the first simulated Harvester cluster, and Harvesters all of them
	// (Options.Harvesters).
	Harvester  *sim.Harvester
	Harvesters []*sim.Harvester
	// ClusterAPI is the Cluster API core manager, if Options.ClusterAPI asked for it.
	ClusterAPI *ClusterAPI
	// KubeadmBootstrap is the kubeadm bootstrap provider, if Options.KubeadmBootstrap asked for it.
	KubeadmBootstrap *ClusterAPI
	manager          *exec.Cmd
	exited           chan error
	cancelSim        context.CancelFunc
}

// Path returns a file of the work directory.
func (t *Testbed) Path(name string) string { return filepath.Join(t.opts.WorkDir, name) }

func (t *Testbed) say(format string, args ...any) {
	if t.opts.Progress != nil {
		t.opts.Progress(format, args...)
	}
}

// Start starts both API servers and the simulator, writes their kubeconfigs to the work directory,
// and builds and starts the manager. Stop it with Stop, also after an error.
func Start(ctx context.Context, opts Options) (*Testbed, error) {
	if opts.NetworkCIDR == "" {
		opts.NetworkCIDR = NetworkCIDR
	}
	t := &Testbed{opts: opts}
	if err := os.MkdirAll(opts.WorkDir, 0o750); err != nil {
		return t, err
	}
	type step struct {
		name string
		fn   func(context.Context) error
	}
	steps := []step{
		{"Starting the management API server (kube-apiserver + etcd)", t.startManagement},
		{"Starting the simulated Harvester (kube-apiserver + etcd + simulator)", t.startHarvester},
	}
	if opts.ClusterAPI != "" {
		steps = append(steps, step{"Starting the Cluster API core manager", t.startClusterAPI})
		if opts.KubeadmBootstrap {
			steps = append(steps, step{"Starting Cluster API's kubeadm bootstrap provider", t.startKubeadmBootstrap})
		}
	}
	if opts.BeforeManager != nil {
		steps = append(steps, step{"Preparing the clusters for the manager", func(ctx context.Context) error { return opts.BeforeManager(ctx, t) }})
	}
	if !opts.NoManager {
		steps = append(steps, step{"Building and starting the manager", t.startManager})
	}
	for _, s := range steps {
		t.say("%s ...", s.name)
		if err := s.fn(ctx); err != nil {
			return t, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return t, nil
}

func (t *Testbed) startManagement(context.Context) error {
	// Our CRDs, and Butler's ButlerConfig (reduced, see api/platform), which Butler installs; or
	// Butler's own CRDs (see CRDDirectories).
	crds, err := CRDDirectories(t.opts.RepoRoot, t.opts.Schema)
	if err != nil {
		return err
	}
	crds = append(crds, t.opts.CRDDirectories...)
	if t.opts.ClusterAPI != "" {
		crds = append(crds, ClusterAPICRDs(t.opts.ClusterAPI), filepath.Join(t.opts.RepoRoot, "config", "crd", "infrastructure"))
		if t.opts.KubeadmBootstrap {
			kubeadm, err := KubeadmCRDs(t.opts.ClusterAPI, t.Path("kubeadm-crds"))
			if err != nil {
				return err
			}
			crds = append(crds, kubeadm)
		}
	}
	t.mgmtEnv = &envtest.Environment{CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true}
	if t.MgmtConfig, err = t.mgmtEnv.Start(); err != nil {
		return err
	}
	t.MgmtConfig.QPS, t.MgmtConfig.Burst = 200, 400 // the testbed's own client creates objects in bulk
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
	_ = platformv1alpha1.AddToScheme(scheme)
	if t.Mgmt, err = client.New(t.MgmtConfig, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if err := os.WriteFile(t.Path("management.kubeconfig"), sim.KubeconfigFor(t.MgmtConfig), 0o600); err != nil {
		return err
	}
	managerConfig := rest.CopyConfig(t.MgmtConfig)
	if t.opts.ManagerImpersonate != nil {
		managerConfig.Impersonate = *t.opts.ManagerImpersonate
	}
	return os.WriteFile(t.Path("manager.kubeconfig"), sim.KubeconfigFor(managerConfig), 0o600)
}

func (t *Testbed) startHarvester(ctx context.Context) error {
	simCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.cancelSim = cancel
	for k := range max(t.opts.Harvesters, 1) {
		hv, err := sim.StartHarvester(simCtx, sim.Options{Sim: t.opts.Sim, WithProxy: t.opts.WithProxy})
		if hv != nil {
			t.Harvesters = append(t.Harvesters, hv)
		}
		if err != nil {
			return err
		}
		if err := InstallGuestReader(ctx, hv.Client); err != nil {
			return err
		}
		if err := os.WriteFile(t.Path(harvesterKubeconfigFile(k)), hv.Kubeconfig, 0o600); err != nil {
			return err
		}
	}
	t.Harvester = t.Harvesters[0]
	return nil
}

// harvesterKubeconfigFile names the kubeconfig file of Harvester cluster k (0 is the first).
func harvesterKubeconfigFile(k int) string {
	if k == 0 {
		return "harvester.kubeconfig"
	}
	return fmt.Sprintf("harvester-%d.kubeconfig", k+1)
}

// CredentialsSecretOf names the credentials Secret, in Namespace, of Harvester cluster k (0 is
// the first, whose Secret is CredentialsSecret, as config/samples name it).
func CredentialsSecretOf(k int) string {
	if k == 0 {
		return CredentialsSecret
	}
	return fmt.Sprintf("%s-%d", CredentialsSecret, k+1)
}

func (t *Testbed) startClusterAPI(ctx context.Context) error {
	var err error
	t.ClusterAPI, err = StartClusterAPI(ctx, ClusterAPIOptions{Assets: t.opts.ClusterAPI, Config: t.MgmtConfig, WorkDir: t.Path("capi")})
	return err
}

func (t *Testbed) startKubeadmBootstrap(ctx context.Context) error {
	var err error
	t.KubeadmBootstrap, err = StartKubeadmBootstrap(ctx, ClusterAPIOptions{Assets: t.opts.ClusterAPI, Config: t.MgmtConfig, WorkDir: t.Path("capi")})
	return err
}

func (t *Testbed) startManager(context.Context) error {
	_ = os.Remove(t.Path("manager.log")) // one log per testbed; restarts append to it
	if t.opts.ManagerBinary == "" {
		if err := t.buildManager(); err != nil {
			return err
		}
	}
	// After the build, right before the start: a port chosen earlier may be taken meanwhile.
	if t.opts.ManagerArgsLate != nil {
		late, err := t.opts.ManagerArgsLate()
		if err != nil {
			return err
		}
		t.opts.ManagerArgs = append(slices.Clip(t.opts.ManagerArgs), late...) // restarts keep them
	}
	return t.runManager()
}

// buildManager builds this repository's manager into the work directory.
func (t *Testbed) buildManager() error {
	build := exec.Command("go", "build", "-o", t.Path("manager"), "./cmd/manager") //nolint:gosec // G204: fixed command; the only variable is the output path inside the testbed's work directory
	var out bytes.Buffer
	build.Dir, build.Stdout, build.Stderr = t.opts.RepoRoot, &out, &out
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/manager: %w\n%s", err, out.String())
	}
	return nil
}

// ReplaceManager upgrades the manager as a Deployment's rollout does: it stops the running one
// (SIGTERM, SIGKILL after 10 s) and starts binary in its place with args ("": this repository's
// manager, built now, with the testbed's own flags before args), appending to the same log.
func (t *Testbed) ReplaceManager(binary string, args []string) error {
	if t.exited == nil {
		return fmt.Errorf("the manager is not running")
	}
	if binary == "" {
		if err := t.buildManager(); err != nil {
			return err
		}
	}
	_ = t.manager.Process.Signal(os.Interrupt)
	select {
	case exitErr := <-t.exited:
		_ = exitErr // how the old manager exits does not matter to its successor
	case <-time.After(10 * time.Second):
		_ = t.manager.Process.Kill()
		exitErr := <-t.exited
		_ = exitErr // "signal: killed", as intended
	}
	t.exited = nil
	t.opts.ManagerBinary, t.opts.ManagerArgs = binary, args
	return t.runManager()
}

// runManager starts the manager binary, appending to its log.
func (t *Testbed) runManager() error {
	logFile, err := os.OpenFile(t.Path("manager.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	bin, args := t.Path("manager"), append([]string{"--log-format=text", "--health-probe-bind-address=0"}, t.opts.ManagerArgs...)
	if t.opts.ManagerBinary != "" {
		bin, args = t.opts.ManagerBinary, t.opts.ManagerArgs
	}
	//nolint:gosec // G204: runs the manager binary the testbed just built, or the one its caller (test or tool) names, with the caller's flags
	t.manager = exec.Command(bin, args...)
	t.manager.Env = append(append(os.Environ(), "KUBECONFIG="+t.Path("manager.kubeconfig")), t.opts.ManagerEnv...)
	t.manager.Dir = t.opts.ManagerDir
	t.manager.Stdout, t.manager.Stderr = logFile, logFile
	if err := t.manager.Start(); err != nil {
		return err
	}
	t.exited = make(chan error, 1)
	go func() { t.exited <- t.manager.Wait() }()
	t.say("  manager running (pid %d), logging to %s", t.manager.Process.Pid, t.Path("manager.log"))
	return nil
}

// KillManager kills the manager with SIGKILL, as a node failure or an OOM kill would, and starts
// it again.
func (t *Testbed) KillManager() error {
	if t.exited == nil {
		return fmt.Errorf("the manager is not running")
	}
	if err := t.manager.Process.Kill(); err != nil {
		return err
	}
	exitErr := <-t.exited
	_ = exitErr // "signal: killed", as intended
	t.exited = nil
	return t.runManager()
}

// ManagerPID is the manager's process ID (0 without a manager).
func (t *Testbed) ManagerPID() int {
	if t.manager == nil {
		return 0
	}
	return t.manager.Process.Pid
}

// ManagerExited returns an error if the manager has exited.
func (t *Testbed) ManagerExited() error {
	select {
	case err := <-t.exited:
		t.exited = nil
		if err == nil {
			err = errors.New("exit status 0") // a clean exit is unexpected too; say so rather than "<nil>"
		}
		return fmt.Errorf("the manager exited (%w):\n%s", err, t.ManagerLogTail())
	default:
		return nil
	}
}

// ManagerLog returns everything the manager has logged (restarts included).
func (t *Testbed) ManagerLog() (string, error) {
	data, err := os.ReadFile(t.Path("manager.log"))
	return string(data), err
}

// ManagerLogTail returns the last lines of the manager's log.
func (t *Testbed) ManagerLogTail() string {
	data, _ := t.ManagerLog()
	lines := strings.Split(strings.TrimSpace(data), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "last lines of the manager log:\n  " + strings.Join(lines, "\n  ") + "\n"
}

// Seed creates what the samples expect: on every Harvester cluster a VLAN network and an imported
// image, on the management cluster the namespace, the credentials Secret holding each simulated
// Harvester's kubeconfig (CredentialsSecretOf), and Butler's ButlerConfig with an image factory
// (for ImageSyncs).
func (t *Testbed) Seed(ctx context.Context) error {
	for _, hv := range t.Harvesters {
		if err := t.seedHarvester(ctx, hv.Client); err != nil {
			return err
		}
	}
	if err := t.Mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		return err
	}
	if err := t.Mgmt.Create(ctx, &platformv1alpha1.ButlerConfig{
		ObjectMeta: metav1.ObjectMeta{Name: platformv1alpha1.ButlerConfigName},
		Spec:       platformv1alpha1.ButlerConfigSpec{ImageFactory: &platformv1alpha1.ImageFactoryConfig{URL: FactoryURL}},
	}); err != nil {
		return err
	}
	for k, hv := range t.Harvesters {
		if err := t.Mgmt.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: CredentialsSecretOf(k), Namespace: Namespace},
			Data:       map[string][]byte{"kubeconfig": hv.Kubeconfig},
		}); err != nil {
			return err
		}
	}
	return nil
}

// seedHarvester creates the VLAN network and the image of the samples on one Harvester cluster,
// and waits for the image to be imported.
func (t *Testbed) seedHarvester(ctx context.Context, hv client.Client) error {
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(sim.NetworkAttachmentDefinitionGVK)
	nad.SetNamespace(HarvesterNamespace)
	nad.SetName(NetworkName)
	nad.SetAnnotations(map[string]string{sim.AnnotationRoute: `{"mode":"auto","cidr":"` + t.opts.NetworkCIDR + `","gateway":"10.40.0.1"}`})
	_ = unstructured.SetNestedField(nad.Object, `{"cniVersion":"0.3.1","name":"`+NetworkName+`","type":"bridge","bridge":"mgmt-br","promiscMode":true,"vlan":40,"ipam":{}}`, "spec", "config")
	if err := hv.Create(ctx, nad); err != nil {
		return err
	}
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	img.SetNamespace(HarvesterNamespace)
	img.SetName(ImageName)
	_ = unstructured.SetNestedField(img.Object, "talos-1.9-metal-amd64.raw", "spec", "displayName")
	_ = unstructured.SetNestedField(img.Object, "download", "spec", "sourceType")
	_ = unstructured.SetNestedField(img.Object, "https://factory.talos.dev/image/metal-amd64.raw.xz", "spec", "url")
	if err := hv.Create(ctx, img); err != nil {
		return err
	}
	if err := waitImported(ctx, hv, img); err != nil {
		return err
	}
	t.say("  image %s/%s imported, network %s/%s (%s) created", HarvesterNamespace, ImageName, HarvesterNamespace, NetworkName, t.opts.NetworkCIDR)
	return nil
}

// waitImported waits, like an operator would, for an uploaded image to finish importing.
func waitImported(ctx context.Context, c client.Client, img *unstructured.Unstructured) error {
	for deadline := time.Now().Add(time.Minute); ; {
		if err := c.Get(ctx, client.ObjectKeyFromObject(img), img); err != nil {
			return err
		}
		conditions, _, _ := unstructured.NestedSlice(img.Object, "status", "conditions")
		for _, c := range conditions {
			if m, ok := c.(map[string]any); ok && m["type"] == "Imported" && m["status"] == "True" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("image %s was not imported within a minute: %v", img.GetName(), conditions)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// DecodeFile decodes the objects of a YAML file.
func (t *Testbed) DecodeFile(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path) //nolint:gosec // G304: callers (tests, demo, bench) pass manifests of this repository's config/samples
	if err != nil {
		return nil, err
	}
	objs, err := DecodeManifests(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return objs, nil
}

// ApplyFile creates every object of a YAML file on the management cluster.
func (t *Testbed) ApplyFile(ctx context.Context, path string) ([]*unstructured.Unstructured, error) {
	objs, err := t.DecodeFile(path)
	if err != nil {
		return nil, err
	}
	for i, u := range objs {
		if err := t.Mgmt.Create(ctx, u); err != nil {
			return objs[:i], fmt.Errorf("%s: %w", path, err)
		}
	}
	return objs, nil
}

// FreeLocalAddrs returns n loopback addresses ("127.0.0.1:<port>") with distinct ports free at
// the moment, none of them in reserved, for a manager's metrics, probe and webhook endpoints. All
// listeners are held until every port is chosen: ports picked one by one, each released before the
// next, may repeat, and a manager given the same port twice fails to start. reserved names ports
// that are free now but promised, such as the webhook port a restarted manager keeps.
func FreeLocalAddrs(n int, reserved ...int) ([]string, error) {
	addrs := make([]string, 0, n)
	for len(addrs) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer func() { _ = l.Close() }()
		if slices.Contains(reserved, l.Addr().(*net.TCPAddr).Port) {
			continue
		}
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// FreeLocalAddr returns one loopback address with a port free at the moment (FreeLocalAddrs).
func FreeLocalAddr() (string, error) {
	addrs, err := FreeLocalAddrs(1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// DecodeManifests decodes a multi-document YAML (or JSON) stream into objects, skipping empty
// documents.
func DecodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// HarvesterLeft counts what is left in the Harvester namespace.
func (t *Testbed) HarvesterLeft(ctx context.Context) (vms, vmis, pvcs, secrets int, err error) {
	return t.HarvesterLeftOf(ctx, "")
}

// HarvesterLeftOf counts what is left in the Harvester namespace, on every Harvester cluster, of
// the machines whose names start with prefix: their objects are named after them (the VM and
// VMI, disks <name>-disk-<i>, the cloud-init Secret <name>-cloudinit).
func (t *Testbed) HarvesterLeftOf(ctx context.Context, prefix string) (vms, vmis, pvcs, secrets int, err error) {
	count := func(l client.ObjectList) int {
		n := 0
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			if m, ok := o.(metav1.Object); ok && strings.HasPrefix(m.GetName(), prefix) {
				n++
			}
			return nil
		})
		return n
	}
	in := client.InNamespace(HarvesterNamespace)
	for _, hv := range t.Harvesters {
		vmList, vmiList, pvcList, secretList := &kubevirtv1.VirtualMachineList{}, &kubevirtv1.VirtualMachineInstanceList{}, &corev1.PersistentVolumeClaimList{}, &corev1.SecretList{}
		for _, l := range []client.ObjectList{vmList, vmiList, pvcList, secretList} {
			if err := hv.Client.List(ctx, l, in); err != nil {
				return 0, 0, 0, 0, err
			}
		}
		vms, vmis, pvcs, secrets = vms+count(vmList), vmis+count(vmiList), pvcs+count(pvcList), secrets+count(secretList)
	}
	return vms, vmis, pvcs, secrets, nil
}

// HarvesterImages names the VirtualMachineImages of the Harvester namespace.
func (t *Testbed) HarvesterImages(ctx context.Context) ([]string, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(sim.VirtualMachineImageGVK.GroupVersion().WithKind("VirtualMachineImageList"))
	if err := t.Harvester.Client.List(ctx, list, client.InNamespace(HarvesterNamespace)); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, img := range list.Items {
		names = append(names, img.GetName())
	}
	return names, nil
}

// Stop stops the manager (gracefully), the simulator and both API servers.
func (t *Testbed) Stop() {
	if t.exited != nil {
		_ = t.manager.Process.Signal(os.Interrupt)
		select {
		case exitErr := <-t.exited:
			_ = exitErr // how an interrupted manager exits does not matter when stopping
		case <-time.After(10 * time.Second):
			_ = t.manager.Process.Kill()
		}
	}
	if t.KubeadmBootstrap != nil {
		t.KubeadmBootstrap.Stop()
	}
	if t.ClusterAPI != nil {
		t.ClusterAPI.Stop()
	}
	if t.cancelSim != nil {
		t.cancelSim()
	}
	for _, hv := range t.Harvesters {
		_ = hv.Stop()
	}
	if t.mgmtEnv != nil {
		_ = t.mgmtEnv.Stop()
	}
}

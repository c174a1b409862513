// Package sim is a simulated Harvester: against a real API server that has the KubeVirt, Harvester
// and CDI CRDs installed (see manifests/), it plays the parts KubeVirt, Harvester, Longhorn, CDI,
// the scheduler, the kubelet and kube-controller-manager play for the objects the provider
// creates, following their sources (docs/simulator.md lists each behaviour, the upstream file it
// follows and the test that covers it).
//
//   - VirtualMachine (runStrategy Always) -> VirtualMachineInstance as virt-controller moves it:
//     Pending (Ready=False PodNotExists) until its volumes are ready to attach, Scheduling once the
//     virt-launcher pod exists (Ready=False GuestNotRunning; the pod's PodScheduled=False copied
//     while the scheduler cannot place it, as it cannot while a PVC is unbound), Scheduled, Running
//     (Ready=True). The pod waits for its cloud-init Secret and its network (FailedMount and
//     FailedCreatePodSandBox Warning events on the pod, as the kubelet reports them). The VM's
//     status follows as KubeVirt's VM controller writes it: created, ready, runStrategy, the VMI's
//     conditions, and printableStatus by KubeVirt's precedence (WaitingForVolumeBinding,
//     ErrorUnschedulable, Starting, Running, Stopped, ...).
//   - Harvester's nodes are Node objects (Config.Nodes of them, labelled as the kubelet and
//     virt-handler label them; tests label them further). The scheduler places the virt-launcher
//     pod on the first node, by name, that its node selection fits (the VMI's nodeSelector and
//     required node affinity, with KubeVirt's kubevirt.io/schedulable=true), which the VMI reports
//     in status.nodeName, status.activePods and its kubevirt.io/nodeName label; a VMI no node
//     fits stays Scheduling, with the scheduler's "node(s) didn't match Pod's node
//     affinity/selector" in PodScheduled=False and in FailedScheduling events on the pod.
//   - After IPDelay, the guest agent's report in the VMI's status.interfaces: an IPv4 address from a
//     pool per network (CIDR from the NetworkAttachmentDefinition's network.harvesterhci.io/route
//     annotation, else its ipam.subnet, else Config.DefaultCIDR), with the noise real guests add
//     (link-local and global IPv6 addresses; not the loopback, which KubeVirt leaves out).
//   - Metadata churn: KubeVirt and Harvester rewrite VMs and VMIs on their own (API version and
//     run strategy annotations, MAC addresses, labels synced to the VMI, finalizers, status), with
//     updates that carry a resourceVersion, so that a writer holding a stale copy gets a 409.
//   - PVCs are provisioned as the PV controller and Longhorn's CSI provisioner do (Normal
//     ExternalProvisioning, Provisioning and ProvisioningSucceeded events); a root disk cloned
//     from an image (harvesterhci.io/imageId) binds only when the image exists and is imported and
//     the storage class is the image's, CloneDelay after it could start; otherwise it stays
//     Pending with a Warning event.
//   - VirtualMachineImages go through Harvester's import states: Initialized (with their storage
//     class lh-<image uid>, created with it) and Importing at once, Imported after ImportDelay. A
//     download from a URL the simulator is told is unreachable fails each attempt, retried
//     spec.retry times (status.failed, RetryLimitExceeded=False with the error) before Harvester
//     gives up (RetryLimitExceeded=True, Imported=False); the import-failed fault fails for good at
//     once. Images with spec.backend cdi import into a DataVolume of spec.targetStorageClassName,
//     and DataVolumes cloned from an image's PVC are played as CDI plays them.
//   - VM deletion removes the VMI and the PVCs listed in harvesterhci.io/removedPersistentVolumeClaims;
//     the garbage collector deletes objects whose owner is gone (Secrets owned by a VM, PVCs owned
//     by a DataVolume) GCDelay later.
//   - Namespace deletion empties the namespace of these kinds and finalizes it (the namespace
//     controller's part).
//   - Faults: unschedulable VMs (no room on the nodes that fit), no DHCP lease, failed image
//     imports, slow boots (globally through SetFaults, or per object through AnnotationFault); API
//     errors, latency and timeouts through FaultProxy, which also injects 409 Conflicts into
//     writes and drops the responses of writes it has applied.
//
// Admission: KubeVirt's rules that need only the object are ValidatingAdmissionPolicies in
// manifests/policies (inline cloud-init size); Harvester's webhooks, which need other objects, are
// served by the simulator (webhook.go): the VM validator (duplicate MAC addresses), the VM mutator
// (requests, guest memory and CPU defaults from the overcommit settings), and the PVC validator
// (a volume a VM uses cannot be deleted; a volume cloned from an image must use the image's
// storage class). The API server's own ResourceQuota admission refuses what exceeds a quota.
// StartHarvester installs all of them.
package sim

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// AnnotationFault injects a fault into the VirtualMachine or VirtualMachineImage that carries it,
// as an annotation or a label, and into that object alone: "unschedulable", "no-dhcp",
// "slow-boot" or "ignore-network-config" on VMs, "import-failed" on images. (As a label it can be
// set through a MachineRequest's or a HarvesterMachine's spec.labels.)
const AnnotationFault = "sim.butler.butlerlabs.dev/fault"

// Fault names accepted by AnnotationFault.
const (
	FaultUnschedulable = "unschedulable"
	FaultNoDHCP        = "no-dhcp"
	FaultSlowBoot      = "slow-boot"
	FaultImportFailed  = "import-failed"
	// FaultIgnoreNetworkConfig: the guest's image does not read the NoCloud disk's network
	// configuration (an image without cloud-init's network stage): it configures its first NIC by
	// DHCP, whatever the configuration says. Per VM only.
	FaultIgnoreNetworkConfig = "ignore-network-config"
)

// Config sets the simulator's timing and defaults.
type Config struct {
	// BootDelay is the time from a VMI's creation to phase Running.
	BootDelay time.Duration
	// IPDelay is the time from Running until the guest agent reports the IP.
	IPDelay time.Duration
	// ImportDelay is the time an image takes to import.
	ImportDelay time.Duration
	// SlowBootDelay replaces BootDelay for VMs with the slow-boot fault.
	SlowBootDelay time.Duration
	// DefaultCIDR is the address pool of networks that declare none.
	DefaultCIDR string
	// ImageVirtualSize is the virtual size reported for imported images (default 2 GiB).
	ImageVirtualSize int64
	// CloneDelay is how long a root disk cloned from an image stays Pending once its image is
	// imported, as Longhorn takes to clone the backing image (and CDI to clone an image's PVC).
	CloneDelay time.Duration
	// GCDelay is how long the garbage collector takes to delete an object after its owner is
	// gone (kube-controller-manager works through a queue, never in the same instant).
	GCDelay time.Duration
	// Overcommit is Harvester's overcommit-config setting, in percent (default Harvester's own:
	// cpu 1000, memory 150).
	Overcommit Overcommit
	// Nodes is how many Harvester nodes the simulator registers (harvester-node-1 to -N; default
	// 3). Label them to make failure domains: VMs are placed by their node selection.
	Nodes int
	// LegacyImageStorageClassNames plays a Harvester v0.3.0 to v1.7.x: the storage class of a
	// backing-image image is longhorn-<image name> (util.GetImageStorageClassName; the backing image
	// is vmi-<image uid> either way), in status.storageClassName as in every version since v0.3.0
	// (harvester commit 35ac03eed). Without it the simulator plays v1.8.0 and later:
	// lh-<image uid> (vmiOperator.GetStorageClassName, harvester/harvester#9392: commit f6fb2645f
	// on master, backported as b69423881, #10187, first tagged v1.8.0-rc2). v1.8 keeps the old
	// name for an image whose longhorn-<image name> class exists (imported before an upgrade); the
	// simulator plays a fresh install. Clients that guess the class from the image's name (the
	// published provider) work only on the older versions; clients that read
	// status.storageClassName work on all. docs/simulator.md cites the sources.
	LegacyImageStorageClassNames bool
	// NoVMPersistentState plays a Harvester before v1.7.0 whose KubeVirt CR does not enable the
	// VMPersistentState feature gate (alpha, off by default, until KubeVirt 1.6 made it GA):
	// KubeVirt refuses VMs with a persistent TPM or persistent EFI.
	NoVMPersistentState bool
}

// Overcommit is Harvester's overcommit-config setting: how much more CPU and memory VMs may be
// given (their limits) than they request, in percent.
type Overcommit struct {
	CPU, Memory int64
}

// imageRetries is Harvester's default spec.retry of a VirtualMachineImage: the failed downloads
// it retries before it gives up.
const imageRetries = 3

// Faults apply to every object; SetFaults changes them at run time.
type Faults struct {
	Unschedulable bool
	NoDHCP        bool
	SlowBoot      bool
	ImportFailed  bool
	// UnreachableURLs are URL prefixes Harvester cannot download from: images of sourceType
	// download with such a URL fail every attempt, as an unreachable factory makes them.
	UnreachableURLs []string
}

// Simulator runs the simulated controllers.
type Simulator struct {
	cfg Config
	c   client.Client
	// gcClient deletes as the garbage collector does, as its ServiceAccount.
	gcClient client.Client
	// live reads from the API server, bypassing the caches.
	live  client.Reader
	pools *pools
	// ca is the API server's CA, which the token controller hands out with tokens.
	ca []byte

	mu     sync.RWMutex
	faults Faults

	// ipReported records when each VMI ("namespace/name") first reported its IPv4 address.
	ipReported sync.Map
	// launchers holds the virt-launcher pod of each VMI (by VMI UID): the simulator plays the
	// pod without creating it (see launcher).
	launchers sync.Map
	// placing makes the scheduler place one launcher pod at a time (see placeLauncher).
	placing sync.Mutex
	// recorders record events as the component that emits them on a real cluster.
	recorders map[string]record.EventRecorder
}

// IPReportedAt returns when the VMI namespace/name first reported its IPv4 address (zero if it
// has not): benchmarks measure from it how soon the provider shows the IP.
func (s *Simulator) IPReportedAt(namespace, name string) time.Time {
	if t, ok := s.ipReported.Load(namespace + "/" + name); ok {
		return t.(time.Time)
	}
	return time.Time{}
}

// Scheme knows the typed kinds the simulator reads and writes: Kubernetes', KubeVirt's and CDI's
// (Harvester's own kinds, images and networks, it handles unstructured). A new scheme each call.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kubevirtv1.AddToScheme, cdiv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// New returns a simulator for the API server at restConfig, with defaults filled in.
func New(cfg Config) (*Simulator, error) {
	if cfg.DefaultCIDR == "" {
		cfg.DefaultCIDR = "10.99.0.0/16"
	}
	if _, err := netip.ParsePrefix(cfg.DefaultCIDR); err != nil {
		return nil, fmt.Errorf("DefaultCIDR: %w", err)
	}
	if cfg.SlowBootDelay == 0 {
		cfg.SlowBootDelay = 10*cfg.BootDelay + 30*time.Second
	}
	if cfg.ImageVirtualSize == 0 {
		cfg.ImageVirtualSize = 2 << 30
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = defaultNodes
	}
	if cfg.Overcommit == (Overcommit{}) {
		cfg.Overcommit = Overcommit{CPU: 1000, Memory: 150} // Harvester's default overcommit-config
	}
	if cfg.Overcommit.CPU <= 0 || cfg.Overcommit.Memory <= 0 {
		return nil, fmt.Errorf("overcommit percentages must be positive: %+v", cfg.Overcommit)
	}
	return &Simulator{cfg: cfg, pools: newPools()}, nil
}

// SetFaults replaces the global faults.
func (s *Simulator) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

func (s *Simulator) currentFaults() Faults {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.faults
}

// unreachable reports whether Harvester cannot download from url.
func (s *Simulator) unreachable(url string) bool {
	for _, prefix := range s.currentFaults().UnreachableURLs {
		if prefix != "" && strings.HasPrefix(url, prefix) {
			return true
		}
	}
	return false
}

// hasFault reports whether a fault applies to an object, globally or through its annotation.
func (s *Simulator) hasFault(obj client.Object, name string) bool {
	if obj.GetAnnotations()[AnnotationFault] == name || obj.GetLabels()[AnnotationFault] == name {
		return true
	}
	f := s.currentFaults()
	switch name {
	case FaultUnschedulable:
		return f.Unschedulable
	case FaultNoDHCP:
		return f.NoDHCP
	case FaultSlowBoot:
		return f.SlowBoot
	case FaultImportFailed:
		return f.ImportFailed
	}
	return false
}

// Start runs the simulator against the API server until ctx ends. It returns once its caches
// have synced, so that callers can rely on it from then on.
func (s *Simulator) Start(ctx context.Context, restConfig *rest.Config) error {
	// Harvester's controllers are not throttled by the 5 requests per second client-go would
	// default to; a simulator that were would be the bottleneck of every benchmark.
	restConfig = rest.CopyConfig(restConfig)
	restConfig.QPS, restConfig.Burst = 2000, 4000
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 ctrl.Log.WithName("sim"),
		// One process may run several simulated Harvesters (benchmarks run one per scenario).
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	s.c, s.live, s.ca = mgr.GetClient(), mgr.GetAPIReader(), restConfig.CAData
	gcConfig := rest.CopyConfig(restConfig)
	gcConfig.Impersonate = rest.ImpersonationConfig{UserName: gcUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	if s.gcClient, err = client.New(gcConfig, client.Options{Scheme: Scheme()}); err != nil {
		return err
	}
	if err := s.addIndexes(ctx, mgr); err != nil {
		return err
	}
	if err := s.registerNodes(ctx); err != nil {
		return err
	}
	if err := s.createKubeVirt(ctx); err != nil {
		return err
	}
	if err := s.setup(mgr); err != nil {
		return err
	}
	errs := make(chan error, 1)
	go func() { errs <- mgr.Start(ctx) }()
	synced := make(chan bool, 1)
	go func() { synced <- mgr.GetCache().WaitForCacheSync(ctx) }()
	select {
	case err := <-errs:
		return fmt.Errorf("simulator stopped: %w", err)
	case ok := <-synced:
		if !ok {
			return fmt.Errorf("simulator caches did not sync")
		}
		return nil
	}
}

// Components that record events, named as on a real Harvester (the events' source.component).
const (
	componentKubeVirt    = "virtualmachine-controller"   // virt-controller, for VMs and VMIs
	componentPVC         = "persistentvolume-controller" // kube-controller-manager
	componentProvisioner = "driver.longhorn.io_csi-provisioner-7b9f8d9c8d-x2k4q_5d1e1f3a-6c1b-4a0e-9d7e-3f2b1c0a9e8d"
	componentScheduler   = "default-scheduler"
	componentKubelet     = "kubelet"
	componentHarvester   = "VMController.SetHaltIfInsufficientResourceQuota" // Harvester's VM controller recorder
	componentCDI         = "datavolume-pvc-clone-controller"
)

func (s *Simulator) setup(mgr manager.Manager) error {
	// The old (core/v1) events API on purpose: KubeVirt and kube-controller-manager report through
	// it, so the provider's diagnosis is tested against Events with lastTimestamp, count and source
	// set, as on a real Harvester. The new API would write eventTime and reportingController instead.
	s.recorders = map[string]record.EventRecorder{}
	for _, c := range []string{componentKubeVirt, componentPVC, componentProvisioner, componentScheduler, componentKubelet, componentHarvester, componentCDI} {
		s.recorders[c] = mgr.GetEventRecorderFor(c) //nolint:staticcheck // imitates Harvester's components, which emit core/v1 Events (see above)
	}
	for _, r := range []interface{ setup(ctrl.Manager) error }{
		&vmReconciler{sim: s},
		&pvcReconciler{sim: s},
		&namespaceReconciler{sim: s},
		&imageReconciler{sim: s},
		&dataVolumeReconciler{sim: s},
		&garbageCollector{sim: s},
		&tokenReconciler{sim: s, ca: s.ca},
		&deviceReconciler{sim: s},
	} {
		if err := r.setup(mgr); err != nil {
			return err
		}
	}
	return nil
}

// event records an event as component does.
func (s *Simulator) event(component string, obj runtime.Object, eventType, reason, message string) {
	s.recorders[component].Event(obj, eventType, reason, message)
}

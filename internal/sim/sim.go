// Package sim is a simulated Harvester: against a real API server that has the KubeVirt and
// Harvester CRDs installed (see manifests/), it plays the parts KubeVirt and Harvester play for the
// objects the provider creates.
//
//   - VirtualMachine (runStrategy Always) -> VirtualMachineInstance through Pending, Scheduling,
//     Scheduled and Running, with the VM's printableStatus, ready flag and conditions as KubeVirt
//     reports them; a stopped VM loses its VMI.
//   - After IPDelay, the guest agent's report in the VMI's status.interfaces: an IPv4 address from a
//     pool per network (CIDR from the NetworkAttachmentDefinition's network.harvesterhci.io/route
//     annotation, else its ipam.subnet, else Config.DefaultCIDR), with the noise real guests add
//     (loopback, link-local and global IPv6 addresses).
//   - PVCs annotated with harvesterhci.io/imageId bind only when the image exists, is imported and
//     the storage class is the image's; otherwise they stay Pending with an event.
//   - VirtualMachineImages import after ImportDelay (or fail to, as a fault), and get their storage
//     class longhorn-<image>, as Harvester creates it.
//   - VM deletion removes the VMI and the PVCs listed in harvesterhci.io/removedPersistentVolumeClaims,
//     and garbage-collects Secrets owned by the VM.
//   - Namespace deletion empties the namespace of these kinds and finalizes it (the namespace
//     controller's part).
//   - Faults: unschedulable VMs, no DHCP lease, failed image imports, slow boots (globally through
//     SetFaults, or per object through AnnotationFault); API errors, latency and timeouts through
//     FaultProxy.
//
// Admission rules Harvester and KubeVirt enforce are ValidatingAdmissionPolicies in
// manifests/policies (inline cloud-init size, image storage class), and a webhook served by the
// simulator for the rule that needs other objects (duplicate MAC addresses); StartHarvester installs
// both.
package sim

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// AnnotationFault injects a fault into the VirtualMachine or VirtualMachineImage that carries it,
// as an annotation or a label, and into that object alone: "unschedulable", "no-dhcp" or
// "slow-boot" on VMs, "import-failed" on images. (As a label it can be set through a
// MachineRequest's spec.labels.)
const AnnotationFault = "sim.butler.butlerlabs.dev/fault"

// Fault names accepted by AnnotationFault.
const (
	FaultUnschedulable = "unschedulable"
	FaultNoDHCP        = "no-dhcp"
	FaultSlowBoot      = "slow-boot"
	FaultImportFailed  = "import-failed"
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
}

// Faults apply to every object; SetFaults changes them at run time.
type Faults struct {
	Unschedulable bool
	NoDHCP        bool
	SlowBoot      bool
	ImportFailed  bool
}

// Simulator runs the simulated controllers.
type Simulator struct {
	cfg   Config
	c     client.Client
	pools *pools

	mu     sync.RWMutex
	faults Faults

	// ipReported records when each VMI ("namespace/name") first reported its IPv4 address.
	ipReported sync.Map
}

// IPReportedAt returns when the VMI namespace/name first reported its IPv4 address (zero if it
// has not): benchmarks measure from it how soon the provider shows the IP.
func (s *Simulator) IPReportedAt(namespace, name string) time.Time {
	if t, ok := s.ipReported.Load(namespace + "/" + name); ok {
		return t.(time.Time)
	}
	return time.Time{}
}

// Scheme knows the typed kinds the simulator reads and writes: those of Harvester's API that the
// provider uses too.
func Scheme() *runtime.Scheme { return harvester.RemoteScheme() }

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
	s.c = mgr.GetClient()
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

func (s *Simulator) setup(mgr manager.Manager) error {
	// The old (core/v1) events API on purpose: KubeVirt and kube-controller-manager report through
	// it, so the provider's diagnosis is tested against Events with lastTimestamp, count and source
	// set, as on a real Harvester. The new API would write eventTime and reportingController instead.
	recorder := mgr.GetEventRecorderFor("harvester-sim") //nolint:staticcheck // imitates Harvester's components, which emit core/v1 Events (see above)
	if err := (&vmReconciler{sim: s, recorder: recorder}).setup(mgr); err != nil {
		return err
	}
	if err := (&pvcReconciler{sim: s, recorder: recorder}).setup(mgr); err != nil {
		return err
	}
	if err := (&namespaceReconciler{sim: s}).setup(mgr); err != nil {
		return err
	}
	return (&imageReconciler{sim: s}).setup(mgr)
}

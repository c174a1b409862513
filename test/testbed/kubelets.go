package testbed

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// kubeletWorkers is how many Nodes the player writes at once: a MachineDeployment's VMs start
// together, and each Node is a create and a status update.
const kubeletWorkers = 4

// Kubelets plays, on a tenant cluster, the kubelets of the VMs of a Harvester namespace, from
// watches: once a VM's VMI runs, a Ready Node named after the VM (the guest's hostname), with no
// memory, disk or PID pressure, as a kubelet with --cloud-provider=external registers it: without
// spec.providerID and tainted node.cloudprovider.kubernetes.io/uninitialized, for the cloud
// provider to initialize (see PlayCloudProvider, which does it only with the credentials the
// provider delivered). Once the VM is gone or being deleted, its Node turns Ready Unknown, as a
// Node whose kubelet stopped posting does.
type Kubelets struct {
	// adminCloudProvider: the Node is registered with its providerID already (see
	// WithAdminCloudProvider).
	adminCloudProvider bool
	namespace          string
	tenant             client.Client
	vms                client.Reader // the Harvester namespace's VMs and VMIs, from the informers
	nodes              client.Reader // the tenant's Nodes, from the informer
	queue              workqueue.TypedRateLimitingInterface[string]
	stop               context.CancelFunc
	workers            sync.WaitGroup

	mu sync.Mutex
	// seenRunning is when the player first saw each VMI running, registered when its Node was
	// written Ready: the player's own share of a machine's way to Running.
	seenRunning, registered map[string]time.Time
}

// KubeletOption changes what the kubelet player plays.
type KubeletOption func(*Kubelets)

// WithAdminCloudProvider also plays Harvester's cloud provider, with the harness's own (admin)
// view of Harvester rather than the credentials the provider delivered: each Node is registered
// with spec.providerID harvester://<VM UID> at once. Only for benchmarks that measure the
// provider, not the guest's way to Harvester; a test of the guest's credentials must not use it.
func WithAdminCloudProvider() KubeletOption { return func(k *Kubelets) { k.adminCloudProvider = true } }

// TaintUninitialized is the taint a kubelet with --cloud-provider=external registers its Node
// with, and the cloud provider removes once it has initialized the Node
// (k8s.io/cloud-provider api.TaintExternalCloudProvider).
const TaintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"

// PlayKubelets starts the player for the VMs of namespace on the Harvester cluster cfg reaches,
// registering Nodes on tenant; it runs until Stop or until ctx ends.
func PlayKubelets(ctx context.Context, harvesterCfg *rest.Config, namespace string, tenant *Tenant, opts ...KubeletOption) (*Kubelets, error) {
	ctx, cancel := context.WithCancel(ctx)
	k := &Kubelets{
		namespace: namespace, tenant: tenant.Client, stop: cancel,
		queue:       workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		seenRunning: map[string]time.Time{}, registered: map[string]time.Time{},
	}
	for _, o := range opts {
		o(k)
	}
	hv, err := ctrlcache.New(harvesterCfg, ctrlcache.Options{Scheme: sim.Scheme(), DefaultNamespaces: map[string]ctrlcache.Config{namespace: {}}})
	if err != nil {
		cancel()
		return nil, err
	}
	nodes, err := ctrlcache.New(tenant.Config, ctrlcache.Options{Scheme: tenant.Client.Scheme()})
	if err != nil {
		cancel()
		return nil, err
	}
	k.vms, k.nodes = hv, nodes
	for _, w := range []struct {
		c   ctrlcache.Cache
		obj client.Object
	}{{hv, &kubevirtv1.VirtualMachine{}}, {hv, &kubevirtv1.VirtualMachineInstance{}}, {nodes, &corev1.Node{}}} {
		if err := k.watch(ctx, w.c, w.obj); err != nil {
			cancel()
			return nil, err
		}
	}
	for _, c := range []ctrlcache.Cache{hv, nodes} {
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			cancel()
			return nil, fmt.Errorf("the kubelet player's informers did not sync")
		}
	}
	for range kubeletWorkers {
		k.workers.Go(func() {
			for k.next(ctx) {
			}
		})
	}
	go func() { <-ctx.Done(); k.queue.ShutDown() }()
	return k, nil
}

// watch queues the name of every object of obj's kind that changes (a VM, its VMI and its Node
// share it), and notes when a VMI is first seen running.
func (k *Kubelets) watch(ctx context.Context, c ctrlcache.Cache, obj client.Object) error {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return err
	}
	enqueue := func(o any) {
		if vmi, ok := o.(*kubevirtv1.VirtualMachineInstance); ok && vmi.Status.Phase == kubevirtv1.Running {
			k.note(k.seenRunning, vmi.Name)
		}
		if key, err := toolscache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			_, name, _ := toolscache.SplitMetaNamespaceKey(key)
			k.queue.Add(name)
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue})
	return err
}

func (k *Kubelets) next(ctx context.Context) bool {
	name, shutdown := k.queue.Get()
	if shutdown {
		return false
	}
	defer k.queue.Done(name)
	if err := k.sync(ctx, name); err != nil && ctx.Err() == nil {
		k.queue.AddRateLimited(name)
		return true
	}
	k.queue.Forget(name)
	return true
}

// sync brings the Node of the VM name in line with the VM.
func (k *Kubelets) sync(ctx context.Context, name string) error {
	uid, vmi, running, err := k.runningVM(ctx, name)
	if err != nil {
		return err
	}
	node := &corev1.Node{}
	switch err := k.nodes.Get(ctx, client.ObjectKey{Name: name}, node); {
	case apierrors.IsNotFound(err):
		if !running {
			return nil
		}
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
		if k.adminCloudProvider {
			node.Spec.ProviderID, node.Spec.Taints = harvester.ProviderIDPrefix+uid, nil
		}
		switch err := k.tenant.Create(ctx, node); {
		case apierrors.IsAlreadyExists(err): // created by an earlier try the informer has not shown yet
			if err := k.tenant.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
				return err
			}
		case err != nil:
			return err
		}
	case err != nil:
		return err
	}
	switch status := readyStatus(node); {
	case running && status == "":
		node.Status.Capacity = guestCapacity(vmi)
		node.Status.Allocatable = node.Status.Capacity
		if err := k.setReady(ctx, node, corev1.ConditionTrue, "KubeletReady"); err != nil {
			return err
		}
		k.note(k.registered, name)
	case !running && status != "" && status != corev1.ConditionUnknown:
		return k.setReady(ctx, node, corev1.ConditionUnknown, "NodeStatusUnknown")
	}
	return nil
}

// runningVM reports whether the VM name runs (its VMI is Running and the VM is not being deleted),
// its UID and its VMI.
func (k *Kubelets) runningVM(ctx context.Context, name string) (string, *kubevirtv1.VirtualMachineInstance, bool, error) {
	key := client.ObjectKey{Namespace: k.namespace, Name: name}
	vm, vmi := &kubevirtv1.VirtualMachine{}, &kubevirtv1.VirtualMachineInstance{}
	for _, obj := range []client.Object{vm, vmi} {
		if err := k.vms.Get(ctx, key, obj); err != nil {
			return "", nil, false, client.IgnoreNotFound(err)
		}
	}
	return string(vm.UID), vmi, vm.DeletionTimestamp == nil && vmi.Status.Phase == kubevirtv1.Running, nil
}

// guestCapacity is what the guest's kubelet counts of its hardware, as it registers its Node: the
// VMI's vCPUs (cores x sockets x threads) and its guest memory (domain.memory.guest, which
// Harvester's VM mutator sets, else the memory limit). A real kubelet counts the memory the guest
// kernel reports, which is a few percent less: that share is not played. Allocatable is the same
// (no reservations are played).
func guestCapacity(vmi *kubevirtv1.VirtualMachineInstance) corev1.ResourceList {
	domain := vmi.Spec.Domain
	capacity := corev1.ResourceList{}
	if cpu := domain.CPU; cpu != nil {
		capacity[corev1.ResourceCPU] = *resource.NewQuantity(int64(max(cpu.Cores, 1)*max(cpu.Sockets, 1)*max(cpu.Threads, 1)), resource.DecimalSI)
	}
	switch {
	case domain.Memory != nil && domain.Memory.Guest != nil:
		capacity[corev1.ResourceMemory] = domain.Memory.Guest.DeepCopy()
	case !domain.Resources.Limits.Memory().IsZero():
		capacity[corev1.ResourceMemory] = domain.Resources.Limits.Memory().DeepCopy()
	}
	return capacity
}

// setReady writes the Node's conditions as a kubelet posts them (Ready, and the memory, disk and
// PID pressure conditions False: Cluster API's NodeHealthy reads all four), or, with status
// Unknown, as the node lifecycle controller leaves them once the kubelet stopped posting (all
// four Unknown).
func (k *Kubelets) setReady(ctx context.Context, node *corev1.Node, status corev1.ConditionStatus, reason string) error {
	now := metav1.Now()
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	node.Status.Conditions = []corev1.NodeCondition{condition(corev1.NodeReady, status, reason)}
	for _, p := range []struct {
		t      corev1.NodeConditionType
		reason string
	}{{corev1.NodeMemoryPressure, "KubeletHasSufficientMemory"}, {corev1.NodeDiskPressure, "KubeletHasNoDiskPressure"}, {corev1.NodePIDPressure, "KubeletHasSufficientPID"}} {
		if status == corev1.ConditionUnknown {
			node.Status.Conditions = append(node.Status.Conditions, condition(p.t, corev1.ConditionUnknown, reason))
		} else {
			node.Status.Conditions = append(node.Status.Conditions, condition(p.t, corev1.ConditionFalse, p.reason))
		}
	}
	return k.tenant.Status().Update(ctx, node)
}

func (k *Kubelets) note(at map[string]time.Time, name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := at[name]; !ok {
		at[name] = time.Now()
	}
}

// Registered returns when the player first saw the VMI of the VM name running and when it
// registered its Node Ready (zero if it has not).
func (k *Kubelets) Registered(name string) (seenRunning, registered time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.seenRunning[name], k.registered[name]
}

// Stop stops the player and waits for its Node writes under way.
func (k *Kubelets) Stop() {
	k.stop()
	k.queue.ShutDown()
	k.workers.Wait()
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

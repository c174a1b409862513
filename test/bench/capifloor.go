package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The Cluster API floor is what Cluster API core itself costs, and what no infrastructure provider
// can avoid beside it: the same MachineDeployments of N, on the same testbed (Cluster API core
// manager, tenant API server, kubelet player, simulated Harvester), fulfilled by a perfect provider
// the bench plays in its own process. For each HarvesterMachine it reads what the contract makes
// it read (the Machine, for its bootstrap data Secret, and that Secret), adds its finalizer,
// creates the VM with the direct twin's builders (root disk, cloud-init Secret, VM), writes
// spec.providerID, and once the VMI reports its IP, status.initialization.provisioned and the
// addresses; when the HarvesterMachine is deleted it deletes the VM and removes its finalizer once
// the VM and its root disk are gone. It watches HarvesterMachines, and on Harvester VMIs, VMs and
// PVCs, and nothing else. Over several Harvester clusters it keeps a client and those watches to
// each, and makes a machine's VM on its Cluster's (the one the run put that Cluster on). Its own work runs labelled as the direct provider's (labelledCPU), so
// the CPU it takes is measured apart from the simulator's and the kubelet player's beside it.
// Like the provider's run, it deletes the MachineDeployments standingWindow after all its machines
// run, so that Cluster API core starts both deletions from the same state.
//
// The provider's run over this one is the provider's own margin over the floor, as ours / direct
// over the least ratio is for MachineRequests (floor.go).

// clusterAPIFloor is the Cluster API floor of a run.
type clusterAPIFloor struct {
	toRunning, toDeleted time.Duration
	// providerCPU is the perfect provider's own CPU seconds, creating and deleting;
	// providerCPUErr says why it was not measured.
	providerCPU    [2]float64
	providerCPUErr error
	// writes is what the perfect provider wrote to the management API server, per machine.
	writes float64
	// createCPU is what every process used from the first create to all Running, by kind of
	// process (cpuSince), as the provider's run measures its own (observation.cpu).
	createCPU map[string]float64
	// breakdown says where each machine's time went, creating and deleting, as the provider's
	// run says it: the two read side by side show which steps the provider itself lengthens.
	breakdown string
}

// measureClusterAPIFloor runs the scenario's MachineDeployment with the perfect provider.
func measureClusterAPIFloor(ctx context.Context, o options, sc scenario, work string) (clusterAPIFloor, error) {
	var res clusterAPIFloor
	tb, err := startSeededWithClusterAPI(ctx, o, sc, testbed.Options{WorkDir: filepath.Join(work, "capi-floor"), NoManager: true})
	defer tb.Stop()
	if err != nil {
		return res, err
	}
	var p *perfectProvider
	asDirectProvider(ctx, func(ctx context.Context) {
		p, err = startPerfectProvider(ctx, tb, capiClusters(len(tb.Harvesters), o.n))
	})
	if err != nil {
		return res, err
	}
	defer p.stop()
	fd := &machineDeployment{timeout: o.timeout}
	defer fd.close()
	if err := fd.prepare(ctx, tb); err != nil {
		return res, fmt.Errorf("the Cluster API floor: %w", err)
	}
	writesAtStart := p.writeCount()
	allWritesAtStart, err := apiServerWrites(ctx, tb.MgmtConfig)
	if err != nil {
		return res, err
	}
	cpuAtStart := processCPU(tb)
	profile := startLabelledCPU()
	start := time.Now()
	if err := fd.create(ctx, tb, o.n); err != nil {
		return res, err
	}
	if err := waitFor(ctx, o.timeout, tb, func() (bool, error) { return fd.running() == o.n, p.failed() }); err != nil {
		return res, fmt.Errorf("the Cluster API floor: waiting for Running (%d of %d): %w", fd.running(), o.n, err)
	}
	res.toRunning = time.Since(start)
	res.providerCPU[0], res.providerCPUErr = profile.stop()
	res.createCPU = cpuSince(tb, cpuAtStart)
	fd.afterRunning(tb)
	// The provider's run deletes standingWindow after all Running, once it has measured its
	// manager's standing CPU; the floor deletes from the same point. Deleting at once, while
	// Cluster API core still settles the last Machines, makes the floor's deletion another
	// scenario: its MachineSet's Machine deletes, slowed by the busy API server, trickle in over
	// seconds where the provider's run has them all at once (the management API server's audit
	// log shows it).
	if err := pause(ctx, standingWindow); err != nil {
		return res, err
	}

	// The deletion is watched as the provider's run watches its own (runScenario): the same
	// counts of Machines, VMs, VMIs, disks and Secrets, sampled every second. Those watches cost
	// the API servers and the bench CPU while the machines are deleted; without them here, the
	// provider's run alone paid for the bench's own view of its deletion.
	var counts *deletionCounts
	var progress *deletionProgress
	pprof.Do(ctx, pprof.Labels(labelKey, "measurement"), func(ctx context.Context) {
		counts, err = watchCounts(ctx, deletionKinds(fd, tb))
	})
	if err != nil {
		return res, err
	}
	defer counts.stop()
	profile = startLabelledCPU()
	start = time.Now()
	pprof.Do(ctx, pprof.Labels(labelKey, "measurement"), func(ctx context.Context) { progress = sampleDeletion(ctx, tb, counts) })
	if err := fd.deleteAll(ctx, tb); err != nil {
		return res, err
	}
	if err := waitFor(ctx, o.timeout, tb, func() (bool, error) {
		if err := p.failed(); err != nil {
			return false, err
		}
		return fd.gone(ctx, tb, counts)
	}); err != nil {
		return res, fmt.Errorf("the Cluster API floor: waiting for deletion: %w", err)
	}
	res.toDeleted = time.Since(start)
	deletion := progress.finish()
	var deleteErr error
	res.providerCPU[1], deleteErr = profile.stop()
	res.providerCPUErr = errors.Join(res.providerCPUErr, deleteErr)
	res.writes = float64(p.writeCount()-writesAtStart) / float64(o.n)
	core, err := fd.coreWork(ctx, tb)
	if err != nil {
		return res, err
	}
	allWritesAtEnd, err := apiServerWrites(ctx, tb.MgmtConfig)
	if err != nil {
		return res, err
	}
	allWrites := "Management API server writes per machine over the lifecycle: " + describeWrites(allWritesAtStart, allWritesAtEnd, o.n) + "."
	cpu := "CPU until all Running (the perfect provider's in the bench's): " + describeCPU(res.createCPU) + "."
	res.breakdown = strings.Join([]string{fd.breakdown, fd.deletionBreakdown(), core, allWrites, cpu, "Deleting: " + deletion + "."}, " ")
	return res, nil
}

// describe renders the floor of a run.
func (f clusterAPIFloor) describe(n int) string {
	own := "its own CPU not measured: " + fmt.Sprint(f.providerCPUErr)
	if f.providerCPUErr == nil {
		perMachine := func(seconds float64) float64 { return 1000 * seconds / float64(n) }
		own = fmt.Sprintf("its own CPU %.1f ms per machine (%.1f creating + %.1f deleting)",
			perMachine(f.providerCPU[0]+f.providerCPU[1]), perMachine(f.providerCPU[0]), perMachine(f.providerCPU[1]))
	}
	return fmt.Sprintf("Cluster API floor (the same MachineDeployment fulfilled by a perfect provider: the direct twin's builders, %.1f management writes per machine): all Running in %s, deleted in %s; %s. The floor's run: %s",
		f.writes, f.toRunning.Round(10*time.Millisecond), f.toDeleted.Round(10*time.Millisecond), own, f.breakdown)
}

// rootDiskSuffix ends the name of a machine's root disk (the provider's builders name it so).
const rootDiskSuffix = "-disk-0"

// perfectProvider is the Cluster API floor's provider (see the file's comment).
type perfectProvider struct {
	mgmt client.Client
	// mgmtCache is its informers' cache of HarvesterMachines on the management cluster.
	mgmtCache ctrlcache.Cache
	// sites are the Harvester clusters, siteOf the index of each Cluster's (by name).
	sites  []perfectSite
	siteOf map[string]int
	queue  workqueue.TypedRateLimitingInterface[string]
	cancel context.CancelFunc

	mu sync.Mutex
	// created are the VMs made (by HarvesterMachine name), deleted those asked to go.
	created, deleted map[string]bool
	writes           int
	err              error
}

// perfectSite is what the perfect provider keeps of one Harvester cluster: a client, the image
// its machines boot, and its informers' cache of VMIs, VMs and PVCs.
type perfectSite struct {
	hv    client.Client
	image harvester.ImageInfo
	cache ctrlcache.Cache
}

// startPerfectProvider starts its informers and workers for the run's clusters; stop ends them.
func startPerfectProvider(ctx context.Context, tb *testbed.Testbed, clusters []*capiCluster) (*perfectProvider, error) {
	ctx, cancel := context.WithCancel(ctx)
	p := &perfectProvider{cancel: cancel, created: map[string]bool{}, deleted: map[string]bool{}, siteOf: map[string]int{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	ok := false
	defer func() {
		if !ok {
			p.stop()
		}
	}()
	for _, c := range clusters {
		p.siteOf[c.spec.Name] = c.harvester
	}
	mgmtCfg := ownConnection(tb.MgmtConfig)
	var err error
	if p.mgmt, err = client.New(mgmtCfg, client.Options{Scheme: tb.Mgmt.Scheme()}); err != nil {
		return nil, err
	}
	if p.mgmtCache, err = ctrlcache.New(mgmtCfg, ctrlcache.Options{Scheme: tb.Mgmt.Scheme(), DefaultNamespaces: map[string]ctrlcache.Config{benchTenant.Namespace: {}}}); err != nil {
		return nil, err
	}
	caches := []ctrlcache.Cache{p.mgmtCache}
	for _, hv := range tb.Harvesters {
		site := perfectSite{}
		hvCfg := ownConnection(hv.Config)
		if site.hv, err = client.New(hvCfg, client.Options{Scheme: hv.Client.Scheme()}); err != nil {
			return nil, err
		}
		if site.image, err = harvester.ReadImage(ctx, site.hv, harvester.ObjectRef{Namespace: testbed.HarvesterNamespace, Name: testbed.ImageName}); err != nil {
			return nil, err
		}
		if site.cache, err = ctrlcache.New(hvCfg, ctrlcache.Options{Scheme: hv.Client.Scheme(), DefaultNamespaces: map[string]ctrlcache.Config{testbed.HarvesterNamespace: {}}}); err != nil {
			return nil, err
		}
		p.sites = append(p.sites, site)
		caches = append(caches, site.cache)
	}
	enqueue := func(obj any) {
		if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		if o, ok := obj.(metav1.Object); ok {
			// A machine's VM and VMI carry its name, its root disk <name>-disk-0.
			p.queue.Add(strings.TrimSuffix(o.GetName(), rootDiskSuffix))
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}
	type watched struct {
		c   ctrlcache.Cache
		obj client.Object
	}
	watches := []watched{{p.mgmtCache, &infrav1.HarvesterMachine{}}}
	for _, site := range p.sites {
		watches = append(watches, watched{site.cache, &kubevirtv1.VirtualMachineInstance{}},
			watched{site.cache, &kubevirtv1.VirtualMachine{}}, watched{site.cache, &corev1.PersistentVolumeClaim{}})
	}
	for _, w := range watches {
		inf, err := w.c.GetInformer(ctx, w.obj)
		if err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
	}
	for _, c := range caches {
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			return nil, errors.New("the perfect provider's informers did not sync")
		}
	}
	for _, c := range clusters {
		p.provisionCluster(ctx, c.spec.Name)
	}
	for range 8 { // as forEachMachine
		go p.work(ctx)
	}
	ok = true
	return p, nil
}

func (p *perfectProvider) stop() {
	p.cancel()
	p.queue.ShutDown()
}

// failed is the first error the provider met, if any: the run stops there.
func (p *perfectProvider) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *perfectProvider) writeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes
}

// wrote counts one write to the management API server.
func (p *perfectProvider) wrote() {
	p.mu.Lock()
	p.writes++
	p.mu.Unlock()
}

// provisionCluster says the HarvesterCluster of that name is provisioned, as its provider would
// once: the endpoint is in its spec already.
func (p *perfectProvider) provisionCluster(ctx context.Context, name string) {
	hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: benchTenant.Namespace, Name: name}}
	patch := []byte(`{"status":{"initialization":{"provisioned":true}}}`)
	// The HarvesterCluster is created by prepare, after this starts: retry until it exists.
	go func() {
		for ctx.Err() == nil {
			err := p.mgmt.Status().Patch(ctx, hc, client.RawPatch(types.MergePatchType, patch))
			if err == nil {
				p.wrote()
				return
			}
			if !apierrors.IsNotFound(err) {
				p.fail(err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func (p *perfectProvider) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

func (p *perfectProvider) work(ctx context.Context) {
	for {
		name, shutdown := p.queue.Get()
		if shutdown {
			return
		}
		if err := p.reconcile(ctx, name); err != nil {
			if ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				p.fail(fmt.Errorf("perfect provider, %s: %w", name, err))
			}
			p.queue.AddRateLimited(name)
		} else {
			p.queue.Forget(name)
		}
		p.queue.Done(name)
	}
}

// reconcile moves the HarvesterMachine of that name one step.
func (p *perfectProvider) reconcile(ctx context.Context, name string) error {
	hm := &infrav1.HarvesterMachine{}
	if err := p.mgmtCache.Get(ctx, client.ObjectKey{Namespace: benchTenant.Namespace, Name: name}, hm); err != nil {
		return client.IgnoreNotFound(err)
	}
	site, ok := p.siteOfMachine(hm)
	if !ok {
		return nil // Cluster API labels it with its Cluster's name next; that event brings it back
	}
	if hm.DeletionTimestamp != nil {
		return p.release(ctx, site, hm)
	}
	if len(hm.Finalizers) == 0 {
		// Nothing else puts a finalizer on a HarvesterMachine here: the list is set whole, with
		// no lock that Cluster API's own writes to the object (labels, owners) would fail.
		patch := fmt.Sprintf(`[{"op":"add","path":"/metadata/finalizers","value":[%q]}]`, infrav1.HarvesterMachineFinalizer)
		if err := p.mgmt.Patch(ctx, hm, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
			return err
		}
		p.wrote()
		return nil // the finalizer's event brings it back
	}
	if hm.Spec.ProviderID == "" {
		return p.create(ctx, site, hm)
	}
	if ptr.Deref(hm.Status.Initialization.Provisioned, false) {
		return nil
	}
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := site.cache.Get(ctx, client.ObjectKey{Namespace: testbed.HarvesterNamespace, Name: name}, vmi); err != nil {
		return client.IgnoreNotFound(err) // its creation's event brings the machine back
	}
	addresses := harvester.SelectAddresses(vmi.Status.Interfaces, harvester.NICName)
	if vmi.Status.Phase != kubevirtv1.Running || addresses.Primary == "" {
		return nil
	}
	status := client.MergeFrom(hm.DeepCopy())
	hm.Status.Initialization.Provisioned = ptr.To(true)
	hm.Status.Addresses = []infrav1.MachineAddress{{Type: infrav1.MachineInternalIP, Address: addresses.Primary}, {Type: infrav1.MachineHostName, Address: name}}
	if err := p.mgmt.Status().Patch(ctx, hm, status); err != nil {
		return err
	}
	p.wrote()
	return nil
}

// siteOfMachine is the Harvester cluster of the HarvesterMachine's Cluster, which Cluster API
// names in its label.
func (p *perfectProvider) siteOfMachine(hm *infrav1.HarvesterMachine) (perfectSite, bool) {
	k, ok := p.siteOf[hm.Labels[testbed.ClusterNameLabel]]
	if !ok {
		return perfectSite{}, false
	}
	return p.sites[k], true
}

// create makes the machine's VM with the direct twin's builders, once, and writes its providerID.
func (p *perfectProvider) create(ctx context.Context, site perfectSite, hm *infrav1.HarvesterMachine) error {
	p.mu.Lock()
	made := p.created[hm.Name]
	p.mu.Unlock()
	if made {
		return nil // its providerID is written: the cache has not shown it yet
	}
	var owner string
	for _, ref := range hm.OwnerReferences {
		if ref.Kind == testbed.MachineGVK.Kind {
			owner = ref.Name
		}
	}
	if owner == "" {
		return nil // Cluster API names the Machine as owner next; that event brings it back
	}
	machine := &unstructured.Unstructured{}
	machine.SetGroupVersionKind(testbed.MachineGVK)
	if err := p.mgmt.Get(ctx, client.ObjectKey{Namespace: hm.Namespace, Name: owner}, machine); err != nil {
		return err
	}
	secretName, _, _ := unstructured.NestedString(machine.Object, "spec", "bootstrap", "dataSecretName")
	secret := &corev1.Secret{}
	if err := p.mgmt.Get(ctx, client.ObjectKey{Namespace: hm.Namespace, Name: secretName}, secret); err != nil {
		return err
	}
	vm, err := createDirectMachine(ctx, site.hv, site.image, directSpec(hm.Name, hm.UID, string(secret.Data["value"])))
	if apierrors.IsAlreadyExists(err) { // made before a failed write of the providerID
		vm = &kubevirtv1.VirtualMachine{}
		err = site.hv.Get(ctx, client.ObjectKey{Namespace: testbed.HarvesterNamespace, Name: hm.Name}, vm)
	}
	if err != nil {
		return err
	}
	patch := client.MergeFrom(hm.DeepCopy())
	hm.Spec.ProviderID = harvester.ProviderIDPrefix + string(vm.UID)
	if err := p.mgmt.Patch(ctx, hm, patch); err != nil {
		return err
	}
	p.wrote()
	p.mu.Lock()
	p.created[hm.Name] = true
	p.mu.Unlock()
	return nil
}

// release deletes the machine's VM, and removes the finalizer once the VM and its root disk are
// gone (Harvester deletes the disk with the VM, the garbage collector the Secret with the disk).
func (p *perfectProvider) release(ctx context.Context, site perfectSite, hm *infrav1.HarvesterMachine) error {
	if len(hm.Finalizers) == 0 {
		return nil
	}
	key := client.ObjectKey{Namespace: testbed.HarvesterNamespace, Name: hm.Name}
	p.mu.Lock()
	asked := p.deleted[hm.Name]
	p.mu.Unlock()
	if !asked {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		if err := site.hv.Delete(ctx, vm); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		p.mu.Lock()
		p.deleted[hm.Name] = true
		p.mu.Unlock()
	}
	// The VM's and the disk's deletion events bring it back until both are gone; a machine
	// deleted before its VM was made (a MachineSet's one too many) has neither.
	if err := site.cache.Get(ctx, key, &kubevirtv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
		return client.IgnoreNotFound(err)
	}
	disk := client.ObjectKey{Namespace: key.Namespace, Name: hm.Name + rootDiskSuffix}
	if err := site.cache.Get(ctx, disk, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		return client.IgnoreNotFound(err)
	}
	patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/finalizers","value":[%q]},{"op":"remove","path":"/metadata/finalizers"}]`, infrav1.HarvesterMachineFinalizer)
	if err := p.mgmt.Patch(ctx, hm, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		return client.IgnoreNotFound(err)
	}
	p.wrote()
	return nil
}

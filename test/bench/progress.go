package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// countedKind is a kind whose objects a deletion is waited on, on one API server: what (plural),
// its resource, and the label selector that picks the bench's objects ("": all of the namespace).
type countedKind struct {
	what      string
	config    *rest.Config
	namespace string
	resource  schema.GroupVersionResource
	selector  string
}

// harvesterKinds are the objects a machine has on Harvester, counted during deletion.
// With several Harvester clusters, each kind is counted on each (what names the cluster).
func harvesterKinds(tb *testbed.Testbed) []countedKind {
	var kinds []countedKind
	for k, hv := range tb.Harvesters {
		kind := func(what string, gvr schema.GroupVersionResource) countedKind {
			if len(tb.Harvesters) > 1 {
				what = fmt.Sprintf("%s (cluster %d)", what, k+1)
			}
			return countedKind{what: what, config: hv.Config, namespace: testbed.HarvesterNamespace, resource: gvr}
		}
		kinds = append(kinds,
			kind("VMs", kubevirtv1.GroupVersion.WithResource("virtualmachines")),
			kind("VMIs", kubevirtv1.GroupVersion.WithResource("virtualmachineinstances")),
			kind("disks", corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")),
			kind("Secrets", corev1.SchemeGroupVersion.WithResource("secrets")))
	}
	return kinds
}

// deletionKinds are what a deletion is watched by, in both a provider's run and its floor's: the
// front door's own objects, then harvesterKinds.
func deletionKinds(fd frontDoor, tb *testbed.Testbed) []countedKind {
	return append([]countedKind{fd.counted(tb)}, harvesterKinds(tb)...)
}

// deletionCounts counts the objects of some kinds from a metadata watch of each: how many are
// left, and how many of them are marked for deletion. The bench waits on deletions with it, and
// samples it every second: listing the objects instead (every 50 ms while waiting, 1000 of each)
// cost the API servers more CPU than the deletion itself, on the same two CPUs, and slowed what it
// measured.
type deletionCounts struct {
	kinds  []countedKind
	stores []toolscache.Store
	stop   context.CancelFunc
}

// watchCounts starts the watches and waits for their first lists.
func watchCounts(ctx context.Context, kinds []countedKind) (*deletionCounts, error) {
	wctx, stop := context.WithCancel(ctx)
	c := &deletionCounts{kinds: kinds, stop: stop}
	var synced []toolscache.InformerSynced
	clients := map[*rest.Config]metadata.Interface{} // one per API server
	for _, k := range kinds {
		mc, ok := clients[k.config]
		if !ok {
			var err error
			if mc, err = metadata.NewForConfig(k.config); err != nil {
				stop()
				return nil, err
			}
			clients[k.config] = mc
		}
		selector := k.selector
		factory := metadatainformer.NewFilteredSharedInformerFactory(mc, 0, k.namespace, func(o *metav1.ListOptions) { o.LabelSelector = selector })
		inf := factory.ForResource(k.resource).Informer()
		c.stores = append(c.stores, inf.GetStore())
		synced = append(synced, inf.HasSynced)
		factory.Start(wctx.Done())
	}
	if !toolscache.WaitForCacheSync(wctx.Done(), synced...) {
		stop()
		return nil, fmt.Errorf("watching %s: %w", c.what(), context.Cause(wctx))
	}
	return c, nil
}

// what names the kinds counted, in order: "MachineRequests/VMs/VMIs/disks/Secrets".
func (c *deletionCounts) what() string {
	names := make([]string, 0, len(c.kinds))
	for _, k := range c.kinds {
		names = append(names, k.what)
	}
	return strings.Join(names, "/")
}

// left is how many objects of all the kinds are left.
func (c *deletionCounts) left() int {
	n := 0
	for _, s := range c.stores {
		n += len(s.ListKeys())
	}
	return n
}

// leftOf is how many objects of the i-th kind are left.
func (c *deletionCounts) leftOf(i int) int { return len(c.stores[i].ListKeys()) }

// sample is how many of each kind are left, each followed by how many of them are marked for
// deletion: "1000(250)/998(998)/...". Where a deletion waits shows between the two (one
// DELETECOLLECTION marks the machines one after the other, a VM stays until KubeVirt and Harvester
// let it go).
func (c *deletionCounts) sample() string {
	counts := make([]string, 0, len(c.stores))
	for _, s := range c.stores {
		items := s.List()
		deleting := 0
		for _, o := range items {
			if m, err := meta.Accessor(o); err == nil && m.GetDeletionTimestamp() != nil {
				deleting++
			}
		}
		counts = append(counts, fmt.Sprintf("%d(%d)", len(items), deleting))
	}
	return strings.Join(counts, "/")
}

// deletionProgress samples deletionCounts every second while everything is deleted, so that a
// slow deletion shows which step it waits on.
type deletionProgress struct {
	tb       *testbed.Testbed
	cpuStart map[int]procCPU
	counts   *deletionCounts
	mu       sync.Mutex
	samples  []string
	stop     func()
	// cpu is the CPU seconds each kind of process used, once finished.
	cpu map[string]float64
}

func sampleDeletion(ctx context.Context, tb *testbed.Testbed, counts *deletionCounts) *deletionProgress {
	p := &deletionProgress{tb: tb, cpuStart: processCPU(tb), counts: counts}
	p.stop = everySecond(ctx, func(context.Context) {
		s := counts.sample()
		p.mu.Lock()
		p.samples = append(p.samples, s)
		p.mu.Unlock()
	})
	return p
}

// finish stops sampling and says what was left every second, and the CPU each process used.
func (p *deletionProgress) finish() string {
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cpu = cpuSince(p.tb, p.cpuStart)
	return "CPU " + describeCPU(p.cpu) + ". " +
		p.counts.what() + " left (of them marked for deletion) every second: " + strings.Join(p.samples, " ")
}

// waitEmpty waits until no object of the counted kinds is left.
func (c *deletionCounts) waitEmpty(ctx context.Context, timeout time.Duration, tb *testbed.Testbed) error {
	return waitFor(ctx, timeout, tb, func() (bool, error) { return c.left() == 0, nil })
}

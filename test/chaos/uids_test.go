//go:build chaos

package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// vmUIDs follows every VirtualMachine on the simulated Harvester from before the first
// MachineRequest exists, and records what a killed manager or a lost response must never cause:
//   - a VM replaced by another of the same name (a second UID for one name, even after the first
//     VM is gone): the machine would have lost its disk contents and its identity;
//   - two VMs at once for one MachineRequest (by the MachineRequest UID label).
//
// It watches the API server directly, as an administrator: through the fault proxy its own watch
// would fail and relist, and could miss a VM that lived between two lists.
type vmUIDs struct {
	mu sync.Mutex
	// first is the UID each VM name had when it was first seen.
	first map[types.NamespacedName]types.UID
	// live maps the VMs that exist to the UID of their MachineRequest.
	live     map[types.UID]vmOwner
	events   int
	problems []string
	reported map[string]bool
}

type vmOwner struct {
	vm                types.NamespacedName
	machineRequestUID string
}

// watchVMUIDs starts following the VMs on the API server at cfg until ctx ends. It returns once
// every VM that exists already has been recorded.
func watchVMUIDs(ctx context.Context, cfg *rest.Config) (*vmUIDs, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: sim.Scheme()})
	if err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }() // ends with ctx; a failure to start shows as no sync below
	informer, err := c.GetInformer(ctx, &kubevirtv1.VirtualMachine{})
	if err != nil {
		return nil, err
	}
	w := &vmUIDs{first: map[types.NamespacedName]types.UID{}, live: map[types.UID]vmOwner{}, reported: map[string]bool{}}
	reg, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observe(obj, false) },
		UpdateFunc: func(_, obj any) { w.observe(obj, false) },
		DeleteFunc: func(obj any) { w.observe(obj, true) },
	})
	if err != nil {
		return nil, err
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return nil, errors.New("the VirtualMachine watch did not sync")
	}
	return w, nil
}

func (w *vmUIDs) observe(obj any, deleted bool) {
	if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	vm, ok := obj.(*kubevirtv1.VirtualMachine)
	if !ok {
		return
	}
	key := client.ObjectKeyFromObject(vm)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	if uid, seen := w.first[key]; !seen {
		w.first[key] = vm.UID
	} else if uid != vm.UID {
		w.problem("VM %s recreated: UID %s when first seen, now %s", key, uid, vm.UID)
	}
	if deleted {
		delete(w.live, vm.UID)
		return
	}
	mr := vm.Labels[harvester.LabelMachineRequestUID]
	w.live[vm.UID] = vmOwner{vm: key, machineRequestUID: mr}
	if mr == "" {
		return
	}
	for uid, other := range w.live {
		if uid != vm.UID && other.machineRequestUID == mr {
			w.problem("MachineRequest %s (UID %s) has two VMs: %s (UID %s) and %s (UID %s)",
				vm.Annotations[harvester.AnnotationMachineRequest], mr, other.vm, uid, key, vm.UID)
		}
	}
}

// problem records a broken invariant once (every later event of the same VM would repeat it).
// Called with w.mu held.
func (w *vmUIDs) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !w.reported[msg] {
		w.reported[msg] = true
		w.problems = append(w.problems, msg)
	}
}

// Err returns every broken invariant seen so far.
func (w *vmUIDs) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.problems) == 0 {
		return nil
	}
	sorted := append([]string(nil), w.problems...)
	sort.Strings(sorted)
	return fmt.Errorf("VM identity broken:\n  %s", strings.Join(sorted, "\n  "))
}

// FirstUID is the UID the VM of this name had when it was first seen.
func (w *vmUIDs) FirstUID(key types.NamespacedName) (types.UID, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	uid, ok := w.first[key]
	return uid, ok
}

// Counts returns how many VM names (each with its UID) were recorded, and from how many events.
func (w *vmUIDs) Counts() (vms, events int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.first), w.events
}

package harvesterevents

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// urgentPriority is, in the controllers' work queues (controller-runtime's priority queue serves
// higher first), the priority of Harvester changes that can make a machine Running (a VMI's phase
// or addresses) or complete a deletion: at a thousand machines created at once, such a change
// would otherwise wait behind the creates of all the others, which come in at 0 (polls come in
// last, requeue.AsPoll).
const urgentPriority = 100

// HarvesterEvents takes the notifications of the Harvester informers (harvester.Notifier) to the
// MachineRequest and ImageSync work queues. It adds to the queues directly: a channel in between
// would block the informer once full, and could not carry a priority.
type HarvesterEvents struct {
	// owners holds a *queueRef per owner kind: the work queue of the front door of that kind.
	owners sync.Map
	images queueRef
	// imageRequests maps an image to the ImageSyncs that wait for it (set by the ImageSync
	// controller, which has the index).
	imageRequests func(ctx context.Context, image types.NamespacedName) []reconcile.Request
	ctx           context.Context
}

type queueRef struct {
	mu sync.RWMutex
	q  workqueue.TypedRateLimitingInterface[reconcile.Request]
}

func (r *queueRef) set(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.q = q
}

// add queues req with priority; before the controller has started, nothing is queued (the
// reconcile that starts an informer looks at its machine itself).
func (r *queueRef) add(req reconcile.Request, priority int) {
	r.mu.RLock()
	q := r.q
	r.mu.RUnlock()
	if q == nil {
		return
	}
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: &priority}, req)
		return
	}
	q.Add(req)
}

// MachineChanged implements harvester.Notifier: the owner's front door hears of it.
func (e *HarvesterEvents) MachineChanged(owner harvester.OwnerKey, urgent bool) {
	priority := 0
	if urgent {
		priority = urgentPriority
	}
	e.ownerQueue(owner.Kind).add(reconcile.Request{NamespacedName: owner.NamespacedName}, priority)
}

// ownerQueue is the queue of the front door of owners of kind.
func (e *HarvesterEvents) ownerQueue(kind string) *queueRef {
	q, _ := e.owners.LoadOrStore(kind, &queueRef{})
	return q.(*queueRef)
}

// ImageChanged implements harvester.Notifier.
func (e *HarvesterEvents) ImageChanged(key types.NamespacedName) {
	e.images.mu.RLock()
	requests, ctx := e.imageRequests, e.ctx
	e.images.mu.RUnlock()
	if requests == nil {
		return
	}
	for _, req := range requests(ctx, key) {
		e.images.add(req, 0)
	}
}

// MachineSource is the source of Harvester events of the machines whose owners are of kind, for
// the controller of that kind.
func (e *HarvesterEvents) MachineSource(kind string) source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		e.ownerQueue(kind).set(q)
		return nil
	})
}

// ImageSource is the ImageSync controller's source of Harvester image events.
func (e *HarvesterEvents) ImageSource(requests func(context.Context, types.NamespacedName) []reconcile.Request) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		e.images.mu.Lock()
		e.imageRequests, e.ctx = requests, ctx
		e.images.mu.Unlock()
		e.images.set(q)
		return nil
	})
}

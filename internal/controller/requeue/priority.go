package requeue

import (
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// pollPriority is, in the controllers' work queues (controller-runtime's priority queue serves
// higher first), the priority of the provider's own safety-net polls: they look for what events
// usually report first, so they wait behind everything else. Creates and spec changes come in at
// 0, the initial list and resyncs at handler.LowPriority, and the Harvester changes that can make
// a machine Running or complete a deletion above them all (harvesterevents).
const pollPriority = handler.LowPriority

// AsPoll gives a requeue that only polls (it looks for what events usually report first) the
// poll priority, unless the result chose one.
func AsPoll(res reconcile.Result, err error) (reconcile.Result, error) {
	if err == nil && res.RequeueAfter > 0 && res.Priority == nil {
		res.Priority = ptr.To(pollPriority)
	}
	return res, err
}

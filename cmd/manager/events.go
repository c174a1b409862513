package main

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// eventsAPI is where a namespace's events go.
type eventsAPI int

const (
	eventsV1 eventsAPI = iota // events.k8s.io/v1, controller-runtime's GetEventRecorder
	coreV1                    // core/v1, through the old record API
	noEvents                  // dropped: the manager may write neither
)

// eventRecorder is the events.EventRecorder the reconcilers share. The manager's RBAC grants
// events.k8s.io/v1 Events, but the deployments made for the published provider (the Butler CLI's
// manifest, the published chart) grant only core/v1 events, and there client-go's broadcaster
// would log every refused event, an error line each. So it records events.k8s.io/v1 Events where
// the manager may create and patch them, else core/v1 Events where it may create and patch those,
// else none. It decides per namespace (an event goes to its object's namespace, and
// RBAC may differ between namespaces) on the first event there, so by then the caches have synced
// and the manager's RBAC is in place; it says once in the log when events fall back or are dropped.
type eventRecorder struct {
	eventsV1 events.EventRecorder
	coreV1   record.EventRecorder
	// mayWrite reports whether the manager may create and patch events of API group in namespace.
	mayWrite func(ctx context.Context, namespace, group string) (bool, error)
	log      logr.Logger

	mu     sync.Mutex
	apis   map[string]eventsAPI // by namespace, once decided
	logged map[string]bool      // what was said once
}

// newEventRecorder returns the manager's recorder for component name.
func newEventRecorder(mgr ctrl.Manager, name string, log logr.Logger) *eventRecorder {
	return &eventRecorder{
		eventsV1: mgr.GetEventRecorder(name),
		// The old API is deprecated, and the only one the deployments above let the manager write.
		coreV1:   mgr.GetEventRecorderFor(name), //nolint:staticcheck // SA1019: core/v1 Events on purpose, where events.k8s.io is refused
		mayWrite: mayWriteEvents(mgr.GetClient()),
		log:      log,
	}
}

// Eventf records an event, as events.EventRecorder does.
func (r *eventRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	switch r.apiFor(namespaceOf(regarding)) {
	case eventsV1:
		r.eventsV1.Eventf(regarding, related, eventtype, reason, action, note, args...)
	case coreV1:
		// The old record API has no action and no related object: the note says what happened.
		r.coreV1.Eventf(regarding, eventtype, reason, note, args...)
	case noEvents:
	}
}

// apiFor decides, once per namespace, where its events go; events wait while it asks, which
// happens once per namespace. A decision that could not be made
// (the API server did not answer) is not remembered: the event goes to events.k8s.io, as
// controller-runtime would send it, and the next event asks again.
func (r *eventRecorder) apiFor(namespace string) eventsAPI {
	r.mu.Lock()
	defer r.mu.Unlock()
	if api, ok := r.apis[namespace]; ok {
		return api
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	api := noEvents
	for _, choice := range []struct {
		group string
		api   eventsAPI
	}{{"events.k8s.io", eventsV1}, {"", coreV1}} {
		ok, err := r.mayWrite(ctx, namespace, choice.group)
		if err != nil {
			r.once("undecided", func() {
				r.log.Error(err, "Cannot tell which Events API the manager may write to (SelfSubjectAccessReview); recording events.k8s.io Events meanwhile. Logged once")
			})
			return eventsV1
		}
		if ok {
			api = choice.api
			break
		}
	}
	if r.apis == nil {
		r.apis = map[string]eventsAPI{}
	}
	r.apis[namespace] = api
	switch api {
	case coreV1:
		r.once("coreV1", func() {
			r.log.Info("Recording core/v1 Events: the manager may not create and patch events.events.k8s.io (as in the Butler CLI's and the published chart's RBAC). Logged once", "namespace", namespace)
		})
	case noEvents:
		r.once("noEvents", func() {
			r.log.Error(nil, "Recording no events: the manager may create and patch neither events.events.k8s.io nor core events; grant either (the chart and config/rbac grant events.k8s.io) and restart the manager, which decides once per namespace. Logged once", "namespace", namespace)
		})
	case eventsV1:
	}
	return api
}

// once runs say the first time what is said; r.mu is held.
func (r *eventRecorder) once(what string, say func()) {
	if r.logged[what] {
		return
	}
	if r.logged == nil {
		r.logged = map[string]bool{}
	}
	r.logged[what] = true
	say()
}

// namespaceOf is the namespace an event about obj goes to: client-go puts those of cluster-scoped
// objects in "default".
func namespaceOf(obj runtime.Object) string {
	if m, err := meta.Accessor(obj); err == nil && m.GetNamespace() != "" {
		return m.GetNamespace()
	}
	return metav1.NamespaceDefault
}

// mayWriteEvents asks the API server, with SelfSubjectAccessReviews (which every authenticated
// user may create), whether the manager may create and patch events of an API group in a
// namespace: both recorders patch to count repeated events.
func mayWriteEvents(c client.Client) func(ctx context.Context, namespace, group string) (bool, error) {
	return func(ctx context.Context, namespace, group string) (bool, error) {
		for _, verb := range []string{"create", "patch"} {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: "events"},
			}}
			if err := c.Create(ctx, review); err != nil {
				return false, err
			}
			if !review.Status.Allowed {
				return false, nil
			}
		}
		return true, nil
	}
}

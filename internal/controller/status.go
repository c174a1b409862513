package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// statusMemory remembers the status this manager last wrote for each object (by UID), so that a
// cache that has not caught up with a write cannot make the next one look unnecessary, lose what
// it recorded, or repeat an event.
type statusMemory[S any] struct {
	mu       sync.Mutex
	statuses map[types.NamespacedName]remembered[S]
}

type remembered[S any] struct {
	uid    types.UID
	status S
}

// remember stores status (a copy the caller no longer changes) as written for obj.
func (m *statusMemory[S]) remember(obj client.Object, status S) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.statuses == nil {
		m.statuses = map[types.NamespacedName]remembered[S]{}
	}
	m.statuses[client.ObjectKeyFromObject(obj)] = remembered[S]{uid: obj.GetUID(), status: status}
}

// last returns the status last written for this object (not for an earlier one of the same
// name). The caller copies it before changing it.
func (m *statusMemory[S]) last(obj client.Object) (S, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.statuses[client.ObjectKeyFromObject(obj)]
	if !ok || r.uid != obj.GetUID() {
		var zero S
		return zero, false
	}
	return r.status, true
}

func (m *statusMemory[S]) forget(obj client.Object) { m.forgetKey(client.ObjectKeyFromObject(obj)) }

func (m *statusMemory[S]) forgetKey(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.statuses, key)
}

// graceLeft says how much of grace is left of a problem that Degraded has reported since its
// last transition to True (all of it if Degraded is not True): a problem only the user can fix
// becomes a failure once it has lasted that long, so that a caller waiting for Failed can act,
// while a Secret created just after its MachineRequest still works.
func graceLeft(conditions []metav1.Condition, grace time.Duration) time.Duration {
	c := meta.FindStatusCondition(conditions, v1alpha1.ConditionDegraded)
	if c == nil || c.Status != metav1.ConditionTrue {
		return grace
	}
	return grace - time.Since(c.LastTransitionTime.Time)
}

package objstatus

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Memory remembers the status this manager last wrote for each object (by UID), so that a cache
// that has not caught up with a write cannot make the next one look unnecessary, lose what it
// recorded, or repeat an event. The zero Memory is empty and ready to use.
type Memory[S any] struct {
	mu       sync.Mutex
	statuses map[types.NamespacedName]remembered[S]
}

type remembered[S any] struct {
	uid    types.UID
	status S
}

// Remember stores status (a copy the caller no longer changes) as written for obj.
func (m *Memory[S]) Remember(obj client.Object, status S) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.statuses == nil {
		m.statuses = map[types.NamespacedName]remembered[S]{}
	}
	m.statuses[client.ObjectKeyFromObject(obj)] = remembered[S]{uid: obj.GetUID(), status: status}
}

// Last returns the status last written for this object (not for an earlier one of the same
// name). The caller copies it before changing it.
func (m *Memory[S]) Last(obj client.Object) (S, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.statuses[client.ObjectKeyFromObject(obj)]
	if !ok || r.uid != obj.GetUID() {
		var zero S
		return zero, false
	}
	return r.status, true
}

// Forget drops what is remembered of obj.
func (m *Memory[S]) Forget(obj client.Object) { m.ForgetKey(client.ObjectKeyFromObject(obj)) }

// ForgetKey drops what is remembered of the object of that key.
func (m *Memory[S]) ForgetKey(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.statuses, key)
}

package harvester

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// objectMemory remembers a time for each object the diagnosis looks at (when a VMI was first seen
// with a stale reason, when a disk's events were last read). It is kept by namespace and name, for
// the object of that name with one UID: an object recreated under the same name starts afresh,
// the machine's deletion forgets its VM's and disks' names (forgetDiagnosis), and it never holds
// more than one entry per name, however many objects come and go.
type objectMemory struct {
	m sync.Map // types.NamespacedName -> rememberedAt
}

type rememberedAt struct {
	uid types.UID
	at  time.Time
}

// load returns the time remembered for obj, if it is this very object's.
func (o *objectMemory) load(obj client.Object) (time.Time, bool) {
	v, ok := o.m.Load(client.ObjectKeyFromObject(obj))
	if !ok || v.(rememberedAt).uid != obj.GetUID() {
		return time.Time{}, false
	}
	return v.(rememberedAt).at, true
}

// loadOrStore returns the time remembered for obj, or remembers at.
func (o *objectMemory) loadOrStore(obj client.Object, at time.Time) (time.Time, bool) {
	if known, ok := o.load(obj); ok {
		return known, true
	}
	o.store(obj, at)
	return at, false
}

func (o *objectMemory) store(obj client.Object, at time.Time) {
	o.m.Store(client.ObjectKeyFromObject(obj), rememberedAt{uid: obj.GetUID(), at: at})
}

func (o *objectMemory) forget(key types.NamespacedName) { o.m.Delete(key) }

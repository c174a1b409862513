package harvester

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
)

// watchedKinds are the objects the provider owns on Harvester, watched by label in the machines'
// namespace only (never a cluster-wide Secret cache). Secrets by their metadata only: the data of
// a cloud-init Secret (a Talos configuration holds the cluster's keys) never sits in the
// manager's memory.
func watchedKinds() []client.Object {
	return []client.Object{&kubevirtv1.VirtualMachine{}, &kubevirtv1.VirtualMachineInstance{}, &corev1.PersistentVolumeClaim{}, secretMeta("", "")}
}

// newImage is an empty VirtualMachineImage (read as unstructured, see VirtualMachineImageGVK).
func newImage() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(VirtualMachineImageGVK)
	return u
}

// Notifier hears of the changes on Harvester that matter: machines are named by their owner (its
// kind, namespace and name, from their objects' labels and annotation); images by their own name (several ImageSyncs may wait for one image, and
// another part of Butler may have created it). It is called from the informers, so it must
// never block.
type Notifier interface {
	// MachineChanged names the owner whose object changed; urgent is set for changes
	// that can make it Running (a VMI's phase or addresses) or complete its deletion, which
	// should not wait behind other work.
	MachineChanged(owner OwnerKey, urgent bool)
	// ImageChanged names a VirtualMachineImage that appeared, disappeared or changed its import.
	ImageChanged(key types.NamespacedName)
}

// NewWatches says what the caches of each Harvester cluster hold, in the machines' namespace: the
// objects the provider owns, by label (never a cluster-wide Secret cache), and every image; notify,
// if not nil, hears of every change that matters to them. And, in a cache of their own, the
// namespace's Warning events (one field-selected watch per cluster, instead of an event list per
// disk or pod diagnosed).
func NewWatches(notify Notifier) []clustercache.Watches {
	return []clustercache.Watches{watches{notify: notify}, warningWatches{}, volumeWatches{}}
}

type watches struct{ notify Notifier }

func (w watches) Name() string { return ownedCache }

func (w watches) CacheOptions() cache.Options {
	return cache.Options{
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue}),
		// Images are few, and shared with the rest of Butler: all of them, not only ours.
		ByObject: map[client.Object]cache.ByObject{
			newImage():                           {Label: labels.Everything()},
			&kubevirtv1.VirtualMachineInstance{}: {Transform: trimVMI},
		},
		// KubeVirt and Harvester write VMs and VMIs from several field managers: their
		// managedFields would be most of what the cache holds, and nothing reads them.
		DefaultTransform: cache.TransformStripManagedFields(),
	}
}

func (w watches) Kinds() []clustercache.Watch {
	var out []clustercache.Watch
	for _, kind := range watchedKinds() {
		var handler toolscache.ResourceEventHandler
		if w.notify != nil {
			handler = notifier(w.notify)
		}
		watch := clustercache.Watch{Object: kind, Handler: handler}
		if _, isVM := kind.(*kubevirtv1.VirtualMachine); isVM {
			watch.Indexes = []clustercache.Index{vmsByClaimIndex}
		}
		out = append(out, watch)
	}
	image := clustercache.Watch{Object: newImage()}
	if w.notify != nil {
		image.Handler = imageNotifier(w.notify)
	}
	return append(out, image)
}

type warningWatches struct{}

func (warningWatches) Name() string { return warningsCache }

func (warningWatches) CacheOptions() cache.Options {
	return cache.Options{
		ByObject:         map[client.Object]cache.ByObject{&corev1.Event{}: {Field: fields.OneTermEqualSelector("type", corev1.EventTypeWarning)}},
		DefaultTransform: cache.TransformStripManagedFields(),
	}
}

func (warningWatches) Kinds() []clustercache.Watch {
	return []clustercache.Watch{{Object: &corev1.Event{}, Indexes: []clustercache.Index{{Field: eventsByObjectUID, Extract: func(o client.Object) []string {
		return []string{string(o.(*corev1.Event).InvolvedObject.UID)}
	}}}}}
}

// vmsByClaimIndex is the vmsByClaim index of a cache of VMs.
var vmsByClaimIndex = clustercache.Index{Field: vmsByClaim, Extract: func(o client.Object) []string {
	return mountedClaims(o.(*kubevirtv1.VirtualMachine))
}}

// volumeWatches caches the namespace's VMs that are not ours with only their name and mounted
// disks. With the owned cache's VMs, an index answers "which VMs use this disk" for each deletion,
// where a live list of all the namespace's VMs per deletion made deleting N machines cost N lists
// of N VMs. It leaves ours out (a set-based selector, which also matches VMs without the label):
// the owned cache holds them already, and every event of a VM watched twice is decoded twice.
type volumeWatches struct{}

func (volumeWatches) Name() string { return volumesCache }

func (volumeWatches) CacheOptions() cache.Options {
	notOurs, err := labels.NewRequirement(LabelManagedBy, selection.NotEquals, []string{ManagedByValue})
	if err != nil {
		panic(err) // constant, valid label key and value
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&kubevirtv1.VirtualMachine{}: {Label: labels.NewSelector().Add(*notOurs), Transform: trimToVolumes},
	}}
}

func (volumeWatches) Kinds() []clustercache.Watch {
	return []clustercache.Watch{{Object: &kubevirtv1.VirtualMachine{}, Indexes: []clustercache.Index{vmsByClaimIndex}}}
}

// trimToVolumes keeps of a VM its identity and the volumes of its template: a cache of every VM
// of a namespace (someone else's too) then holds little.
func trimToVolumes(obj any) (any, error) {
	vm, ok := obj.(*kubevirtv1.VirtualMachine)
	if !ok {
		return obj, nil
	}
	trimmed := &kubevirtv1.VirtualMachine{TypeMeta: vm.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Namespace: vm.Namespace, Name: vm.Name, UID: vm.UID, ResourceVersion: vm.ResourceVersion, DeletionTimestamp: vm.DeletionTimestamp,
	}}
	if vm.Spec.Template != nil {
		trimmed.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{Spec: kubevirtv1.VirtualMachineInstanceSpec{Volumes: vm.Spec.Template.Spec.Volumes}}
	}
	return trimmed, nil
}

// notifier turns informer events into MachineRequest notifications, dropping the updates that
// cannot change a MachineRequest's status (our own writes, resyncs), so that watching does not
// cause reconcile storms.
func notifier(notify Notifier) toolscache.ResourceEventHandler {
	send := func(obj any, urgent bool) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		o, ok := obj.(client.Object)
		if !ok {
			return
		}
		owner, ok := ownerKeyOf(o)
		if !ok {
			return
		}
		notify.MachineChanged(owner, urgent)
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if _, isVMI := obj.(*kubevirtv1.VirtualMachineInstance); isVMI {
				send(obj, false)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if matters(oldObj, newObj) {
				send(newObj, urgent(oldObj, newObj))
			}
		},
		// A deletion may complete a MachineRequest's deletion, or show its VM gone.
		DeleteFunc: func(obj any) { send(obj, true) },
	}
}

// imageNotifier reports images that appear, disappear or change their import conditions.
func imageNotifier(notify Notifier) toolscache.ResourceEventHandler {
	send := func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if o, ok := obj.(client.Object); ok {
			notify.ImageChanged(types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()})
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: send,
		UpdateFunc: func(oldObj, newObj any) {
			o, oldOK := oldObj.(*unstructured.Unstructured)
			n, newOK := newObj.(*unstructured.Unstructured)
			if oldOK && newOK && (!maps.Equal(imageConditions(o), imageConditions(n)) || (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil)) {
				send(newObj)
			}
		},
		DeleteFunc: send,
	}
}

// urgent reports whether an update that matters can make a machine Running (a VMI's phase or
// addresses) or shows its VM going away.
func urgent(oldObj, newObj any) bool {
	switch n := newObj.(type) {
	case *kubevirtv1.VirtualMachineInstance:
		o := oldObj.(*kubevirtv1.VirtualMachineInstance)
		return o.Status.Phase != n.Status.Phase || !equality.Semantic.DeepEqual(o.Status.Interfaces, n.Status.Interfaces)
	case *kubevirtv1.VirtualMachine:
		return n.DeletionTimestamp != nil
	}
	return false
}

// matters reports whether an update can change what a MachineRequest shows.
func matters(oldObj, newObj any) bool {
	switch n := newObj.(type) {
	case *kubevirtv1.VirtualMachineInstance:
		o := oldObj.(*kubevirtv1.VirtualMachineInstance)
		return o.Status.Phase != n.Status.Phase || !equality.Semantic.DeepEqual(o.Status.Interfaces, n.Status.Interfaces) ||
			!equality.Semantic.DeepEqual(o.Status.Conditions, n.Status.Conditions)
	case *kubevirtv1.VirtualMachine:
		o := oldObj.(*kubevirtv1.VirtualMachine)
		return o.Status.PrintableStatus != n.Status.PrintableStatus || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
			failureOf(o) != failureOf(n) ||
			// Taken over (succession.go): the owner that lost it learns at once.
			o.Labels[LabelMachineRequestUID] != n.Labels[LabelMachineRequestUID]
	case *corev1.PersistentVolumeClaim:
		o := oldObj.(*corev1.PersistentVolumeClaim)
		return o.Status.Phase != n.Status.Phase
	}
	return false
}

// failureOf is KubeVirt's Failure condition of a VM ("" without one): a diagnosis the provider
// reports at once.
func failureOf(vm *kubevirtv1.VirtualMachine) string {
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineFailure {
			return string(c.Status) + c.Reason + c.Message
		}
	}
	return ""
}

// trimVMI keeps of a VMI what the provider reads (its metadata and the status fields that say
// whether and where it runs, and why not): the spec repeats the VM's template, and the rest of the
// status (volume status, guest OS information, migration state) is never read. At 1000 machines
// that is memory the manager has no use for. managedFields go too, as for every cached object.
func trimVMI(obj any) (any, error) {
	vmi, ok := obj.(*kubevirtv1.VirtualMachineInstance)
	if !ok {
		return obj, nil
	}
	vmi.ManagedFields = nil
	vmi.Spec = kubevirtv1.VirtualMachineInstanceSpec{}
	vmi.Status = kubevirtv1.VirtualMachineInstanceStatus{
		Phase:                     vmi.Status.Phase,
		Conditions:                vmi.Status.Conditions,
		Interfaces:                vmi.Status.Interfaces,
		ActivePods:                vmi.Status.ActivePods,
		PhaseTransitionTimestamps: vmi.Status.PhaseTransitionTimestamps,
	}
	return vmi, nil
}

package harvester

import (
	"context"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// cacheSyncTimeout bounds the wait for a Harvester cluster's informers. Credentials without list
// or watch permission never sync: the provider then reads live and relies on polling.
const cacheSyncTimeout = 15 * time.Second

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

// Notifier hears of the changes on Harvester that matter: MachineRequests are named by their
// objects' annotation; images by their own name (several ImageSyncs may wait for one image, and
// another part of Butler may have created it). It is called from the informers, so it must
// never block.
type Notifier interface {
	// MachineChanged names the MachineRequest whose object changed; urgent is set for changes
	// that can make it Running (a VMI's phase or addresses) or complete its deletion, which
	// should not wait behind other work.
	MachineChanged(key types.NamespacedName, urgent bool)
	// ImageChanged names a VirtualMachineImage that appeared, disappeared or changed its import.
	ImageChanged(key types.NamespacedName)
}

// startCache starts informers for the objects we own in namespace, and for every image there,
// and sends an event whenever one of them changes in a way that matters. It returns nil if the
// informers do not sync (for example without list/watch permission).
func startCache(ctx context.Context, cfg *rest.Config, mapper meta.RESTMapper, namespace string, notify Notifier) cache.Cache {
	c, err := cache.New(cfg, cache.Options{
		Scheme:               remoteScheme,
		Mapper:               mapper,
		DefaultNamespaces:    map[string]cache.Config{namespace: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue}),
		// Images are few, and shared with the rest of Butler: all of them, not only ours.
		ByObject: map[client.Object]cache.ByObject{
			newImage():                           {Label: labels.Everything()},
			&kubevirtv1.VirtualMachineInstance{}: {Transform: trimVMI},
		},
		// KubeVirt and Harvester write VMs and VMIs from several field managers: their
		// managedFields would be most of what the cache holds, and nothing reads them.
		DefaultTransform: cache.TransformStripManagedFields(),
	})
	if err != nil {
		log.FromContext(ctx).Error(err, "Building the Harvester cache; reading live instead")
		return nil
	}
	for _, kind := range append(watchedKinds(), newImage()) {
		inf, err := c.GetInformer(ctx, kind, cache.BlockUntilSynced(false))
		if err != nil {
			log.FromContext(ctx).Error(err, "Watching Harvester; reading live instead")
			return nil
		}
		if notify == nil {
			continue
		}
		handler := notifier(notify)
		if _, isImage := kind.(*unstructured.Unstructured); isImage {
			handler = imageNotifier(notify)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil
		}
	}
	// The informers get their own context: if they cannot sync they are stopped here, rather than
	// retrying refused lists against Harvester for as long as the client lives.
	informerCtx, stopInformers := context.WithCancel(ctx)
	go func() { _ = c.Start(informerCtx) }()
	syncCtx, cancel := context.WithTimeout(ctx, cacheSyncTimeout)
	defer cancel()
	if !c.WaitForCacheSync(syncCtx) {
		stopInformers()
		log.FromContext(ctx).Info("Harvester informers did not sync (do the credentials allow list and watch?); reading live and polling instead", "namespace", namespace)
		return nil
	}
	context.AfterFunc(ctx, stopInformers) // they stop with the client
	return c
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
		ns, name, ok := strings.Cut(o.GetAnnotations()[AnnotationMachineRequest], "/")
		if !ok {
			return
		}
		notify.MachineChanged(types.NamespacedName{Namespace: ns, Name: name}, urgent)
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
			failureOf(o) != failureOf(n)
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

package harvester

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// cacheSyncTimeout bounds the wait for a Harvester cluster's informers. Credentials without list
// or watch permission never sync: the provider then reads live and relies on polling.
const cacheSyncTimeout = 15 * time.Second

// watchedKinds are the objects the provider owns on Harvester, watched by label in the machines'
// namespace only (never a cluster-wide Secret cache).
func watchedKinds() []client.Object {
	return []client.Object{&kubevirtv1.VirtualMachine{}, &kubevirtv1.VirtualMachineInstance{}, &corev1.PersistentVolumeClaim{}, &corev1.Secret{}}
}

// startCache starts informers for the objects we own in namespace and sends an event naming the
// MachineRequest whenever one of them changes in a way that matters to it. It returns nil if the
// informers do not sync (for example without list/watch permission).
func startCache(ctx context.Context, cfg *rest.Config, namespace string, notify chan<- event.GenericEvent) cache.Cache {
	c, err := cache.New(cfg, cache.Options{
		Scheme:               remoteScheme,
		DefaultNamespaces:    map[string]cache.Config{namespace: {}},
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue}),
	})
	if err != nil {
		log.FromContext(ctx).Error(err, "Building the Harvester cache; reading live instead")
		return nil
	}
	for _, kind := range watchedKinds() {
		inf, err := c.GetInformer(ctx, kind, cache.BlockUntilSynced(false))
		if err != nil {
			log.FromContext(ctx).Error(err, "Watching Harvester; reading live instead")
			return nil
		}
		if notify != nil {
			if _, err := inf.AddEventHandler(notifier(notify)); err != nil {
				return nil
			}
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

// notifier turns informer events into MachineRequest events, dropping the updates that cannot
// change a MachineRequest's status (our own writes, resyncs), so that watching does not cause
// reconcile storms.
func notifier(notify chan<- event.GenericEvent) toolscache.ResourceEventHandler {
	send := func(obj any) {
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
		notify <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if _, isVMI := obj.(*kubevirtv1.VirtualMachineInstance); isVMI {
				send(obj)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if matters(oldObj, newObj) {
				send(newObj)
			}
		},
		DeleteFunc: send,
	}
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
		return o.Status.PrintableStatus != n.Status.PrintableStatus || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
	case *corev1.PersistentVolumeClaim:
		o := oldObj.(*corev1.PersistentVolumeClaim)
		return o.Status.Phase != n.Status.Phase
	}
	return false
}

package clustercache

import (
	"context"
	"fmt"
	"runtime/pprof"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// cacheSyncTimeout bounds the wait for a cluster's informers. Credentials without list or watch
// permission never sync: the client then reads live, and its users rely on polling.
const cacheSyncTimeout = 15 * time.Second

// Watches is one cache of each cluster: what it holds, and who hears of its changes. Whoever knows
// the kinds gives it (for Harvester, the engine): the cluster cache itself knows none. Each
// Watches of a Cache is a cache of its own, started and retried on its own: one whose kinds the
// credentials may not list or watch leaves the others serving.
type Watches interface {
	// Name names the cache (see Cluster.CacheFor).
	Name() string
	// CacheOptions are the cache's selectors and transforms; the Scheme, Mapper and namespace
	// are the Cache's.
	CacheOptions() cache.Options
	// Kinds are the objects informed on, each with the handler of its events (nil: cached only).
	// It is called once per cache: the handlers may hold state of their own.
	Kinds() []Watch
}

// Watch is one kind the cache informs on, the handler of its events, and the field indexes that
// reads of it match on.
type Watch struct {
	Object  client.Object
	Handler toolscache.ResourceEventHandler
	Indexes []Index
}

// Index is a field index of a cached kind (client.MatchingFields reads it).
type Index struct {
	Field   string
	Extract client.IndexerFunc
}

// inform starts the informer of w's kind in c, with its indexes and handler.
func inform(ctx context.Context, c cache.Cache, w Watch) error {
	inf, err := c.GetInformer(ctx, w.Object, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	for _, index := range w.Indexes {
		if err := c.IndexField(ctx, w.Object, index.Field, index.Extract); err != nil {
			return fmt.Errorf("index %s: %w", index.Field, err)
		}
	}
	if w.Handler != nil {
		_, err = inf.AddEventHandler(w.Handler)
	}
	return err
}

// kindOf names obj's kind for a profile label: "Secret metadata" for a metadata-only watch.
func kindOf(obj client.Object, scheme *runtime.Scheme) string {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return fmt.Sprintf("%T", obj)
	}
	if _, metadataOnly := obj.(*metav1.PartialObjectMetadata); metadataOnly {
		return gvk.Kind + " metadata"
	}
	return gvk.Kind
}

// startCache starts informers for what watches names in namespace. It returns nil if they do not
// sync within cacheSyncTimeout (for example without list/watch permission).
func startCache(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper, namespace string, watches Watches) cache.Cache {
	opts := watches.CacheOptions()
	opts.Scheme, opts.Mapper = scheme, mapper
	opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	c, err := cache.New(cfg, opts)
	if err != nil {
		log.FromContext(ctx).Error(err, "Building the cache of a remote cluster; reading live instead")
		return nil
	}
	// The informers get their own context: if they cannot sync they are stopped here, rather than
	// retrying refused lists for as long as the client lives.
	informerCtx, stopInformers := context.WithCancel(ctx)
	go func() { _ = c.Start(informerCtx) }()
	syncCtx, cancel := context.WithTimeout(ctx, cacheSyncTimeout)
	defer cancel()
	// Each informer is added once the cache runs, so that it starts from a goroutine labelled with
	// its cache and kind: its goroutines (the watch's decoding, the handlers) inherit the labels,
	// and a CPU profile of the manager says which watch its samples are for.
	started := c.WaitForCacheSync(syncCtx) // none yet: true once the cache runs
	for _, w := range watches.Kinds() {
		if !started {
			break
		}
		var err error
		pprof.Do(ctx, pprof.Labels("cache", watches.Name(), "kind", kindOf(w.Object, scheme)), func(ctx context.Context) { err = inform(ctx, c, w) })
		if err != nil {
			log.FromContext(ctx).Error(err, "Watching a remote cluster; reading live instead", "cache", watches.Name())
			stopInformers()
			return nil
		}
	}
	if !started || !c.WaitForCacheSync(syncCtx) {
		stopInformers()
		log.FromContext(ctx).Info("Informers of a remote cluster did not sync (do the credentials allow list and watch?); reading live and polling instead", "cache", watches.Name(), "namespace", namespace)
		return nil
	}
	context.AfterFunc(ctx, stopInformers) // they stop with the client
	return c
}

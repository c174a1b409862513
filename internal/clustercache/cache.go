package clustercache

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
)

// Default client rate limits per Harvester cluster (client-go's own, 5 and 10, would throttle a
// bootstrap of a few dozen machines).
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// Defaults of the Cache.
const (
	// DefaultIdleTimeout stops a client nobody has asked for in this long.
	DefaultIdleTimeout = 15 * time.Minute
	// DefaultSecretRecheck is how long a read of a credentials Secret is trusted before the Secret
	// is read again: rotated credentials are noticed within it (the ProviderConfig checks notice
	// them too, and call Invalidate), and reconciles do not read the Secret each time.
	DefaultSecretRecheck = 10 * time.Second
	// DefaultCacheRetry is how soon informers that did not sync (credentials without list or
	// watch, an API that did not answer) are tried again, while reads go to the API meanwhile.
	DefaultCacheRetry = time.Minute
)

// Cache builds one client per distinct kubeconfig (content, endpoint and opt-in) and namespace, and reuses it for as long as the credentials Secret holds that kubeconfig:
// a change to the Secret's metadata alone keeps the client and its informers; new content (rotated
// credentials) gets a new client and retires the old one. Each client has informers on the objects
// Watches names in its namespace (see startCache); informers that do not sync are retried in
// the background. A janitor stops clients nobody has used for IdleTimeout.
type Cache struct {
	// SecretReader reads credentials Secrets from the management cluster. It should not be a
	// cached client, so that the manager needs no cluster-wide watch on Secrets.
	SecretReader client.Reader
	// QPS and Burst limit requests to each Harvester cluster (0: DefaultQPS and DefaultBurst).
	QPS   float32
	Burst int
	// Scheme knows the typed kinds read and written through the clients.
	Scheme *runtime.Scheme
	// Watches are the caches of each client, what each holds and who hears of its changes
	// (none: every read goes to the API).
	Watches []Watches
	// IdleTimeout (default DefaultIdleTimeout), SecretRecheck (DefaultSecretRecheck) and
	// CacheRetry (DefaultCacheRetry): see there.
	IdleTimeout   time.Duration
	SecretRecheck time.Duration
	CacheRetry    time.Duration
	// Context bounds the informers' and the janitor's lifetime (default: until Stop).
	Context context.Context

	// startInformers starts a client's informers, nil if they do not sync (default startCache;
	// tests replace it).
	startInformers func(ctx context.Context, cfg *rest.Config, mapper meta.RESTMapper, namespace string, watches Watches) client.Reader

	mu       sync.Mutex
	secrets  map[Credentials]*secretRead
	clients  map[clientKey]*cachedCluster
	building singleflight.Group
	janitor  sync.Once
	done     chan struct{}
}

// secretRead is what the last read of a credentials Secret gave.
type secretRead struct {
	at      time.Time
	content [sha256.Size]byte
	cfg     *rest.Config
}

// clientKey names a client: the kubeconfig it was built from, and the namespace it watches.
type clientKey struct {
	content   [sha256.Size]byte
	namespace string
}

type cachedCluster struct {
	cluster  *Cluster
	stop     context.CancelFunc
	lastUsed time.Time
}

// Get returns the cluster the credentials point at, with a client working in creds.Namespace.
// Every error it returns for a problem of the credentials is an *Error.
func (f *Cache) Get(ctx context.Context, creds Credentials) (*Cluster, error) {
	f.janitor.Do(f.startJanitor)
	read, err := f.credentials(ctx, creds)
	if err != nil {
		return nil, err
	}
	key := clientKey{content: read.content, namespace: creds.Namespace}
	if cluster := f.lookup(key); cluster != nil {
		return cluster, nil
	}
	// Built without the lock, so that other clusters' reconciles do not wait for informers to
	// sync, and once however many reconciles ask at the same time. The entry is complete and
	// registered before singleflight hands it to every waiting caller: they share it. A caller
	// waits no longer than its context allows; the build goes on without it (it runs under the
	// Cache's context), and the next caller finds its result.
	building := f.building.DoChan(fmt.Sprintf("%x/%s", key.content, key.namespace), func() (any, error) {
		if cluster := f.lookup(key); cluster != nil {
			return cluster, nil
		}
		entry, err := f.newCluster(rest.CopyConfig(read.cfg), creds.Namespace, read.content)
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.clients == nil {
			f.clients = map[clientKey]*cachedCluster{}
		}
		f.clients[key] = entry
		return entry.cluster, nil
	})
	var built singleflight.Result
	select {
	case built = <-building:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the client of %s to be built: %w", read.cfg.Host, context.Cause(ctx))
	}
	if err := built.Err; err != nil {
		return nil, &Error{Problem: CredentialsUnusable, Message: fmt.Sprintf("credentials Secret %s key %q: cannot build a client: %v", creds.secret(), creds.Key, err)}
	}
	return built.Val.(*Cluster), nil
}

// credentials returns the client config the credentials Secret holds, read again when the last
// read is older than SecretRecheck. New kubeconfig content retires the clients of the old.
func (f *Cache) credentials(ctx context.Context, creds Credentials) (*secretRead, error) {
	f.mu.Lock()
	last := f.secrets[creds]
	f.mu.Unlock()
	if last != nil && time.Since(last.at) < orDefaultDuration(f.SecretRecheck, DefaultSecretRecheck) {
		return last, nil
	}
	secret := &corev1.Secret{}
	if err := f.SecretReader.Get(ctx, client.ObjectKey{Namespace: creds.SecretNamespace, Name: creds.SecretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			f.forgetSecret(creds, last) // its clients are not used without it
			return nil, refuse(CredentialsUnusable,
				"credentials Secret %s does not exist: create it with the Harvester kubeconfig under key %q", creds.secret(), creds.Key)
		}
		return nil, fmt.Errorf("read credentials Secret %s: %w", creds.secret(), err)
	}
	kubeconfig, ok := secret.Data[creds.Key]
	if !ok || len(kubeconfig) == 0 {
		return nil, refuse(CredentialsUnusable,
			"credentials Secret %s has no key %q: put the Harvester kubeconfig there, or set the ProviderConfig's credentialsRef.key", creds.secret(), creds.Key)
	}
	// The opt-in to insecure kubeconfigs is the Secret's: whoever may write the credentials.
	allowInsecure := secret.Annotations[AnnotationAllowInsecure] == "true"
	read := &secretRead{at: time.Now(), content: contentKey(kubeconfig, creds.Endpoint, allowInsecure)}
	if last != nil && last.content == read.content {
		read.cfg = last.cfg // the same kubeconfig: the same client
	} else {
		cfg, err := RESTConfigFromKubeconfig(kubeconfig, KubeconfigOptions{Endpoint: creds.Endpoint, AllowInsecure: allowInsecure})
		if err != nil {
			f.forgetSecret(creds, last) // what it held before is not what it holds now
			problem := CredentialsUnusable
			if refused, ok := AsError(err); ok {
				problem = refused.Problem
			}
			return nil, refuse(problem, "credentials Secret %s key %q: %v", creds.secret(), creds.Key, err)
		}
		read.cfg = cfg
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.secrets == nil {
		f.secrets = map[Credentials]*secretRead{}
	}
	f.secrets[creds] = read
	if last != nil && last.content != read.content {
		f.retire(last.content) // rotated: the old informers go with the old kubeconfig
	}
	return read, nil
}

// forgetSecret drops what was read from a Secret that is gone or no longer holds usable
// credentials, and retires the clients built from it: nothing keeps using credentials their
// owner removed or replaced.
func (f *Cache) forgetSecret(creds Credentials, last *secretRead) {
	if last == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.secrets[creds] == last {
		delete(f.secrets, creds)
	}
	f.retire(last.content)
}

// contentKey identifies what a client is built from: the kubeconfig and the options applied to it
// (a client accepted for one opt-in is never handed to credentials without it).
func contentKey(kubeconfig []byte, endpoint string, allowInsecure bool) [sha256.Size]byte {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%d\x00%s\x00%t\x00", len(kubeconfig), endpoint, allowInsecure)
	_, _ = h.Write(kubeconfig)
	return [sha256.Size]byte(h.Sum(nil))
}

// Invalidate makes the next Get for these credentials read their Secret again, for example
// because its resourceVersion changed.
func (f *Cache) Invalidate(creds Credentials) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.secrets[creds]; r != nil {
		r2 := *r
		r2.at = time.Time{}
		f.secrets[creds] = &r2
	}
}

// lookup returns the client for key, if any, and marks it used.
func (f *Cache) lookup(key clientKey) *Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.clients[key]
	if !ok {
		return nil
	}
	c.lastUsed = time.Now()
	return c.cluster
}

// retire stops the clients built from content unless some credentials still hold it. Called with
// f.mu held.
func (f *Cache) retire(content [sha256.Size]byte) {
	for _, r := range f.secrets {
		if r.content == content {
			return
		}
	}
	for key, c := range f.clients {
		if key.content == content {
			c.stop()
			delete(f.clients, key)
		}
	}
}

// startJanitor stops idle clients in the background, until the factory's context ends or Stop.
func (f *Cache) startJanitor() {
	done := make(chan struct{})
	f.done = done
	ctx := f.Context
	if ctx == nil {
		ctx = context.Background()
	}
	idle := orDefaultDuration(f.IdleTimeout, DefaultIdleTimeout)
	go func() {
		tick := time.NewTicker(min(idle/4, time.Minute))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-tick.C:
				f.stopIdle(idle)
			}
		}
	}()
}

// stopIdle stops the clients nobody has asked for in idle.
func (f *Cache) stopIdle(idle time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, c := range f.clients {
		if time.Since(c.lastUsed) > idle {
			c.stop()
			delete(f.clients, key)
		}
	}
}

// Stop stops every client's informers and the janitor.
func (f *Cache) Stop() {
	f.janitor.Do(func() { f.done = make(chan struct{}) }) // a janitor that never started is stopped
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.done:
	default:
		close(f.done)
	}
	for key, c := range f.clients {
		c.stop()
		delete(f.clients, key)
	}
}

func (f *Cache) newCluster(cfg *rest.Config, namespace string, content [sha256.Size]byte) (*cachedCluster, error) {
	cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	if f.QPS > 0 {
		cfg.QPS = f.QPS
	}
	if f.Burst > 0 {
		cfg.Burst = f.Burst
	}
	// Uncompressed, as the management cluster is reached (see cmd/manager): Harvester is on the
	// network of the VMs the management cluster runs on, where gzip costs CPU on both sides and
	// saves bandwidth nobody lacks.
	cfg.DisableCompression = true
	cfg.Wrap(metrics.InstrumentHarvester)
	cfg.Wrap(withResponseHeaderTimeout)
	mapper, err := newRESTMapper(cfg)
	if err != nil {
		return nil, err
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: f.Scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		return nil, err
	}
	if c, err = withUnreadDeletes(c, cfg, httpClient); err != nil {
		return nil, err
	}
	// The version request takes no context: it gets a timeout of its own. Everything else is
	// bounded by the reconcile's context; the informers' watches must not be (a client timeout
	// would cut every watch when it runs out).
	versionCfg := rest.CopyConfig(cfg)
	versionCfg.Timeout = versionTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(versionCfg)
	if err != nil {
		return nil, err
	}
	parent := f.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := context.WithCancel(parent)
	cluster := &Cluster{client: c, namespace: namespace, server: cfg.Host, discovery: dc,
		trust: Trust{CAData: cfg.CAData, Insecure: cfg.Insecure}, digest: fmt.Sprintf("%x", sha256.Sum256(content[:]))}
	for _, w := range f.Watches {
		if informers := f.informers(ctx, cfg, mapper, namespace, w); informers != nil {
			cluster.useCache(w.Name(), informers)
			continue
		}
		// Reads go to the API until the informers sync, which is tried again in the
		// background: credentials granted list and watch later, or an API that answers again,
		// bring the cache back without waiting for the Secret to change.
		go f.retryCache(ctx, cluster, cfg, namespace, w)
	}
	return &cachedCluster{cluster: cluster, stop: stop, lastUsed: time.Now()}, nil
}

func (f *Cache) retryCache(ctx context.Context, cluster *Cluster, cfg *rest.Config, namespace string, w Watches) {
	every := orDefaultDuration(f.CacheRetry, DefaultCacheRetry)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if informers := f.informers(ctx, cfg, cluster.client.RESTMapper(), namespace, w); informers != nil {
			cluster.useCache(w.Name(), informers)
			return
		}
	}
}

// informers starts the informers of w for a client, sharing its REST mapper (what it has
// discovered of the API); nil when they do not sync.
func (f *Cache) informers(ctx context.Context, cfg *rest.Config, mapper meta.RESTMapper, namespace string, w Watches) client.Reader {
	if f.startInformers != nil {
		return f.startInformers(ctx, cfg, mapper, namespace, w)
	}
	if c := startCache(ctx, cfg, f.Scheme, mapper, namespace, w); c != nil {
		return c
	}
	return nil // not a typed nil in the interface
}

// versionTimeout bounds the preflight's version request (discovery takes no context).
const versionTimeout = 30 * time.Second

func orDefaultDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

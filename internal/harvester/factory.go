package harvester

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
)

// Credentials locates the kubeconfig of a Harvester cluster in the management cluster, and the
// namespace the provider works in there (the scope of its watches).
type Credentials struct {
	// Namespace is the Harvester namespace of the machines.
	Namespace       string
	SecretNamespace string
	SecretName      string
	// Key is the Secret data key holding the kubeconfig.
	Key string
	// Endpoint, when set, replaces the kubeconfig's server URL.
	Endpoint string
}

func (c Credentials) secret() string { return c.SecretNamespace + "/" + c.SecretName }

// Factory hands out a client for a Harvester cluster.
type Factory interface {
	ClusterFor(ctx context.Context, creds Credentials) (Cluster, error)
}

// Default client rate limits per Harvester cluster (client-go's own, 5 and 10, would throttle a
// bootstrap of a few dozen machines).
const (
	DefaultQPS   = 100
	DefaultBurst = 200
)

// credentialsRetry is how soon to look again when the credentials are missing or unusable.
const credentialsRetry = 30 * time.Second

// CachingFactory builds one client per credentials Secret and Harvester namespace and reuses it
// for as long as the Secret's resourceVersion stays the same; a changed Secret (rotated credentials)
// gets a new client. Each client has informers on the objects the provider owns in that namespace
// (see startCache), started on first use, stopped when the Secret changes or when no
// ProviderConfig has used the client for IdleTimeout.
type CachingFactory struct {
	// SecretReader reads credentials Secrets from the management cluster. It should not be a
	// cached client, so that the manager needs no cluster-wide watch on Secrets.
	SecretReader client.Reader
	// QPS and Burst limit requests to each Harvester cluster (0: DefaultQPS and DefaultBurst).
	QPS   float32
	Burst int
	// Notify, if set, receives an event naming a MachineRequest whenever Harvester changes one of
	// its objects in a way that matters (the MachineRequest controller watches it).
	Notify chan event.GenericEvent
	// IdleTimeout stops a Harvester client nobody asked for in this long (default 15 minutes).
	IdleTimeout time.Duration
	// Context bounds the informers' lifetime (default: they live until stopped).
	Context context.Context

	mu       sync.Mutex
	clients  map[Credentials]*cachedCluster
	building singleflight.Group
}

type cachedCluster struct {
	resourceVersion string
	cluster         Cluster
	stop            context.CancelFunc
	lastUsed        time.Time
}

// RemoteScheme knows the kinds the provider reads and writes on Harvester as typed objects.
func RemoteScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := kubevirtv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

var remoteScheme = RemoteScheme()

// ClusterFor returns the Harvester cluster the credentials point at.
func (f *CachingFactory) ClusterFor(ctx context.Context, creds Credentials) (Cluster, error) {
	secret := &corev1.Secret{}
	if err := f.SecretReader.Get(ctx, client.ObjectKey{Namespace: creds.SecretNamespace, Name: creds.SecretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, Waiting(v1alpha1.ReasonCredentialsUnavailable, credentialsRetry,
				"credentials Secret %s does not exist: create it with the Harvester kubeconfig under key %q", creds.secret(), creds.Key)
		}
		return nil, fmt.Errorf("read credentials Secret %s: %w", creds.secret(), err)
	}

	if cluster := f.cached(creds, secret.ResourceVersion); cluster != nil {
		return cluster, nil
	}
	kubeconfig, ok := secret.Data[creds.Key]
	if !ok || len(kubeconfig) == 0 {
		return nil, Waiting(v1alpha1.ReasonCredentialsUnavailable, credentialsRetry,
			"credentials Secret %s has no key %q: put the Harvester kubeconfig there, or set the ProviderConfig's credentialsRef.key", creds.secret(), creds.Key)
	}
	cfg, err := RESTConfigFromKubeconfig(kubeconfig, creds.Endpoint)
	if err != nil {
		return nil, Waiting(v1alpha1.ReasonCredentialsUnavailable, credentialsRetry,
			"credentials Secret %s key %q: %v", creds.secret(), creds.Key, err)
	}
	// Built without the lock, so that other clusters' reconciles do not wait for informers to
	// sync, and once per Secret version however many reconciles ask at the same time.
	built, err, _ := f.building.Do(fmt.Sprintf("%v/%s", creds, secret.ResourceVersion), func() (any, error) {
		if cluster := f.cached(creds, secret.ResourceVersion); cluster != nil {
			return cluster, nil
		}
		return f.newCluster(cfg, creds.Namespace)
	})
	if err != nil {
		return nil, Waiting(v1alpha1.ReasonCredentialsUnavailable, credentialsRetry,
			"credentials Secret %s key %q: cannot build a client: %v", creds.secret(), creds.Key, err)
	}
	entry, fresh := built.(*cachedCluster)
	if !fresh {
		return built.(Cluster), nil
	}
	entry.resourceVersion = secret.ResourceVersion
	f.mu.Lock()
	defer f.mu.Unlock()
	if other, ok := f.clients[creds]; ok && other != entry {
		other.stop()
	}
	if f.clients == nil {
		f.clients = map[Credentials]*cachedCluster{}
	}
	f.clients[creds] = entry
	return entry.cluster, nil
}

// cached returns the client built for this Secret version, if any, and stops clients of older
// versions and idle ones.
func (f *CachingFactory) cached(creds Credentials, resourceVersion string) Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopIdle()
	c, ok := f.clients[creds]
	switch {
	case !ok:
		return nil
	case c.resourceVersion != resourceVersion:
		c.stop() // rotated credentials: the old informers go with the old client
		delete(f.clients, creds)
		return nil
	}
	c.lastUsed = time.Now()
	return c.cluster
}

// stopIdle stops the clients nobody has asked for in IdleTimeout. Called with f.mu held.
func (f *CachingFactory) stopIdle() {
	idle := f.IdleTimeout
	if idle <= 0 {
		idle = 15 * time.Minute
	}
	for creds, c := range f.clients {
		if time.Since(c.lastUsed) > idle {
			c.stop()
			delete(f.clients, creds)
		}
	}
}

// Stop stops every client's informers.
func (f *CachingFactory) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for creds, c := range f.clients {
		c.stop()
		delete(f.clients, creds)
	}
}

func (f *CachingFactory) newCluster(cfg *rest.Config, namespace string) (*cachedCluster, error) {
	cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	if f.QPS > 0 {
		cfg.QPS = f.QPS
	}
	if f.Burst > 0 {
		cfg.Burst = f.Burst
	}
	cfg.Wrap(metrics.InstrumentHarvester)
	c, err := client.New(cfg, client.Options{Scheme: remoteScheme})
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	parent := f.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := context.WithCancel(parent)
	var cached client.Reader
	if informers := startCache(ctx, cfg, namespace, f.Notify); informers != nil {
		cached = informers
	}
	return &cachedCluster{cluster: NewCluster(c, cached, dc), stop: stop, lastUsed: time.Now()}, nil
}

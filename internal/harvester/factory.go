package harvester

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// Credentials locates the kubeconfig of a Harvester cluster in the management cluster.
type Credentials struct {
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

// credentialsRetry is how soon to look again when the credentials are missing or unusable.
const credentialsRetry = 30 * time.Second

// CachingFactory builds one client per credentials Secret and reuses it for as long as the
// Secret's resourceVersion stays the same; a changed Secret (rotated credentials) gets a new client.
type CachingFactory struct {
	// SecretReader reads credentials Secrets from the management cluster. It should not be a
	// cached client, so that the manager needs no cluster-wide watch on Secrets.
	SecretReader client.Reader
	// QPS and Burst limit requests to each Harvester cluster (0: client-go's defaults).
	QPS   float32
	Burst int

	mu      sync.Mutex
	clients map[Credentials]cachedCluster
}

type cachedCluster struct {
	resourceVersion string
	cluster         Cluster
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

	f.mu.Lock()
	defer f.mu.Unlock()
	if cached, ok := f.clients[creds]; ok && cached.resourceVersion == secret.ResourceVersion {
		return cached.cluster, nil
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
	cluster, err := f.newCluster(cfg)
	if err != nil {
		return nil, Waiting(v1alpha1.ReasonCredentialsUnavailable, credentialsRetry,
			"credentials Secret %s key %q: cannot build a client: %v", creds.secret(), creds.Key, err)
	}
	if f.clients == nil {
		f.clients = map[Credentials]cachedCluster{}
	}
	f.clients[creds] = cachedCluster{resourceVersion: secret.ResourceVersion, cluster: cluster}
	return cluster, nil
}

func (f *CachingFactory) newCluster(cfg *rest.Config) (Cluster, error) {
	if f.QPS > 0 {
		cfg.QPS = f.QPS
	}
	if f.Burst > 0 {
		cfg.Burst = f.Burst
	}
	c, err := client.New(cfg, client.Options{Scheme: remoteScheme})
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewCluster(c, dc), nil
}

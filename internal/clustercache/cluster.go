package clustercache

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Credentials locates the kubeconfig of a cluster in the management cluster, and the namespace
// the client works in there (the scope of its watches).
type Credentials struct {
	// Namespace is the namespace on the cluster the client works in.
	Namespace       string
	SecretNamespace string
	SecretName      string
	// Key is the Secret data key holding the kubeconfig.
	Key string
	// Endpoint (the ProviderConfig's spec.harvester.endpoint), when set, replaces the
	// kubeconfig's server URL if it cannot take the credentials elsewhere (KubeconfigOptions).
	Endpoint string
}

func (c Credentials) secret() string { return c.SecretNamespace + "/" + c.SecretName }

// IdentityNamespace is the namespace whose UID identifies a cluster: every Kubernetes cluster has
// one, it is never deleted, and its UID is the same however the cluster is reached.
const IdentityNamespace = metav1.NamespaceSystem

// ClusterIdentity names a cluster.
type ClusterIdentity struct {
	// ID is the UID of the cluster's kube-system namespace. It stays the same whichever URL or
	// credentials reach the cluster (its VIP, a DNS name, Rancher's proxy), so a machine recorded
	// with it is recognised after credentials are rotated or the endpoint changes, and never
	// looked for on another cluster.
	ID string
	// Server is the API server URL the client talks to, for messages.
	Server string
}

// Cluster is one cluster reached with one kubeconfig, working in one namespace: a client, the
// cache of what Watches names there once its informers have synced, and whatever its users
// attach to it for as long as it lives.
type Cluster struct {
	client client.Client
	// caches holds a *cacheReader per Watches name, once its informers have synced.
	caches    sync.Map
	namespace string
	server    string
	discovery discovery.ServerVersionInterface

	// trust is how the client trusts the server; digest changes when the kubeconfig does.
	trust  Trust
	digest string

	idMu sync.Mutex
	id   string

	attachments sync.Map
}

type cacheReader struct{ client.Reader }

// NewCluster returns a Cluster working through c in namespace on the cluster at server; caches
// (by Watches name) serve reads in namespace, and dc (optional) asks for the server's version. The
// Cache builds its Clusters this way; tests build them over fakes.
func NewCluster(c client.Client, caches map[string]client.Reader, dc discovery.ServerVersionInterface, server, namespace string) *Cluster {
	cl := &Cluster{client: c, server: server, namespace: namespace, discovery: dc}
	for name, cached := range caches {
		cl.useCache(name, cached)
	}
	return cl
}

// Client writes, and reads live.
func (c *Cluster) Client() client.Client { return c.client }

// Namespace is the namespace the client works in ("" for a Cluster that works in all).
func (c *Cluster) Namespace() string { return c.namespace }

// Server is the API server URL, for messages.
func (c *Cluster) Server() string { return c.server }

// CacheFor returns the cache of the Watches called name that serves reads in namespace, nil if
// none does (yet).
func (c *Cluster) CacheFor(name, namespace string) client.Reader {
	if c.namespace != "" && namespace != c.namespace {
		return nil
	}
	if r, ok := c.caches.Load(name); ok {
		return r.(*cacheReader)
	}
	return nil
}

// useCache starts serving reads of the Watches called name from cached (nil: live reads only).
func (c *Cluster) useCache(name string, cached client.Reader) {
	if cached != nil {
		c.caches.Store(name, &cacheReader{cached})
	}
}

// Trust is how a client of the cluster trusts its API server, as its kubeconfig says: the CA
// it pins (none: the system's roots), or no verification at all (allowed only by the credentials
// Secret's annotation).
type Trust struct {
	CAData   []byte
	Insecure bool
}

// Trust is how this client trusts the API server (see Server): whoever else is handed the same
// server trusts it the same way.
func (c *Cluster) Trust() Trust { return c.trust }

// SetTrust says how the client trusts its server: the Cache sets it from the kubeconfig, tests
// over fakes here. Call it before the Cluster is shared.
func (c *Cluster) SetTrust(t Trust) { c.trust = t }

// CredentialsDigest changes whenever the kubeconfig the client was built from does (a rotated
// token, another server or CA). It is a hash of a hash of the kubeconfig, so it reveals nothing of
// the credentials; "" for a Cluster not built by the Cache.
func (c *Cluster) CredentialsDigest() string { return c.digest }

// ServerVersion asks the API server for its version (git version, e.g. v1.33.3+rke2r1).
func (c *Cluster) ServerVersion() (string, error) {
	if c.discovery == nil {
		return "", fmt.Errorf("no discovery client")
	}
	v, err := c.discovery.ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// Identity reads the cluster's identity, once per client; a failed read is tried again next time.
func (c *Cluster) Identity(ctx context.Context) (ClusterIdentity, error) {
	c.idMu.Lock()
	defer c.idMu.Unlock()
	if c.id == "" {
		ns := &corev1.Namespace{}
		if err := c.client.Get(ctx, client.ObjectKey{Name: IdentityNamespace}, ns); err != nil {
			return ClusterIdentity{}, err
		}
		c.id = string(ns.UID)
	}
	return ClusterIdentity{ID: c.id, Server: c.server}, nil
}

// IdentityAction says what Identity reads, for messages about its errors.
const IdentityAction = "get Namespace " + IdentityNamespace + " (which identifies the cluster)"

// Attachment returns what is attached to the cluster under key, attaching create() first if
// nothing is: users keep per-cluster state here (memories, rate limits) that lives and dies with
// the client.
func (c *Cluster) Attachment(key any, create func() any) any {
	if v, ok := c.attachments.Load(key); ok {
		return v
	}
	v, _ := c.attachments.LoadOrStore(key, create())
	return v
}

package harvester

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
)

// Credentials locate a Harvester cluster's kubeconfig and the namespace machines are created in.
type Credentials = clustercache.Credentials

// Connector hands out the engine of the Harvester cluster that credentials reach.
type Connector interface {
	ClusterFor(ctx context.Context, creds Credentials) (Cluster, error)
	// Invalidate makes the next ClusterFor read the credentials' Secret again: it changed.
	Invalidate(creds Credentials)
}

// Clusters is the Connector over a clustercache.Cache: one engine per cached client, living and
// dying with it (its memories are the cluster's attachment).
type Clusters struct {
	Cache *clustercache.Cache
}

// NewClusters returns the Connector over cache, which it completes with what the engine reads and
// watches: the kinds of RemoteScheme, and the objects of NewWatches, whose changes notify hears
// of (nil: nobody).
func NewClusters(cache *clustercache.Cache, notify Notifier) *Clusters {
	cache.Scheme = remoteScheme
	cache.Watches = NewWatches(notify)
	return &Clusters{Cache: cache}
}

type engineKey struct{}

// ClusterFor returns the engine of the cluster the credentials reach. A problem of the
// credentials is a wait with the reason that names it.
func (c *Clusters) ClusterFor(ctx context.Context, creds Credentials) (Cluster, error) {
	rc, err := c.Cache.Get(ctx, creds)
	if err != nil {
		return nil, credentialsError(err)
	}
	return rc.Attachment(engineKey{}, func() any { return NewCluster(rc) }).(Cluster), nil
}

// Invalidate implements Connector.
func (c *Clusters) Invalidate(creds Credentials) { c.Cache.Invalidate(creds) }

// credentialsRetry is how soon to look again when the credentials are missing or unusable.
const credentialsRetry = 30 * time.Second

// credentialsReasons name the cluster cache's problems in the engine's words.
var credentialsReasons = map[clustercache.Problem]string{
	clustercache.CredentialsUnusable: reasons.CredentialsUnavailable,
	clustercache.EndpointUntrusted:   reasons.UntrustedEndpoint,
	clustercache.ConnectionInsecure:  reasons.InsecureCredentials,
	clustercache.EndpointInvalid:     ReasonInvalidEndpoint,
}

func credentialsError(err error) error {
	if e, ok := clustercache.AsError(err); ok {
		return Waiting(credentialsReasons[e.Problem], credentialsRetry, "%s", e.Message)
	}
	return err
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
	if err := cdiv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

var remoteScheme = RemoteScheme()

package clustercache

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// testCA is a self-signed CA certificate, PEM and base64, as certificate-authority-data holds it:
// a client is built from the kubeconfig, so it must parse.
var testCA = sync.OnceValue(func() string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "harvester-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
})

func kubeconfigFor(token string) []byte {
	return []byte("apiVersion: v1\nkind: Config\nclusters: [{name: h, cluster: {server: https://harvester.example:6443, certificate-authority-data: " + testCA() + "}}]\n" +
		"users: [{name: u, user: {token: " + token + "}}]\ncontexts: [{name: h, context: {cluster: h, user: u}}]\ncurrent-context: h\n")
}

// factoryFixture is a Cache over a fake management cluster holding one credentials Secret,
// counting Secret reads and informer starts; informers "sync" unless failing is set.
type factoryFixture struct {
	f       *Cache
	c       client.Client
	reads   atomic.Int32
	starts  atomic.Int32
	failing atomic.Bool
	// otherStarts and otherRefused are those of the second cache, "warnings".
	otherStarts  atomic.Int32
	otherRefused atomic.Bool
	creds        Credentials
	informer     client.Reader
}

func newFactoryFixture(t *testing.T) *factoryFixture {
	t.Helper()
	x := &factoryFixture{creds: Credentials{Namespace: "vms", SecretNamespace: "butler-system", SecretName: "hv", Key: "kubeconfig"}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hv", Namespace: "butler-system"}, Data: map[string][]byte{"kubeconfig": kubeconfigFor("first")}}
	x.c = fake.NewClientBuilder().WithObjects(secret).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				x.reads.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	x.informer = fake.NewClientBuilder().Build()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	x.f = &Cache{SecretReader: x.c, Context: ctx, CacheRetry: 20 * time.Millisecond,
		Watches: []Watches{namedWatches("owned"), namedWatches("warnings")},
		startInformers: func(ctx context.Context, _ *rest.Config, _ meta.RESTMapper, _ string, w Watches) client.Reader {
			if w.Name() != "owned" {
				x.otherStarts.Add(1)
				if x.otherRefused.Load() {
					return nil
				}
				return x.informer
			}
			x.starts.Add(1)
			if x.failing.Load() {
				return nil
			}
			return x.informer
		}}
	t.Cleanup(x.f.Stop)
	return x
}

func (x *factoryFixture) cluster(t *testing.T) *Cluster {
	t.Helper()
	c, err := x.f.Get(context.Background(), x.creds)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (x *factoryFixture) updateSecret(t *testing.T, change func(*corev1.Secret)) {
	t.Helper()
	s := &corev1.Secret{}
	if err := x.c.Get(context.Background(), client.ObjectKey{Namespace: "butler-system", Name: "hv"}, s); err != nil {
		t.Fatal(err)
	}
	change(s)
	if err := x.c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// The Secret is not read on every call; a metadata-only change keeps the client and its
// informers; new content (rotated credentials) gets a new client, and the old one is stopped.
func TestCacheRotation(t *testing.T) {
	x := newFactoryFixture(t)
	first := x.cluster(t)
	for range 10 {
		if x.cluster(t) != first {
			t.Fatal("a second client for unchanged credentials")
		}
	}
	if n := x.reads.Load(); n != 1 {
		t.Fatalf("%d Secret reads for 11 calls within the recheck interval, want 1", n)
	}

	x.updateSecret(t, func(s *corev1.Secret) { s.Labels = map[string]string{"touched": "yes"} })
	before := x.reads.Load()
	x.f.Invalidate(x.creds)
	if x.cluster(t) != first {
		t.Fatal("a metadata-only change rebuilt the client")
	}
	if n := x.reads.Load() - before; n != 1 {
		t.Fatalf("%d Secret reads after Invalidate, want 1", n)
	}

	x.updateSecret(t, func(s *corev1.Secret) { s.Data["kubeconfig"] = kubeconfigFor("rotated") })
	x.f.Invalidate(x.creds)
	second := x.cluster(t)
	if second == first || x.starts.Load() != 2 {
		t.Fatalf("rotated credentials kept the old client (informer starts %d)", x.starts.Load())
	}
	x.f.mu.Lock()
	n := len(x.f.clients)
	x.f.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d clients after the rotation: the old one was not retired", n)
	}
}

// Credentials whose Secret is deleted, or replaced by an unusable kubeconfig, stop being used: the
// cached read and the clients built from it are dropped, and nothing is served from them.
func TestCacheDropsCredentialsThatAreGone(t *testing.T) {
	for name, change := range map[string]func(t *testing.T, x *factoryFixture){
		"Secret deleted": func(t *testing.T, x *factoryFixture) {
			if err := x.c.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hv", Namespace: "butler-system"}}); err != nil {
				t.Fatal(err)
			}
		},
		"kubeconfig unusable": func(t *testing.T, x *factoryFixture) {
			x.updateSecret(t, func(s *corev1.Secret) { s.Data["kubeconfig"] = []byte("not a kubeconfig") })
		},
	} {
		t.Run(name, func(t *testing.T) {
			x := newFactoryFixture(t)
			x.cluster(t)
			change(t, x)
			x.f.Invalidate(x.creds)
			if _, err := x.f.Get(context.Background(), x.creds); err == nil {
				t.Fatal("credentials that are gone still served a client")
			}
			x.f.mu.Lock()
			clients, reads := len(x.f.clients), len(x.f.secrets)
			x.f.mu.Unlock()
			if clients != 0 || reads != 0 {
				t.Fatalf("%d clients and %d Secret reads kept after the credentials went", clients, reads)
			}
		})
	}
}

// Many reconciles asking at once for the same new credentials get one client (run with -race).
func TestCacheConcurrentCallsShareOneClient(t *testing.T) {
	x := newFactoryFixture(t)
	var wg sync.WaitGroup
	got := make([]*Cluster, 50)
	for i := range got {
		wg.Go(func() {
			c, err := x.f.Get(context.Background(), x.creds)
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		})
	}
	wg.Wait()
	for _, c := range got {
		if c != got[0] {
			t.Fatal("concurrent callers got different clients")
		}
	}
	if n := x.starts.Load(); n != 1 {
		t.Fatalf("informers started %d times, want 1", n)
	}
}

// A client nobody uses is stopped by the janitor; the next call builds a new one.
func TestCacheJanitorStopsIdleClients(t *testing.T) {
	x := newFactoryFixture(t)
	x.f.IdleTimeout = 40 * time.Millisecond
	first := x.cluster(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		x.f.mu.Lock()
		n := len(x.f.clients)
		x.f.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle client was never stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if x.cluster(t) == first {
		t.Fatal("a stopped client was handed out again")
	}
}

// Informers that do not sync are tried again in the background; the client reads live meanwhile
// and from the cache once they sync.
func TestCacheRetriesInformersInTheBackground(t *testing.T) {
	x := newFactoryFixture(t)
	x.failing.Store(true)
	m := x.cluster(t)
	if m.CacheFor("owned", "vms") != nil {
		t.Fatal("a cache is used although the informers did not sync")
	}
	if m.CacheFor("warnings", "vms") == nil {
		t.Fatal("a cache that synced is not used because another did not")
	}
	time.Sleep(100 * time.Millisecond) // a few failed retries
	x.failing.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for m.CacheFor("owned", "vms") == nil {
		if time.Now().After(deadline) {
			t.Fatalf("informers never retried into use (%d starts)", x.starts.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// namedWatches is a Watches of no kinds (the fixture replaces the informers).
type namedWatches string

func (w namedWatches) Name() string                { return string(w) }
func (w namedWatches) CacheOptions() cache.Options { return cache.Options{} }
func (w namedWatches) Kinds() []Watch              { return nil }

// Each cache of a cluster stands alone: one whose kinds the credentials may not watch leaves the
// others serving, is retried on its own, and reads of the other namespace get none.
func TestCachesOfAClusterStandAlone(t *testing.T) {
	x := newFactoryFixture(t)
	x.otherRefused.Store(true)
	m := x.cluster(t)
	if m.CacheFor("owned", "vms") == nil || m.CacheFor("warnings", "vms") != nil {
		t.Fatal("the caches do not stand alone")
	}
	if m.CacheFor("owned", "elsewhere") != nil {
		t.Fatal("a cache of namespace vms served another namespace")
	}
	x.otherRefused.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for m.CacheFor("warnings", "vms") == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the refused cache was never retried into use (%d starts)", x.otherStarts.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if x.starts.Load() != 1 {
		t.Fatalf("the cache that synced was started %d times", x.starts.Load())
	}
}

// Harvester is asked for uncompressed answers, as the management cluster is (see newCluster).
func TestHarvesterIsAskedForUncompressedAnswers(t *testing.T) {
	x := newFactoryFixture(t)
	start := x.f.startInformers
	var compressed atomic.Bool
	x.f.startInformers = func(ctx context.Context, cfg *rest.Config, mapper meta.RESTMapper, namespace string, w Watches) client.Reader {
		if !cfg.DisableCompression {
			compressed.Store(true)
		}
		return start(ctx, cfg, mapper, namespace, w)
	}
	c := x.cluster(t)
	if c.CacheFor("owned", "vms") == nil {
		t.Fatal("no cache started")
	}
	if compressed.Load() {
		t.Fatal("the informers' config asks for compressed answers")
	}
}

// A caller waits for a client being built no longer than its context allows (a build held up by
// a hung request would otherwise hold every reconcile of the cluster with it); the build goes on,
// and the next caller gets its client.
func TestWaitingForABuildEndsWithTheCallersContext(t *testing.T) {
	x := newFactoryFixture(t)
	start := x.f.startInformers
	release := make(chan struct{})
	x.f.startInformers = func(ctx context.Context, cfg *rest.Config, mapper meta.RESTMapper, namespace string, w Watches) client.Reader {
		<-release
		return start(ctx, cfg, mapper, namespace, w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() {
		_, err := x.f.Get(ctx, x.creds)
		returned <- err
	}()
	select {
	case err := <-returned:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get while the build hangs = %v, want the caller's deadline", err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Get still waits for the build 5 s past its deadline")
	}
	close(release)
	c := x.cluster(t)
	if c.CacheFor("owned", "vms") == nil {
		t.Fatal("the build that outlived its first caller did not serve the next")
	}
	if n := x.starts.Load(); n != 1 {
		t.Fatalf("informers started %d times, want 1 (the first build, reused)", n)
	}
}

// Every Harvester client and informer gives up a request without an answer (see
// withResponseHeaderTimeout): the config they are built from carries the bound.
func TestHarvesterRequestsWithoutAnAnswerAreGivenUp(t *testing.T) {
	defer func(d time.Duration) { responseHeaderTimeout = d }(responseHeaderTimeout)
	responseHeaderTimeout = 50 * time.Millisecond
	x := newFactoryFixture(t)
	start := x.f.startInformers
	var built atomic.Pointer[rest.Config]
	x.f.startInformers = func(ctx context.Context, cfg *rest.Config, mapper meta.RESTMapper, namespace string, w Watches) client.Reader {
		built.Store(cfg)
		return start(ctx, cfg, mapper, namespace, w)
	}
	x.cluster(t)
	cfg := built.Load()
	if cfg == nil || cfg.WrapTransport == nil {
		t.Fatal("the informers' config wraps no transport")
	}
	hung := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done()
		return nil, r.Context().Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "https://harvester.example:6443/apis/kubevirt.io/v1/namespaces/vms/virtualmachines?watch=true", nil)
	resp, err := cfg.WrapTransport(hung).RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, errNoResponseHeaders) {
		t.Fatalf("a request to Harvester without an answer = %v, want %v", err, errNoResponseHeaders)
	}
}

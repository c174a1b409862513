package sim

import (
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ProxyFaults are the faults a FaultProxy injects, each into a random share of requests. The
// shares add up: a request gets at most one fault, so their sum must not exceed 1.
type ProxyFaults struct {
	// ErrorRate is the share of requests answered with 500, 503 or 429 (with Retry-After).
	ErrorRate float64
	// TimeoutRate is the share of requests that hang until the client gives up.
	TimeoutRate float64
	// ConflictRate is the share of writes (POST, PUT, PATCH, DELETE) answered with 409 Conflict
	// without reaching the API server, as the API server answers a write that lost a race: a
	// stale resourceVersion, or a contended ResourceQuota on a create.
	ConflictRate float64
	// DropRate is the share of writes that the API server applies and whose response is then lost:
	// the connection is reset, or hangs until the client gives up. The client gets an error
	// although the object was created, changed or deleted, as after a load balancer failure.
	DropRate float64
	// Latency is added to every request.
	Latency time.Duration
	// Seed makes the choice of requests repeatable (0: random).
	Seed uint64
}

// fault is what the proxy does to one request.
type fault int

const (
	faultNone fault = iota
	faultInternalError
	faultUnavailable
	faultThrottled
	faultTimeout
	faultConflict
	faultDropReset
	faultDropHang
)

// FaultProxy is an HTTPS reverse proxy in front of an API server that injects API errors,
// timeouts, conflicts, lost responses and latency. Requests go upstream with the proxy's own
// credentials.
type FaultProxy struct {
	server *httptest.Server
	// closed ends the requests that hang.
	closed chan struct{}

	mu     sync.Mutex
	faults ProxyFaults
	rng    *rand.Rand
	// hangWatches hangs every watch request (see HangWatches).
	hangWatches atomic.Bool

	// Requests and Writes count the requests the proxy has seen; Errors (500, 503, 429), Timeouts,
	// Conflicts and Dropped (writes applied upstream whose response was lost) what it injected.
	Requests, Writes, Errors, Timeouts, Conflicts, Dropped atomic.Int64
}

// NewFaultProxy starts a proxy to the API server at upstream, injecting no faults yet.
func NewFaultProxy(upstream *rest.Config) (*FaultProxy, error) {
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(serverURL(upstream.Host))
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.FlushInterval = -1 // stream watches
	forward := func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Authorization") // upstream sees the proxy's own credentials
		rp.ServeHTTP(w, r)
	}
	//nolint:gosec // G404: only picks which test requests fail; SetFaults reseeds it for replayable runs
	p := &FaultProxy{rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0)), closed: make(chan struct{})}
	p.server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Requests.Add(1)
		write := isWrite(r.Method)
		if write {
			p.Writes.Add(1)
		}
		if p.hangWatches.Load() && r.URL.Query().Get("watch") == "true" {
			p.Timeouts.Add(1)
			p.hang(r)
			return
		}
		latency, f := p.pick(write)
		if latency > 0 {
			time.Sleep(latency)
		}
		switch f {
		case faultNone:
			forward(w, r)
		case faultTimeout:
			p.Timeouts.Add(1)
			p.hang(r)
		case faultInternalError:
			p.Errors.Add(1)
			writeStatus(w, apierrors.NewInternalError(errInjected))
		case faultUnavailable:
			p.Errors.Add(1)
			writeStatus(w, apierrors.NewServiceUnavailable(errInjected.Error()))
		case faultThrottled:
			p.Errors.Add(1)
			writeStatus(w, apierrors.NewTooManyRequests(errInjected.Error(), 1))
		case faultConflict:
			p.Conflicts.Add(1)
			resource, name := resourceOf(r.URL.Path)
			writeStatus(w, apierrors.NewConflict(resource, name, errInjected))
		case faultDropReset, faultDropHang:
			p.Dropped.Add(1)
			// The whole response is read from upstream, so the write is done when it is dropped.
			forward(httptest.NewRecorder(), r)
			if f == faultDropReset {
				reset(w)
			} else {
				p.hang(r)
			}
		}
	}))
	return p, nil
}

var errInjected = errors.New("injected by the simulated Harvester's fault proxy")

func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// SetFaults replaces the faults injected from now on.
func (p *FaultProxy) SetFaults(f ProxyFaults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
	if f.Seed != 0 {
		p.rng = rand.New(rand.NewPCG(f.Seed, 0)) //nolint:gosec // G404: seeded so a chaos run's faults can be replayed; nothing secret depends on it
	}
}

// pick draws the fault of one request. Reads and writes draw alike, so that the rates of the
// faults that only writes get are shares of the writes.
func (p *FaultProxy) pick(write bool) (time.Duration, fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.faults
	x := p.rng.Float64()
	switch {
	case x < f.ErrorRate:
		return f.Latency, []fault{faultInternalError, faultUnavailable, faultThrottled}[p.rng.IntN(3)]
	case x < f.ErrorRate+f.TimeoutRate:
		return f.Latency, faultTimeout
	case !write: // the rest are faults of writes only
	case x < f.ErrorRate+f.TimeoutRate+f.ConflictRate:
		return f.Latency, faultConflict
	case x < f.ErrorRate+f.TimeoutRate+f.ConflictRate+f.DropRate:
		return f.Latency, []fault{faultDropReset, faultDropHang}[p.rng.IntN(2)]
	}
	return f.Latency, faultNone
}

// hang holds the request until the client gives up (its timeout ends the request) or the proxy
// closes. The body is read first: only then does the server watch the connection, and cancel the
// request's context when the client closes it.
func (p *FaultProxy) hang(r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-p.closed:
	}
}

// reset closes the client's connection with a TCP reset, before any byte of the response: the
// client reads "connection reset by peer" rather than a clean end of stream.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // the server closes the connection instead
	}
	raw := conn
	if tc, ok := conn.(*tls.Conn); ok {
		raw = tc.NetConn() // closing the tls.Conn would first send a close_notify alert
	}
	if tcp, ok := raw.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // close sends RST
	}
	_ = raw.Close()
}

// writeStatus answers with a Status, encoded as the API server encodes it.
func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.Status()
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	w.Header().Set("Content-Type", "application/json")
	if status.Details != nil && status.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(status.Details.RetryAfterSeconds)))
	}
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status) // the client may have gone; nothing to do about it
}

// resourceOf returns the resource and object name an API path addresses
// (/api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]], /apis/<group>/<version>/...),
// for the details of an injected Status. The name is empty for a create.
func resourceOf(path string) (schema.GroupResource, string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var gr schema.GroupResource
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gr.Group, parts = parts[1], parts[3:]
	default:
		return gr, ""
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:] // a namespaced resource; /api/v1/namespaces/<ns> is the namespace itself
	}
	gr.Resource = parts[0]
	if len(parts) >= 2 {
		return gr, parts[1]
	}
	return gr, ""
}

// HangWatches makes every watch request from now on hang until its client gives up (or until
// HangWatches(false)), as a load balancer that takes a request and never answers it would; lists,
// reads and writes still pass. With CutConnections, the informers of a client lose their watches
// and cannot start new ones: whatever they do not see then is what the client gets wrong.
func (p *FaultProxy) HangWatches(on bool) { p.hangWatches.Store(on) }

// CutConnections closes every connection open through the proxy, watches included; their clients
// connect again.
func (p *FaultProxy) CutConnections() { p.server.CloseClientConnections() }

// URL is the proxy's address.
func (p *FaultProxy) URL() string { return p.server.URL }

// Kubeconfig returns a self-contained kubeconfig that reaches the API server through the proxy.
func (p *FaultProxy) Kubeconfig() []byte {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.server.Certificate().Raw})
	return kubeconfig(p.server.URL, ca, &clientcmdapi.AuthInfo{})
}

// Close stops the proxy. Open connections (hanging faults, watches) are cut rather than waited
// for, as a failing load balancer would.
func (p *FaultProxy) Close() {
	close(p.closed)
	p.server.CloseClientConnections()
	p.server.Close()
}

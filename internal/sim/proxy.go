package sim

import (
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ProxyFaults are the faults a FaultProxy injects, each into a random share of requests.
type ProxyFaults struct {
	// ErrorRate is the share of requests answered with 500, 503 or 429 (with Retry-After).
	ErrorRate float64
	// TimeoutRate is the share of requests that hang until the client gives up.
	TimeoutRate float64
	// Latency is added to every request.
	Latency time.Duration
	// Seed makes the choice of requests repeatable (0: random).
	Seed uint64
}

// FaultProxy is an HTTPS reverse proxy in front of an API server that injects API errors,
// timeouts and latency. Requests go upstream with the proxy's own credentials.
type FaultProxy struct {
	server *httptest.Server

	mu     sync.Mutex
	faults ProxyFaults
	rng    *rand.Rand

	// Requests, Errors and Timeouts count what the proxy has seen and injected.
	Requests, Errors, Timeouts atomic.Int64
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
	//nolint:gosec // G404: only picks which test requests fail; SetFaults reseeds it for replayable runs
	p := &FaultProxy{rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))}
	p.server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.Requests.Add(1)
		latency, fault := p.pick()
		if latency > 0 {
			time.Sleep(latency)
		}
		switch fault {
		case "timeout":
			p.Timeouts.Add(1)
			select { // hang: the client's timeout ends the request
			case <-r.Context().Done():
			case <-time.After(2 * time.Minute):
			}
			return
		case "500", "503", "429":
			p.Errors.Add(1)
			writeStatus(w, fault)
			return
		}
		r.Header.Del("Authorization") // upstream sees the proxy's own credentials
		rp.ServeHTTP(w, r)
	}))
	return p, nil
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

func (p *FaultProxy) pick() (time.Duration, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	x := p.rng.Float64()
	switch {
	case x < p.faults.ErrorRate:
		return p.faults.Latency, []string{"500", "503", "429"}[p.rng.IntN(3)]
	case x < p.faults.ErrorRate+p.faults.TimeoutRate:
		return p.faults.Latency, "timeout"
	}
	return p.faults.Latency, ""
}

func writeStatus(w http.ResponseWriter, code string) {
	reason := map[string]string{"500": "InternalError", "503": "ServiceUnavailable", "429": "TooManyRequests"}[code]
	w.Header().Set("Content-Type", "application/json")
	if code == "429" {
		w.Header().Set("Retry-After", "1")
	}
	var status int
	_, _ = fmt.Sscanf(code, "%d", &status) // code is one of the literal fault names above
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected by the simulated Harvester's fault proxy","reason":%q,"code":%d}`, reason, status)
}

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
	p.server.CloseClientConnections()
	p.server.Close()
}

package clustercache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// A watch the server never answers is given up after responseHeaderTimeout, through the
// rest.Config every Harvester client and informer is built from; one the server answers streams
// for as long as the server sends, however long that is.
func TestRequestsWithoutAnAnswerAreGivenUp(t *testing.T) {
	defer func(d time.Duration) { responseHeaderTimeout = d }(responseHeaderTimeout)
	responseHeaderTimeout = 200 * time.Millisecond

	release := make(chan struct{})
	defer close(release)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" || strings.Contains(r.URL.Path, "/hung/") {
			select { // a load balancer that took the request and never answers
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		// A watch the server answers at once, and whose events come slower than the timeout.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for i := range 3 {
			time.Sleep(150 * time.Millisecond)
			_, _ = fmt.Fprintf(w, `{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%d","namespace":"answered","resourceVersion":"%d"}}}`+"\n", i, i+1)
			w.(http.Flusher).Flush()
		}
	}))
	defer server.Close()

	cfg := &rest.Config{Host: server.URL}
	cfg.Wrap(withResponseHeaderTimeout)
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the test's own bound
	defer cancel()
	_, err = dc.Resource(configMaps).Namespace("hung").Watch(ctx, metav1.ListOptions{})
	if err == nil || !strings.Contains(err.Error(), errNoResponseHeaders.Error()) {
		t.Fatalf("watch the server never answers = %v, want %q", err, errNoResponseHeaders)
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Fatalf("the watch was given up after %s, want about %s", waited, responseHeaderTimeout)
	}

	w, err := dc.Resource(configMaps).Namespace("answered").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for i := range 3 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %d events (%s): a stream that began was cut", i, time.Since(began))
			}
			if ev.Type == "ERROR" {
				t.Fatalf("event %d is an error: %v", i, ev.Object)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event %d", i)
		}
	}
}

// The request's context is released when its body is closed, and a request that fails for
// another reason keeps its own error.
func TestHeaderTimeoutKeepsOtherErrors(t *testing.T) {
	failing := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, io.ErrUnexpectedEOF })
	rt := &headerTimeout{next: failing, after: time.Minute}
	req := httptest.NewRequest(http.MethodGet, "https://harvester.example/api", nil)
	resp, err := rt.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("RoundTrip = %v, want the transport's own error", err)
	}

	var reqCtx context.Context
	answering := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		reqCtx = r.Context()
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("{}"))}, nil
	})
	rt = &headerTimeout{next: answering, after: time.Minute}
	resp, err = rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if reqCtx.Err() != nil {
		t.Fatal("the request's context ended before its body was read")
	}
	_ = resp.Body.Close()
	if reqCtx.Err() == nil {
		t.Fatal("the request's context outlives its closed body")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

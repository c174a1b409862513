package clustercache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// responseHeaderTimeout bounds how long a request to a remote cluster waits for the response to
// begin (a variable for tests). Nothing else bounds the requests of its informers: client-go gives
// a watch no client-side timeout (the server ends it, after 5 to 10 minutes), nor a list, so a
// request that a load balancer accepted and never answered held its informer for good, and the
// cache stayed as it was while the machines it serves waited on it (a chaos run's "timeout" fault
// on the cloud-init Secrets' watch: deletions waited for Secrets long gone, and
// TestDeletionOutlivesWatchesThatNeverAnswer). An API server answers a watch's headers at once and
// a list's within seconds; a stream, once begun, is not cut.
var responseHeaderTimeout = 30 * time.Second

// errNoResponseHeaders is the cause of a request given up by withResponseHeaderTimeout.
var errNoResponseHeaders = errors.New("no response from the server")

// withResponseHeaderTimeout gives up a request whose response has not begun within
// responseHeaderTimeout, as http.Transport's ResponseHeaderTimeout would; client-go builds (and
// shares) the transport, so the bound is set around it, through rest.Config.Wrap.
func withResponseHeaderTimeout(rt http.RoundTripper) http.RoundTripper {
	return &headerTimeout{next: rt, after: responseHeaderTimeout}
}

type headerTimeout struct {
	next  http.RoundTripper
	after time.Duration
}

func (t *headerTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(t.after, func() { cancel(errNoResponseHeaders) })
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	fired := !timer.Stop()
	if err == nil && fired {
		// The response began as the timer fired: its body is cut already.
		_ = resp.Body.Close()
		resp, err = nil, context.Cause(ctx)
	}
	if err != nil {
		cancel(nil)
		if errors.Is(context.Cause(ctx), errNoResponseHeaders) {
			return nil, fmt.Errorf("%s %s: %w within %s", req.Method, req.URL.Redacted(), errNoResponseHeaders, t.after)
		}
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// WrappedRoundTripper lets client-go see through the wrapper (for its TLS and auth inspection).
func (t *headerTimeout) WrappedRoundTripper() http.RoundTripper { return t.next }

// cancelOnClose releases the request's context once its body is read and closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

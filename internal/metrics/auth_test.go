package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// reviewCounts counts the reviews the fake API server answered.
type reviewCounts struct{ tokens, access atomic.Int64 }

// fakeAPIServer answers TokenReviews (token "reader" and "stranger" are valid) and
// SubjectAccessReviews (only user "reader" may get /metrics), counting the reviews. Reactors
// prepended later run first, so a test can put failures or a delay in front of these answers.
func fakeAPIServer(t *testing.T) (*fake.Clientset, *reviewCounts) {
	t.Helper()
	cs := fake.NewClientset()
	counts := &reviewCounts{}
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		counts.tokens.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if tr.Spec.Token == "reader" || tr.Spec.Token == "stranger" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
				User: authenticationv1.UserInfo{Username: tr.Spec.Token, Groups: []string{"system:authenticated"}}}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		counts.access.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		attrs := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "reader" && attrs != nil && attrs.Path == "/metrics" && attrs.Verb == "get" &&
			len(sar.Spec.Groups) == 1
		return true, sar, nil
	})
	return cs, counts
}

// failFirst makes the first n creations of resource fail with err (counted as reviews too); the
// reactors behind it answer the others.
func failFirst(cs *fake.Clientset, counts *reviewCounts, resource string, n int, err error) {
	failed := 0
	cs.PrependReactor("create", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed == n {
			return false, nil, nil
		}
		failed++
		if resource == "tokenreviews" {
			counts.tokens.Add(1)
		} else {
			counts.access.Add(1)
		}
		return true, nil, err
	})
}

// testFilter returns the filter's handler in front of a handler that answers "metrics", with
// retries spaced by a millisecond so that tests of them take no time.
func testFilter(t *testing.T, a *authorizer) func(authorization, path string) int {
	t.Helper()
	a.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: reviewBackoff.Steps}
	handler, err := a.filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	if err != nil {
		t.Fatal(err)
	}
	return func(authorization, path string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec.Code
	}
}

func TestAuthFilter(t *testing.T) {
	cs, counts := fakeAPIServer(t)
	now := time.Unix(0, 0)
	get := testFilter(t, newAuthorizer(cs, func() time.Time { return now }))
	tests := []struct {
		name, authorization, path string
		want                      int
	}{
		{"no token", "", "/metrics", http.StatusUnauthorized},
		{"not a bearer token", "Basic cmVhZGVyOng=", "/metrics", http.StatusUnauthorized},
		{"invalid token", "Bearer forged", "/metrics", http.StatusUnauthorized},
		{"valid token, no permission", "Bearer stranger", "/metrics", http.StatusForbidden},
		{"valid token, other path", "Bearer reader", "/debug/pprof", http.StatusForbidden},
		{"allowed", "Bearer reader", "/metrics", http.StatusOK},
	}
	for _, tt := range tests {
		if got := get(tt.authorization, tt.path); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}

	// An allowed scraper is remembered for a minute: no reviews, then reviews again.
	before := counts.tokens.Load() + counts.access.Load()
	if get("Bearer reader", "/metrics") != http.StatusOK || counts.tokens.Load()+counts.access.Load() != before {
		t.Errorf("a second scrape within a minute cost %d reviews", counts.tokens.Load()+counts.access.Load()-before)
	}
	now = now.Add(allowedTTL)
	if get("Bearer reader", "/metrics") != http.StatusOK || counts.tokens.Load()+counts.access.Load() != before+2 {
		t.Errorf("a scrape after a minute cost %d reviews, want 2", counts.tokens.Load()+counts.access.Load()-before)
	}
	// A denial is never remembered as an allowance, nor an allowance on one path for another.
	if get("Bearer stranger", "/metrics") != http.StatusForbidden {
		t.Error("stranger allowed after reader was cached")
	}
	if get("Bearer reader", "/debug/pprof") != http.StatusForbidden {
		t.Error("reader allowed on /debug/pprof after its allowance on /metrics was cached")
	}
}

// A denied token is reviewed once within deniedTTL, and again after it, so that a newly bound
// ServiceAccount gets in soon.
func TestAuthFilterRemembersDenialsBriefly(t *testing.T) {
	cs, counts := fakeAPIServer(t)
	now := time.Unix(0, 0)
	get := testFilter(t, newAuthorizer(cs, func() time.Time { return now }))
	for _, tt := range []struct {
		token            string
		want             int
		tokens, accesses int64 // reviews per decision
	}{
		{"forged", http.StatusUnauthorized, 1, 0},
		{"stranger", http.StatusForbidden, 1, 1},
	} {
		tokens, accesses := counts.tokens.Load(), counts.access.Load()
		now = time.Unix(0, 0)
		for i := range 5 {
			if got := get("Bearer "+tt.token, "/metrics"); got != tt.want {
				t.Errorf("token %s, request %d: status %d, want %d", tt.token, i, got, tt.want)
			}
			now = now.Add(deniedTTL / 10)
		}
		if gotT, gotA := counts.tokens.Load()-tokens, counts.access.Load()-accesses; gotT != tt.tokens || gotA != tt.accesses {
			t.Errorf("token %s denied 5 times within %s cost %d TokenReviews and %d SubjectAccessReviews, want %d and %d",
				tt.token, deniedTTL, gotT, gotA, tt.tokens, tt.accesses)
		}
		now = now.Add(deniedTTL)
		if get("Bearer "+tt.token, "/metrics") != tt.want || counts.tokens.Load()-tokens != 2*tt.tokens {
			t.Errorf("token %s: no new review once the denial expired (%d TokenReviews in all)", tt.token, counts.tokens.Load()-tokens)
		}
	}
}

// Concurrent requests with the same token share one review.
func TestAuthFilterOneReviewForConcurrentRequests(t *testing.T) {
	cs, counts := fakeAPIServer(t)
	// The TokenReview is answered only once every request is on its way: without a shared review,
	// each request that missed the cache would make its own.
	release := make(chan struct{})
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil
	})
	get := testFilter(t, newAuthorizer(cs, time.Now))
	const n = 20
	codes := make([]int, n)
	var started, done sync.WaitGroup
	started.Add(n)
	for i := range n {
		done.Go(func() {
			started.Done()
			codes[i] = get("Bearer reader", "/metrics")
		})
	}
	started.Wait()
	time.Sleep(100 * time.Millisecond) // for the requests to pass the cache lookup
	close(release)
	done.Wait()
	for i, code := range codes {
		if code != http.StatusOK {
			t.Errorf("request %d: status %d, want 200", i, code)
		}
	}
	if tokens, accesses := counts.tokens.Load(), counts.access.Load(); tokens != 1 || accesses != 1 {
		t.Errorf("%d concurrent requests with one token cost %d TokenReviews and %d SubjectAccessReviews, want 1 each", n, tokens, accesses)
	}
}

// A review that fails transiently is retried: the scrape succeeds.
func TestAuthFilterRetriesTransientErrors(t *testing.T) {
	gr := schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}
	tests := map[string]struct {
		resource string
		err      error
	}{
		"TokenReview unavailable":         {"tokenreviews", apierrors.NewServiceUnavailable("apiserver is shutting down")},
		"TokenReview throttled":           {"tokenreviews", apierrors.NewTooManyRequests("slow down", 1)},
		"TokenReview internal error":      {"tokenreviews", apierrors.NewInternalError(errors.New("etcdserver: leader changed"))},
		"TokenReview server timeout":      {"tokenreviews", apierrors.NewServerTimeout(gr, "create", 1)},
		"SubjectAccessReview unavailable": {"subjectaccessreviews", apierrors.NewServiceUnavailable("apiserver is shutting down")},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			cs, counts := fakeAPIServer(t)
			failFirst(cs, counts, tt.resource, reviewBackoff.Steps-1, tt.err)
			get := testFilter(t, newAuthorizer(cs, time.Now))
			if code := get("Bearer reader", "/metrics"); code != http.StatusOK {
				t.Errorf("status %d after %d failed attempts, want 200", code, reviewBackoff.Steps-1)
			}
			if tokens, accesses := counts.tokens.Load(), counts.access.Load(); tokens+accesses != int64(reviewBackoff.Steps)+1 {
				t.Errorf("%d TokenReviews and %d SubjectAccessReviews, want %d attempts in all", tokens, accesses, reviewBackoff.Steps+1)
			}
		})
	}
}

// Reviews that keep failing, or fail for good, answer 500; the failure is not remembered.
func TestAuthFilterPersistentErrorIs500(t *testing.T) {
	tests := map[string]struct {
		err      error
		attempts int64
	}{
		"unavailable every time":  {apierrors.NewServiceUnavailable("apiserver is shutting down"), int64(reviewBackoff.Steps)},
		"the manager may not ask": {apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", errors.New("RBAC")), 1},
		"not an API error":        {http.ErrHandlerTimeout, 1},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			cs, counts := fakeAPIServer(t)
			failFirst(cs, counts, "tokenreviews", 1000, tt.err)
			get := testFilter(t, newAuthorizer(cs, time.Now))
			if code := get("Bearer reader", "/metrics"); code != http.StatusInternalServerError {
				t.Errorf("status %d when the TokenReview fails, want 500", code)
			}
			if got := counts.tokens.Load(); got != tt.attempts {
				t.Errorf("%d TokenReviews, want %d", got, tt.attempts)
			}
			if get("Bearer reader", "/metrics") != http.StatusInternalServerError || counts.tokens.Load() != 2*tt.attempts {
				t.Errorf("the failure was remembered: the next request made %d TokenReviews, want %d", counts.tokens.Load()-tt.attempts, tt.attempts)
			}
		})
	}
}

// A request that ends while its review hangs stops waiting for it.
func TestAuthFilterRequestEndsWhileReviewing(t *testing.T) {
	cs, _ := fakeAPIServer(t)
	hung := make(chan struct{})
	t.Cleanup(func() { close(hung) })
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		select { // not for ever, so that a filter that does wait fails this test rather than hangs it
		case <-hung:
		case <-time.After(2 * time.Second):
		}
		return true, nil, apierrors.NewServiceUnavailable("hung")
	})
	a := newAuthorizer(cs, time.Now)
	handler, _ := a.filter(logr.Discard(), http.NotFoundHandler())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer reader")
	rec := httptest.NewRecorder()
	start := time.Now()
	handler.ServeHTTP(rec, req)
	if took := time.Since(start); rec.Code != http.StatusServiceUnavailable || took > time.Second {
		t.Errorf("a request that ended during its review got %d after %s, want 503 at once", rec.Code, took)
	}
}

// Without permission to create a review (the deployments made for the published provider grant
// neither TokenReviews nor SubjectAccessReviews), every scrape is answered 500 with the missing
// permission and the ways out, and the log says so once per review, not once per scrape.
func TestAuthFilterForbiddenReviewLoggedOnce(t *testing.T) {
	for _, tt := range []struct{ resource, group string }{
		{"tokenreviews", "authentication.k8s.io"},
		{"subjectaccessreviews", "authorization.k8s.io"},
	} {
		t.Run(tt.resource, func(t *testing.T) {
			cs, counts := fakeAPIServer(t)
			failFirst(cs, counts, tt.resource, 1000, apierrors.NewForbidden(schema.GroupResource{Group: tt.group, Resource: tt.resource}, "",
				errors.New(`User "system:serviceaccount:butler-system:butler-provider-harvester" cannot create resource "`+tt.resource+`"`)))
			var logged []string
			logger := funcr.New(func(prefix, args string) { logged = append(logged, args) }, funcr.Options{})
			handler, err := newAuthorizer(cs, time.Now).filter(logger, http.NotFoundHandler())
			if err != nil {
				t.Fatal(err)
			}
			for range 5 {
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				req.Header.Set("Authorization", "Bearer reader")
				rec := httptest.NewRecorder()
				handler.ServeHTTP(rec, req)
				body := rec.Body.String()
				if rec.Code != http.StatusInternalServerError || !strings.Contains(body, "may not create "+tt.resource+"."+tt.group) ||
					!strings.Contains(body, "--metrics-secure=false") {
					t.Fatalf("scrape answered %d %q, want 500 naming the missing permission and --metrics-secure=false", rec.Code, body)
				}
			}
			if len(logged) != 1 || !strings.Contains(logged[0], tt.resource+"."+tt.group) {
				t.Errorf("5 scrapes logged %d lines, want 1 naming %s.%s:\n%s", len(logged), tt.resource, tt.group, strings.Join(logged, "\n"))
			}
		})
	}
}

package metrics

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAPIServer answers TokenReviews (token "reader" and "stranger" are valid) and
// SubjectAccessReviews (only user "reader" may get /metrics), counting the reviews.
func fakeAPIServer(t *testing.T) (*fake.Clientset, *int) {
	t.Helper()
	cs := fake.NewClientset()
	reviews := 0
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if tr.Spec.Token == "reader" || tr.Spec.Token == "stranger" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
				User: authenticationv1.UserInfo{Username: tr.Spec.Token, Groups: []string{"system:authenticated"}}}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		attrs := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "reader" && attrs != nil && attrs.Path == "/metrics" && attrs.Verb == "get" &&
			len(sar.Spec.Groups) == 1
		return true, sar, nil
	})
	return cs, &reviews
}

func TestAuthFilter(t *testing.T) {
	cs, reviews := fakeAPIServer(t)
	now := time.Unix(0, 0)
	filter := newAuthFilter(cs, func() time.Time { return now })
	handler, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	if err != nil {
		t.Fatal(err)
	}
	get := func(authorization, path string) int {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec.Code
	}
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
	before := *reviews
	if get("Bearer reader", "/metrics") != http.StatusOK || *reviews != before {
		t.Errorf("a second scrape within a minute cost %d reviews", *reviews-before)
	}
	now = now.Add(allowedTTL)
	if get("Bearer reader", "/metrics") != http.StatusOK || *reviews != before+2 {
		t.Errorf("a scrape after a minute cost %d reviews, want 2", *reviews-before)
	}
	// A denial is never remembered as an allowance.
	if get("Bearer stranger", "/metrics") != http.StatusForbidden {
		t.Error("stranger allowed after reader was cached")
	}
}

func TestAuthFilterAPIErrorIs500(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, http.ErrHandlerTimeout
	})
	handler, _ := newAuthFilter(cs, time.Now)(logr.Discard(), http.NotFoundHandler())
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer reader")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("status %d when the TokenReview fails, want 500", rec.Code)
	}
}

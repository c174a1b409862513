package metrics

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	// allowedTTL is how long an allowed token is remembered, so that a scraper costs the API server
	// two reviews a minute at most, whatever its scrape interval.
	allowedTTL = time.Minute
	// deniedTTL is how long a denied token (401 or 403) is remembered: long enough that a
	// misconfigured scraper or a client trying tokens cannot make every request cost the API server
	// a review, short enough that a newly bound ServiceAccount is let in soon after.
	deniedTTL = 10 * time.Second
	// reviewTimeout bounds one decision, retries included, like TokenAccessReviewTimeout in
	// controller-runtime's filters.
	reviewTimeout = 10 * time.Second
)

// reviewBackoff spaces the attempts at a review that failed transiently: 5 attempts over about
// 4 seconds, k8s.io/apiserver's DefaultAuthWebhookRetryBackoff (which controller-runtime's filters
// copy too), so that an API server restart or a moment of throttling does not fail scrapes.
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// WithAuthenticationAndAuthorization is a metrics server filter (metricsserver.Options.
// FilterProvider) that serves only requests whose bearer token passes a TokenReview and whose user
// may use the request's verb on its path (a non-resource SubjectAccessReview, as kube-rbac-proxy
// does). It does what controller-runtime's filters package does with client-go alone: that package
// pulls in k8s.io/apiserver, which made the manager's binary 31 MB larger and its memory 19 MB
// higher. Like k8s.io/apiserver's delegating authenticator it remembers decisions (allowed for a
// minute, denied for 10 seconds), makes one review for concurrent requests with the same token,
// and retries reviews that fail transiently.
func WithAuthenticationAndAuthorization(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	cs, err := kubernetes.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return newAuthorizer(cs, time.Now).filter, nil
}

func newAuthorizer(cs kubernetes.Interface, now func() time.Time) *authorizer {
	return &authorizer{cs: cs, now: now, backoff: reviewBackoff, decisions: map[[32]byte]decision{}, forbidden: map[string]bool{}}
}

// filter is a metricsserver.Filter.
func (a *authorizer) filter(log logr.Logger, handler http.Handler) (http.Handler, error) {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if d := a.check(req.Context(), log, req); d.code != http.StatusOK {
			http.Error(w, d.msg, d.code)
			return
		}
		handler.ServeHTTP(w, req)
	}), nil
}

type authorizer struct {
	cs      kubernetes.Interface
	now     func() time.Time
	backoff wait.Backoff

	reviews singleflight.Group // keyed by the decision's key

	mu        sync.Mutex
	decisions map[[32]byte]decision // remembered allowances and denials, by key
	swept     time.Time             // when expired decisions were last forgotten
	forbidden map[string]bool       // reviews (by resource) the manager was found not to be allowed, logged once
}

// decision is the answer to a request: http.StatusOK, or the status and message to answer with.
type decision struct {
	code  int
	msg   string
	until time.Time // while remembered
}

// check decides a request, from memory when it can.
func (a *authorizer) check(ctx context.Context, log logr.Logger, req *http.Request) decision {
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return decision{code: http.StatusUnauthorized, msg: "Unauthorized: send a ServiceAccount token as Authorization: Bearer"}
	}
	verb, path := strings.ToLower(req.Method), req.URL.Path
	// A header value cannot hold a NUL and a method is a token: the key is unambiguous.
	key := sha256.Sum256([]byte(token + "\x00" + verb + "\x00" + path))
	if d, ok := a.remembered(key); ok {
		return d
	}
	reviewed := a.reviews.DoChan(string(key[:]), func() (any, error) {
		// A review that finished while this request was on its way is remembered already.
		if d, ok := a.remembered(key); ok {
			return d, nil
		}
		// The review is shared by every request waiting for it: it is bounded by its own timeout,
		// not by the context of the request that happened to start it, so that a scraper hanging
		// up does not fail the others.
		ctx, cancel := context.WithTimeout(context.Background(), reviewTimeout)
		defer cancel()
		d := a.review(ctx, log, token, verb, path)
		a.remember(key, d)
		return d, nil
	})
	select {
	case r := <-reviewed:
		return r.Val.(decision)
	case <-ctx.Done():
		return decision{code: http.StatusServiceUnavailable, msg: "Request ended before its token was reviewed"}
	}
}

// review asks the API server who the token's user is and whether it may use verb on path.
func (a *authorizer) review(ctx context.Context, log logr.Logger, token, verb, path string) decision {
	var tr *authenticationv1.TokenReview
	err := a.retry(ctx, func(ctx context.Context) (err error) {
		tr, err = a.cs.AuthenticationV1().TokenReviews().Create(ctx,
			&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return a.failed(log, err, "TokenReview", "tokenreviews.authentication.k8s.io", "Authentication failed")
	}
	if !tr.Status.Authenticated {
		return decision{code: http.StatusUnauthorized, msg: "Unauthorized"}
	}
	user := tr.Status.User
	extra := make(map[string]authorizationv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	var sar *authorizationv1.SubjectAccessReview
	err = a.retry(ctx, func(ctx context.Context) (err error) {
		sar, err = a.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
			},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return a.failed(log.WithValues("user", user.Username), err, "SubjectAccessReview", "subjectaccessreviews.authorization.k8s.io", "Authorization failed")
	}
	if !sar.Status.Allowed {
		return decision{code: http.StatusForbidden, msg: "Forbidden: user " + user.Username + " may not " + verb + " " + path + " (bind it to the metrics-reader ClusterRole)"}
	}
	return decision{code: http.StatusOK}
}

// failed answers a request whose review (kind, of resource) failed with err. A review the manager
// may not create (its RBAC lacks create on resource, as in the deployments made for the published
// provider) fails every request the same way: that is logged once, not once a scrape, and every
// scrape is told which permission is missing and the two ways out.
func (a *authorizer) failed(log logr.Logger, err error, kind, resource, msg string) decision {
	if !apierrors.IsForbidden(err) {
		log.Error(err, kind+" for a metrics request failed")
		return decision{code: http.StatusInternalServerError, msg: msg}
	}
	a.mu.Lock()
	first := !a.forbidden[resource]
	a.forbidden[resource] = true
	a.mu.Unlock()
	if first {
		log.Error(err, "The secure metrics endpoint cannot check scrapers: the manager may not create "+resource+
			". Every scrape is answered 500 until it may (the chart's and config/rbac's ClusterRole grant it) or the manager runs with --metrics-secure=false. Logged once")
	}
	return decision{code: http.StatusInternalServerError, msg: "Metrics unavailable: the manager may not create " + resource +
		", which checking scrapers needs; grant it, or run the manager with --metrics-secure=false"}
}

// retry calls create until it succeeds, fails for good, has been tried backoff.Steps times, or ctx
// ends; it returns create's last error.
func (a *authorizer) retry(ctx context.Context, create func(context.Context) error) error {
	b := a.backoff // a copy: Step counts down
	for {
		err := create(ctx)
		if err == nil || !transient(err) || b.Steps <= 1 {
			return err
		}
		t := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// transient reports whether a review that failed with err may pass if tried again: the API server
// was failing, overloaded, restarting or asked to be called back (the errors k8s.io/apiserver's
// webhook.DefaultShouldRetry retries, plus 503 and refused connections, as seen while an API
// server restarts). Anything else (the manager may not create reviews, a bad request) will fail
// again and is answered with 500 at once.
func transient(err error) bool {
	if _, delay := apierrors.SuggestsClientDelay(err); delay {
		return true
	}
	return apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err) ||
		utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		utilnet.IsProbableEOF(err)
}

func (a *authorizer) remembered(key [32]byte) (decision, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d, ok := a.decisions[key]
	return d, ok && a.now().Before(d.until)
}

// remember keeps an allowance for allowedTTL and a denial for deniedTTL. Errors are not kept: the
// next request tries again.
func (a *authorizer) remember(key [32]byte, d decision) {
	var ttl time.Duration
	switch d.code {
	case http.StatusOK:
		ttl = allowedTTL
	case http.StatusUnauthorized, http.StatusForbidden:
		ttl = deniedTTL
	default:
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	// Forget expired decisions now and then, not on every insert: denials may be many (a client
	// trying tokens), and each insert costs a review, so the map holds at most a minute of reviews.
	if now.Sub(a.swept) >= deniedTTL {
		for k, old := range a.decisions {
			if !now.Before(old.until) {
				delete(a.decisions, k)
			}
		}
		a.swept = now
	}
	d.until = now.Add(ttl)
	a.decisions[key] = d
}

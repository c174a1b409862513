package metrics

import (
	"context"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// RateLimiterWaitName is the metric of client-go's client-side rate limiting.
const RateLimiterWaitName = "butler_client_rate_limiter_wait_seconds"

// RateLimiterWait is how long client-go's client-side rate limiter (--kube-api-qps/-burst,
// --harvester-qps/-burst) held requests before sending them, by API server host: the measure of
// whether those limits slow the provider down.
var RateLimiterWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    RateLimiterWaitName,
	Help:    "Time client-go's client-side rate limiter held each request to an API server, by host, in seconds.",
	Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10},
}, []string{"host"})

func init() {
	ctrlmetrics.Registry.MustRegister(RateLimiterWait)
}

// InstrumentRateLimiter makes every client-go client of the process report its rate limiter's
// wait in RateLimiterWait. client-go reports it through a package variable that controller-runtime
// leaves at its no-op default (its metrics.Register call, the usual way, runs once and omits it).
func InstrumentRateLimiter() {
	clientmetrics.RateLimiterLatency = rateLimiterLatency{}
}

type rateLimiterLatency struct{}

func (rateLimiterLatency) Observe(_ context.Context, _ string, u url.URL, latency time.Duration) {
	RateLimiterWait.WithLabelValues(u.Host).Observe(latency.Seconds())
}

package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

func TestRequestVerbAndResource(t *testing.T) {
	tests := []struct {
		method, url    string
		verb, resource string
	}{
		{"GET", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm-0", "get", "virtualmachines.kubevirt.io"},
		{"GET", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines?labelSelector=a%3Db", "list", "virtualmachines.kubevirt.io"},
		{"GET", "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances?watch=true", "watch", "virtualmachineinstances.kubevirt.io"},
		{"POST", "/api/v1/namespaces/default/secrets", "create", "secrets"},
		{"PATCH", "/api/v1/namespaces/default/secrets/vm-0-cloudinit", "patch", "secrets"},
		{"PUT", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm-0/status", "update", "virtualmachines.kubevirt.io/status"},
		{"DELETE", "/api/v1/namespaces/default/persistentvolumeclaims/vm-0-disk-0", "delete", "persistentvolumeclaims"},
		{"DELETE", "/api/v1/namespaces/default/persistentvolumeclaims", "deletecollection", "persistentvolumeclaims"},
		{"GET", "/apis/storage.k8s.io/v1/storageclasses/longhorn", "get", "storageclasses.storage.k8s.io"},
		{"GET", "/api/v1/namespaces/default", "get", "namespaces"},
		{"PUT", "/api/v1/namespaces/default/finalize", "update", "namespaces/finalize"},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "create", "selfsubjectaccessreviews.authorization.k8s.io"},
		{"GET", "/version", "get", "nonresource"},
		{"GET", "/apis", "get", "nonresource"},
		{"GET", "/apis/kubevirt.io/v1", "get", "nonresource"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.url, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.url, nil)
			verb, resource := RequestVerbAndResource(req)
			if verb != tt.verb || resource != tt.resource {
				t.Errorf("got verb %q resource %q, want %q %q", verb, resource, tt.verb, tt.resource)
			}
		})
	}
}

func TestInstrumentHarvesterCountsErrorsButNotAbsence(t *testing.T) {
	HarvesterAPIErrors.Reset()
	HarvesterAPIRequests.Reset()
	status := map[string]int{"/api/v1/namespaces/ns/secrets/gone": 404, "/api/v1/namespaces/ns/secrets/x": 503}
	rt := InstrumentHarvester(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if code, ok := status[req.URL.Path]; ok {
			return &http.Response{StatusCode: code, Body: http.NoBody}, nil
		}
		if req.Method == http.MethodPost {
			return nil, errors.New("connection refused")
		}
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
	}))
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/secrets/gone", nil),
		httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/secrets/x", nil),
		httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/secrets/x", nil),
		httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/ns/secrets", nil),
		httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/ns/secrets", nil),
	} {
		// The POST fails in the transport, so there is no response (and no body) to close.
		if resp, err := rt.RoundTrip(r); err == nil {
			_ = resp.Body.Close()
		}
	}
	want := `
# HELP butler_harvester_api_errors_total Failed requests to Harvester's API (status >= 400 except 404, or no response) by verb, resource and code.
# TYPE butler_harvester_api_errors_total counter
butler_harvester_api_errors_total{code="503",resource="secrets",verb="get"} 2
butler_harvester_api_errors_total{code="transport",resource="secrets",verb="create"} 1
`
	if err := testutil.CollectAndCompare(HarvesterAPIErrors, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(HarvesterAPIRequests.WithLabelValues("get", "secrets", "404")); got != 1 {
		t.Errorf("requests{get,secrets,404} = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(HarvesterAPIRequests); got != 4 {
		t.Errorf("request series = %d, want 4 (404, 503, 200 list, transport)", got)
	}
}

func TestPhaseCollector(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mr := func(name string, phase v1alpha1.MachinePhase, ours bool) *v1alpha1.MachineRequest {
		m := &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		if ours {
			m.Finalizers = []string{v1alpha1.MachineRequestFinalizer}
		}
		m.Status.Phase = phase
		return m
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		mr("a", v1alpha1.MachinePhaseRunning, true),
		mr("b", v1alpha1.MachinePhaseRunning, true),
		mr("c", "", true),
		mr("d", v1alpha1.MachinePhaseFailed, true),
		mr("other-provider", v1alpha1.MachinePhaseRunning, false),
	).Build()
	elected := make(chan struct{})
	c := &phaseCollector{reader: reader, elected: elected, timeout: time.Second}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("a follower reported %d series, want none", n)
	}
	close(elected)
	want := `
# HELP butler_harvester_machinerequests MachineRequests managed by this provider (those carrying its finalizer), by phase. Reported by the leader only.
# TYPE butler_harvester_machinerequests gauge
butler_harvester_machinerequests{phase="Creating"} 0
butler_harvester_machinerequests{phase="Deleted"} 0
butler_harvester_machinerequests{phase="Deleting"} 0
butler_harvester_machinerequests{phase="Failed"} 1
butler_harvester_machinerequests{phase="Pending"} 1
butler_harvester_machinerequests{phase="Running"} 2
butler_harvester_machinerequests{phase="Unknown"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if err := RegisterPhaseCollector(prometheus.NewRegistry(), reader, elected); err != nil {
		t.Error(err)
	}
}

// A request held by client-go's rate limiter shows in the wait histogram of its host.
func TestRateLimiterWaitObserved(t *testing.T) {
	InstrumentRateLimiter()
	clientmetrics.RateLimiterLatency.Observe(context.Background(), "GET", url.URL{Scheme: "https", Host: "harvester.example:6443"}, 250*time.Millisecond)
	m := &dto.Metric{}
	if err := RateLimiterWait.WithLabelValues("harvester.example:6443").(prometheus.Histogram).Write(m); err != nil {
		t.Fatal(err)
	}
	if m.GetHistogram().GetSampleCount() != 1 || m.GetHistogram().GetSampleSum() != 0.25 {
		t.Fatalf("histogram count %d sum %g, want 1 and 0.25", m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum())
	}
}

// Package metrics defines the provider's own Prometheus metrics, served with controller-runtime's
// on the manager's metrics endpoint. Names and labels are part of the provider's interface: dashboards
// and alerts depend on them, so change them only with a note in the upgrade docs.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric names.
const (
	MachineRequestsName      = "butler_harvester_machinerequests"
	ProvisioningDurationName = "butler_harvester_machine_provisioning_duration_seconds"
	DeletionDurationName     = "butler_harvester_machine_deletion_duration_seconds"
	HarvesterAPIErrorsName   = "butler_harvester_api_errors_total"
	HarvesterAPIRequestsName = "butler_harvester_api_requests_total"
)

var (
	// ProvisioningDuration is how long machines took from the MachineRequest's creation (Pending)
	// to Running on Harvester, VM boot and IP report included.
	ProvisioningDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    ProvisioningDurationName,
		Help:    "Time from a MachineRequest's creation (Pending) to Running, in seconds.",
		Buckets: []float64{5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800},
	})
	// DeletionDuration is how long deletions took, from the deletion request to the release of the
	// finalizer once nothing is left on Harvester.
	DeletionDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    DeletionDurationName,
		Help:    "Time from a MachineRequest's deletion to the release of its finalizer (VM, disks and cloud-init Secret gone from Harvester), in seconds.",
		Buckets: []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600},
	})
	// HarvesterAPIRequests counts requests to Harvester's API by verb, resource and status code.
	HarvesterAPIRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: HarvesterAPIRequestsName,
		Help: "Requests to Harvester's API by verb, resource and HTTP status code (\"transport\": no response).",
	}, []string{"verb", "resource", "code"})
	// HarvesterAPIErrors counts failed requests to Harvester's API. 404 Not Found is not an error
	// here: it is how the provider confirms that an object is gone.
	HarvesterAPIErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: HarvesterAPIErrorsName,
		Help: "Failed requests to Harvester's API (status >= 400 except 404, or no response) by verb, resource and code.",
	}, []string{"verb", "resource", "code"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(ProvisioningDuration, DeletionDuration, HarvesterAPIRequests, HarvesterAPIErrors)
}

// ObserveProvisioned records a machine that reached Running, created at created.
func ObserveProvisioned(created, now time.Time) {
	ProvisioningDuration.Observe(now.Sub(created).Seconds())
}

// ObserveDeleted records a machine whose finalizer was released, deleted at deleted.
func ObserveDeleted(deleted, now time.Time) {
	DeletionDuration.Observe(now.Sub(deleted).Seconds())
}

package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// phases are reported even when no MachineRequest is in them, so that a series never vanishes.
var phases = []v1alpha1.MachinePhase{
	v1alpha1.MachinePhasePending, v1alpha1.MachinePhaseCreating, v1alpha1.MachinePhaseRunning,
	v1alpha1.MachinePhaseFailed, v1alpha1.MachinePhaseDeleting, v1alpha1.MachinePhaseDeleted, v1alpha1.MachinePhaseUnknown,
}

var machineRequestsDesc = prometheus.NewDesc(MachineRequestsName,
	"MachineRequests managed by this provider (those carrying its finalizer), by phase. Reported by the leader only.",
	[]string{"phase"}, nil)

// phaseCollector counts MachineRequests by phase at scrape time, from the manager's cache: the
// figure cannot drift from what `kubectl get mr` shows, and a restart loses nothing.
type phaseCollector struct {
	reader client.Reader
	// elected is closed once this replica leads; followers report nothing, so that a sum over
	// replicas counts each MachineRequest once.
	elected <-chan struct{}
	timeout time.Duration
}

// RegisterPhaseCollector serves butler_harvester_machinerequests from reader (the manager's
// cache) once elected is closed.
func RegisterPhaseCollector(registry prometheus.Registerer, reader client.Reader, elected <-chan struct{}) error {
	return registry.Register(&phaseCollector{reader: reader, elected: elected, timeout: 5 * time.Second})
}

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- machineRequestsDesc }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.elected:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	list := &v1alpha1.MachineRequestList{}
	// Read-only: no copy of every MachineRequest (userData included) per scrape.
	if err := c.reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(machineRequestsDesc, err)
		return
	}
	counts := make(map[v1alpha1.MachinePhase]int, len(phases))
	for i := range list.Items {
		mr := &list.Items[i]
		if !controllerutil.ContainsFinalizer(mr, v1alpha1.MachineRequestFinalizer) {
			continue
		}
		phase := mr.Status.Phase
		if phase == "" { // accepted, first status not written yet
			phase = v1alpha1.MachinePhasePending
		}
		counts[phase]++
	}
	for _, p := range phases {
		ch <- prometheus.MustNewConstMetric(machineRequestsDesc, prometheus.GaugeValue, float64(counts[p]), string(p))
	}
}

package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// MachinesObservedName names MachinesObserved.
const MachinesObservedName = "butler_harvester_machines_observed_total"

// MachinesObserved counts the VMs this process has observed through its cache of their Harvester
// cluster, each once: after the manager starts (or a new leader takes over) it climbs to the
// number of machines as each is reconciled with its VM seen, so the time until it equals that
// number is the time until every machine is observed again.
var MachinesObserved = prometheus.NewCounter(prometheus.CounterOpts{
	Name: MachinesObservedName,
	Help: "VMs observed through the cache of their Harvester cluster since this process started, each counted once: equal to the number of machines once every machine was observed.",
})

func init() { ctrlmetrics.Registry.MustRegister(MachinesObserved) }

// observedVMs are the VMs MachinesObserved counted, by UID, so that each counts once; a VM
// deleted by the provider is forgotten, which keeps the set as large as the machines.
var observedVMs sync.Map

// ObserveVM counts the VM uid the first time the process observes it through a cache.
func ObserveVM(uid types.UID) {
	if uid == "" {
		return
	}
	if _, seen := observedVMs.LoadOrStore(uid, struct{}{}); !seen {
		MachinesObserved.Inc()
	}
}

// ForgetVM forgets the VM uid, which the provider deletes.
func ForgetVM(uid types.UID) { observedVMs.Delete(uid) }

package clusterapi

import (
	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// harvesterMachineStatus is where a HarvesterMachine keeps its status: conditions only, as Cluster
// API's v1beta2 contract has it (no phase, no terminal failure fields).
var harvesterMachineStatus = objstatus.Kind[*infrav1.HarvesterMachine, infrav1.HarvesterMachineStatus]{
	Name:     "HarvesterMachine",
	Status:   func(hm *infrav1.HarvesterMachine) *infrav1.HarvesterMachineStatus { return &hm.Status },
	DeepCopy: (*infrav1.HarvesterMachineStatus).DeepCopy,
	Fields: func(st *infrav1.HarvesterMachineStatus) objstatus.Fields {
		return objstatus.Fields{Conditions: &st.Conditions, ObservedGeneration: &st.ObservedGeneration}
	},
	Conditions: infrastructureConditions,
}

// harvesterMachineScope is one reconcile of one HarvesterMachine.
type harvesterMachineScope struct {
	*objstatus.Scope[*infrav1.HarvesterMachine, infrav1.HarvesterMachineStatus]
	hm *infrav1.HarvesterMachine
	// assigned are the addresses the machine's NICs were given from pools, by NIC (configureNICs).
	assigned [][]assignedAddress
	// networkMismatch says how the machine's first NIC is not on its cluster's management
	// network (managementNetworkMismatch); empty when it is, or when the cluster names none.
	networkMismatch string
}

// +kubebuilder:rbac:groups=infrastructure.butlerlabs.dev,resources=harvestermachines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.butlerlabs.dev,resources=harvestermachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.butlerlabs.dev,resources=harvesterclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

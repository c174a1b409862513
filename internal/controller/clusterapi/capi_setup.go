package clusterapi

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/frontdoor"
)

// SetupClusterAPI registers the Cluster API front door (the HarvesterCluster and HarvesterMachine
// reconcilers) when the management cluster serves it: this provider's infrastructure CRDs and
// Cluster API's Cluster and Machine, with list and watch granted. Otherwise it says why once and
// registers nothing: MachineRequests are served as usual. It reports whether it registered them.
func SetupClusterAPI(ctx context.Context, mgr ctrl.Manager, logger logr.Logger, machines *HarvesterMachineReconciler, clusters *HarvesterClusterReconciler) (bool, error) {
	why := frontdoor.KindsUnavailable(ctx, mgr, infrav1.GroupVersion, []frontdoor.ServedKind{{Kind: "HarvesterCluster", Resource: "harvesterclusters"}, {Kind: "HarvesterMachine", Resource: "harvestermachines"}})
	if why == "" {
		why = frontdoor.KindsUnavailable(ctx, mgr, schema.GroupVersion{Group: capiClusterGVK.Group, Version: capiClusterGVK.Version},
			[]frontdoor.ServedKind{{Kind: "Cluster", Resource: "clusters"}, {Kind: "Machine", Resource: "machines"}})
	}
	if why != "" {
		logger.Info("Cluster API controllers are off: "+why+"; MachineRequests are served as usual. Restart the manager once this is fixed", "controller", "harvestermachine")
		return false, nil
	}
	if err := machines.SetupWithManager(ctx, mgr); err != nil {
		return false, err
	}
	return true, clusters.SetupWithManager(ctx, mgr)
}

package clusterapi

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/management"
)

// Unavailable says why the Cluster API front door (the HarvesterCluster and HarvesterMachine
// reconcilers) cannot run on the management cluster ("" if it can): this provider's
// infrastructure CRDs, Cluster API's Cluster and Machine, or its IPAM contract's IPAddressClaim and
// IPAddress (served by Cluster API core since its v1.5) not served, or list and watch of them not
// granted. Where it cannot, its reconcilers stay off and MachineRequests are served as usual.
func Unavailable(ctx context.Context, mgr ctrl.Manager) string {
	why := management.KindsUnavailable(ctx, mgr, infrav1.GroupVersion, []management.ServedKind{{Kind: "HarvesterCluster", Resource: "harvesterclusters"}, {Kind: "HarvesterMachine", Resource: "harvestermachines"}})
	if why == "" {
		why = management.KindsUnavailable(ctx, mgr, schema.GroupVersion{Group: capiClusterGVK.Group, Version: capiClusterGVK.Version},
			[]management.ServedKind{{Kind: "Cluster", Resource: "clusters"}, {Kind: "Machine", Resource: "machines"}})
	}
	if why == "" {
		why = management.KindsUnavailable(ctx, mgr, ipAddressClaimGVK.GroupVersion(),
			[]management.ServedKind{{Kind: "IPAddressClaim", Resource: "ipaddressclaims"}, {Kind: "IPAddress", Resource: "ipaddresses"}})
	}
	return why
}

// TemplatesUnavailable says why the HarvesterMachineTemplate reconciler cannot run ("" if it can):
// the kind not served, or list and watch of it not granted. Where it cannot, templates report no
// capacity and the rest of the Cluster API front door runs as usual.
func TemplatesUnavailable(ctx context.Context, mgr ctrl.Manager) string {
	return management.KindsUnavailable(ctx, mgr, infrav1.GroupVersion, []management.ServedKind{{Kind: "HarvesterMachineTemplate", Resource: "harvestermachinetemplates"}})
}

package capi

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// TestClusterAPIMachineSurvivesRestartAndAMovedProviderConfig stops the provider once a
// HarvesterMachine's VM exists, points the ProviderConfig at another Harvester namespace while it is
// down, and starts a new provider with nothing in memory. The machine is still found where its
// placement annotation (read back from the API server) says it lives: no second VM is made in the
// new namespace, the Machine gets the first VM's providerID, and deleting the Cluster removes
// the VM, disks and Secret from where they are.
func TestClusterAPIMachineSurvivesRestartAndAMovedProviderConfig(t *testing.T) {
	w := startCAPIWorld(t)
	ctx, c, hv, capi, must := w.ctx, w.c, w.hv, w.capi, w.must
	cluster := w.tenantCluster()
	w.machine("tenant-md-0", "")

	vmKey := types.NamespacedName{Namespace: "vms", Name: "tenant-md-0"}
	var vm kubevirtv1.VirtualMachine
	waitFor(ctx, t, capi, "the machine's VM on Harvester", func() error { return hv.Client.Get(ctx, vmKey, &vm) })
	w.stopProvider()

	// While the provider is down, the ProviderConfig moves to another namespace, which has all a
	// machine needs: were the machine located from the ProviderConfig, a second VM would be made.
	must(hv.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vms2"}}))
	pc := &v1alpha1.ProviderConfig{}
	must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "harvester"}, pc))
	pc.Spec.Harvester.Namespace = "vms2"
	must(c.Update(ctx, pc))

	w.stopProvider = startProvider(ctx, t, w.cfg, w.scheme)
	hm := &infrav1.HarvesterMachine{}
	waitFor(ctx, t, capi, "the restarted provider to provision the machine with its first VM", func() error {
		must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tenant-md-0"}, hm))
		if want := harvester.ProviderIDPrefix + string(vm.UID); hm.Spec.ProviderID != want {
			return fmt.Errorf("HarvesterMachine spec.providerID %q, want %q", hm.Spec.ProviderID, want)
		}
		if p := hm.Status.Initialization.Provisioned; p == nil || !*p {
			return fmt.Errorf("HarvesterMachine not provisioned yet, conditions %v", hm.Status.Conditions)
		}
		return nil
	})
	for _, namespace := range []string{"vms", "vms2"} {
		vms := &kubevirtv1.VirtualMachineList{}
		must(hv.Client.List(ctx, vms, client.InNamespace(namespace)))
		want := map[string]int{"vms": 1, "vms2": 0}[namespace]
		if len(vms.Items) != want {
			t.Fatalf("%d VMs in Harvester namespace %s, want %d", len(vms.Items), namespace, want)
		}
	}

	must(c.Delete(ctx, cluster))
	waitFor(ctx, t, capi, "the Cluster and everything on Harvester to go", func() error {
		return w.clusterAndMachinesGone(cluster)
	})
}

package capi

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// TestClusterAPITenantCredentialsNotIssuedInASharedNamespace runs a tenant cluster whose
// ProviderConfig's Harvester namespace holds a VM of the operator's: Harvester's roles, bound
// there, would let the tenant stop or re-volume it, so no credentials are made (the condition
// names the VM and both fixes), while the cluster's machine is made all the same. Once the
// operator annotates the ProviderConfig to share the namespace they are issued, and
// GuestCredentialsIsolated says the namespace is shared until the VM is gone.
func TestClusterAPITenantCredentialsNotIssuedInASharedNamespace(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	router := &kubevirtv1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "router"},
		Spec:       kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyHalted), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{}},
	}
	w.must(hv.Client.Create(ctx, router))

	cluster := w.tenantCluster()
	machine := w.machine("tenant-md-0", "")
	hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}}
	w.waitGuestCredentials(hc, infrav1.ReasonGuestNamespaceShared, "VirtualMachine vms/router", "harvester.namespace", v1alpha1.AnnotationSharedNamespace)
	waitFor(ctx, t, w.capi, "the machine made all the same", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", machine, &kubevirtv1.VirtualMachine{}, &infrav1.HarvesterMachine{})
	})
	sas := &corev1.ServiceAccountList{}
	w.must(hv.Client.List(ctx, sas, client.MatchingLabels{harvester.LabelOwnerKind: "HarvesterCluster"}))
	if len(sas.Items) != 0 {
		t.Fatalf("%d guest ServiceAccounts made in a shared namespace", len(sas.Items))
	}

	pc := &v1alpha1.ProviderConfig{}
	w.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "harvester"}, pc))
	pc.Annotations = map[string]string{v1alpha1.AnnotationSharedNamespace: "true"}
	w.must(c.Update(ctx, pc))
	w.waitGuestCredentials(hc, infrav1.ReasonGuestCredentialsIssued)
	if cond := w.waitIsolated(hc, metav1.ConditionFalse, infrav1.ReasonGuestNamespaceShared); !strings.Contains(cond.Message, "VirtualMachine vms/router") {
		t.Errorf("GuestCredentialsIsolated message %q does not name the VM", cond.Message)
	}

	w.must(hv.Client.Delete(ctx, router))
	w.waitIsolated(hc, metav1.ConditionTrue, infrav1.ReasonGuestNamespaceExclusive)

	w.must(c.Delete(ctx, cluster))
	waitFor(ctx, t, w.capi, "the Cluster, its machines and its credentials to go", func() error {
		if err := w.clusterAndMachinesGone(cluster); err != nil {
			return err
		}
		return w.guestIdentityGone()
	})
}

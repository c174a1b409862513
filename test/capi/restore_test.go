package capi

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// TestClusterAPIRestoreWhileLiveTakesNothing restores a backup of a running tenant cluster
// (`clusterctl move --to-directory`, which pauses the source while it writes the files and resumes
// it) into a second management cluster (`--from-directory`, which resumes the copy) whose clock is
// ten minutes behind the source's, while the source runs on.
//
// The copy takes no VM, changes no label, issues and revokes no credentials, and says which
// management cluster runs the cluster and how to hand it over; deleting the copy deletes nothing
// on Harvester. Then the source makes one more machine and is lost for good (its provider
// stops): the copy, restored again, is handed over with one annotation on its ProviderConfig,
// carries on with every machine it knows (the same providerIDs, no VM created or deleted, the
// tenant's credentials unchanged), and names the VM it does not know.
func TestClusterAPIRestoreWhileLiveTakesNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	m := newMoveScene(ctx, t, clockOff(-10*time.Minute))
	srcID := m.src.managementClusterID()
	delivered := m.src.tenantCredentials()
	m.src.requireOwner(srcID)

	dir := t.TempDir()
	runClusterctl(ctx, t, m.assets, m.config, nil, "move", "--kubeconfig", m.srcKubeconfig, "--namespace", ns, "--to-directory", dir)
	restored := time.Now()
	runClusterctl(ctx, t, m.assets, m.config, nil, "move", "--from-directory", dir, "--to-kubeconfig", m.dstKubeconfig)

	// The copy says who runs the cluster, and waits, longer than a Lease lasts.
	m.dst.waitOwned(infrav1.ReasonOwnedByAnotherManagementCluster, "management cluster "+srcID+" runs Cluster "+ns+"/"+tenant.Name,
		"kubectl annotate providerconfig -n "+ns+" harvester "+v1alpha1.AnnotationHandOverFrom+"="+srcID)
	time.Sleep(ownershipLease + 5*time.Second)
	m.liveUntouched(ctx, t, delivered, "with a copy restored beside the live cluster")
	t.Logf("the restored copy took nothing for %s", time.Since(restored).Round(time.Second))

	// Deleting the copy deletes nothing of the live cluster.
	m.dst.must(m.dst.c.Delete(ctx, m.tc.Cluster()))
	waitFor(ctx, t, m.dst.capi, "the copy's Cluster to go", func() error { return clusterGone(ctx, m.dst.c, m.tc.Cluster()) })
	m.liveUntouched(ctx, t, delivered, "with the restored copy deleted")

	// The source makes one more machine after the backup, then is lost for good.
	md := m.md.DeepCopy()
	m.src.must(m.src.c.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`))))
	unknown := ""
	for name := range m.src.machinesRunning(3) {
		if _, known := m.before[name]; !known {
			unknown = name
		}
	}
	m.src.stopProvider()
	lost := time.Now()
	vms := watchVMs(ctx, t, m.hv)

	runClusterctl(ctx, t, m.assets, m.config, nil, "move", "--from-directory", dir, "--to-kubeconfig", m.dstKubeconfig)
	m.dst.waitOwned(infrav1.ReasonOwnedByAnotherManagementCluster, "management cluster "+srcID)
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "harvester"}}
	m.dst.must(m.dst.c.Patch(ctx, pc, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationHandOverFrom, srcID))))
	m.dst.waitOwned(infrav1.ReasonOwnershipTakenOver, "from management cluster "+srcID, "handed over", "does not have", unknown)
	t.Logf("handed over %s after the source was lost", time.Since(lost).Round(time.Second))
	m.carriedOn(ctx, t, lost)
	if now := m.dst.tenantCredentials(); !bytes.Equal(tokenOf(t, now), tokenOf(t, delivered)) {
		t.Fatal("the hand-over re-issued the tenant's credentials")
	}
	m.dst.must(whoAmI(ctx, delivered))
	vms.requireNone(t, "during the hand-over")
}

// liveUntouched checks that the source still runs the tenant cluster as it did: it holds the
// cluster's ownership, every VM is labelled for its HarvesterMachine, every Machine runs, no VM
// was created or deleted, and the tenant's credentials are the ones it delivered, still valid.
func (m *moveScene) liveUntouched(ctx context.Context, t *testing.T, delivered []byte, during string) {
	t.Helper()
	m.src.requireOwner(m.src.managementClusterID())
	m.src.requireVMsOwnedBy(m.names()...)
	m.src.machinesRunning(len(m.before))
	m.vms.requireNone(t, during)
	if now := m.src.tenantCredentials(); !bytes.Equal(tokenOf(t, now), tokenOf(t, delivered)) {
		t.Fatalf("%s: the live cluster's credentials were re-issued", during)
	}
	m.src.must(whoAmI(ctx, delivered))
}

// tenantCredentials is the kubeconfig w's HarvesterCluster delivered for the tenant cluster.
func (w *capiWorld) tenantCredentials() []byte {
	w.t.Helper()
	hc := &infrav1.HarvesterCluster{}
	w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: tenant.Name}, hc))
	return w.deliveredKubeconfig(hc)
}

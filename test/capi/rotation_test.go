package capi

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// TestClusterAPIGuestCredentialsRotation re-issues a running tenant cluster's Harvester token (the
// ProviderConfig's credentials change) while its cloud provider runs, as Harvester's does: it read
// its cloud-config once, at start, and reads the kubeconfig's token file (the tenant Secret
// mounted as a directory, as the templates do) again every minute, through client-go. The new
// token is delivered while the old one keeps working; the old one is refused once the overlap
// ends; and the cloud provider, never restarted, still initializes a new Node after that.
func TestClusterAPIGuestCredentialsRotation(t *testing.T) {
	t.Parallel()
	// Long enough for client-go to read the token file again (it does after 50 to 60 s).
	const overlap = 65 * time.Second
	w := startCAPIWorldWith(t, []providerOption{tokenOverlap(overlap)})
	ctx, c := w.ctx, w.c
	_, cloudProvider := w.playTenant()

	w.tenantCluster()
	cpInfra, cp := tenant.ControlPlaneMachine("tenant-cp-0")
	w.must(testbed.CreateAll(ctx, c, cpInfra, cp))
	hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}}
	w.waitGuestCredentials(hc, infrav1.ReasonGuestCredentialsIssued)
	before := w.deliveredKubeconfig(hc)
	w.waitRunning(cp, cloudProvider)

	after := w.rotateProviderCredentials(hc, tokenOf(t, before))
	delivered := time.Now()
	if err := whoAmI(ctx, before); err != nil {
		t.Fatalf("the token before, right after the new one was delivered: %v (it must keep working for the overlap)", err)
	}
	w.must(whoAmI(ctx, after))
	w.waitEvent("HarvesterCluster", hc.Name, infrav1.ReasonGuestCredentialsIssued, "stops at")
	waitFor(ctx, t, w.capi, "the token before refused once the overlap ends", func() error {
		if err := whoAmI(ctx, before); !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("the token before: %w", err)
		}
		return nil
	})
	if took := time.Since(delivered); took < overlap-5*time.Second {
		t.Fatalf("the token before was refused %s after the new one was delivered, before the overlap (%s) ended", took, overlap)
	}

	// The cloud provider, started with the token before and never restarted, initializes a new
	// Node with the token it read again from the file.
	mdInfra, md := tenant.Machine("tenant-md-0", "")
	w.must(testbed.CreateAll(ctx, c, mdInfra, md))
	w.waitRunning(md, cloudProvider)
}

// waitRunning waits for a Machine to be Running with its Node, which only the played cloud
// provider initializes.
func (w *capiWorld) waitRunning(machine *unstructured.Unstructured, cloudProvider *testbed.CloudProvider) {
	w.t.Helper()
	waitFor(w.ctx, w.t, w.capi, "Machine "+machine.GetName()+" Running with its Node", func() error {
		w.must(w.c.Get(w.ctx, client.ObjectKeyFromObject(machine), machine))
		phase, _, _ := unstructured.NestedString(machine.Object, "status", "phase")
		node, _, _ := unstructured.NestedString(machine.Object, "status", "nodeRef", "name")
		if phase != "Running" || node != machine.GetName() {
			return fmt.Errorf("Machine phase %q, nodeRef %q (cloud provider: %w)", phase, node, cloudProvider.Err())
		}
		return nil
	})
}

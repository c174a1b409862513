//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// TestDeletionOutlivesWatchesThatNeverAnswer: the manager's Harvester watches are cut, and every
// new watch hangs (a load balancer that takes requests and never answers them); reads and writes
// still pass. A deletion waits on the caches for its VM, disks and Secret to go: the caches must
// come back (client-go gives a watch no timeout of its own, so an unanswered one would leave them
// stale for good), and the machines are deleted with nothing left.
func TestDeletionOutlivesWatchesThatNeverAnswer(t *testing.T) {
	simulatorLogsWarningsOnly()
	const n = 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tb, err := testbed.Start(ctx, testbed.Options{
		RepoRoot: repoRoot(), WorkDir: t.TempDir(), WithProxy: true,
		Sim:         sim.Config{BootDelay: time.Second, IPDelay: time.Second},
		ManagerArgs: []string{"--metrics-bind-address=0", "--creating-poll-interval=5s", "--log-level=debug"},
	})
	defer tb.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Seed(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.ApplyFile(ctx, filepath.Join(repoRoot(), "config", "samples", "providerconfig.yaml")); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := tb.Mgmt.Create(ctx, machineRequest(fmt.Sprintf("stale-%d", i), "#cloud-config\n")); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, tb, 3*time.Minute, func() error {
		list := &v1alpha1.MachineRequestList{}
		if err := tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
			return err
		}
		running := 0
		for _, mr := range list.Items {
			if mr.Status.Phase == v1alpha1.MachinePhaseRunning {
				running++
			}
		}
		if running != n {
			return fmt.Errorf("%d of %d Running; %s", running, n, whereTheyStand(list.Items))
		}
		return nil
	})

	tb.Harvester.Proxy.HangWatches(true)
	tb.Harvester.Proxy.CutConnections()
	hungBefore := tb.Harvester.Proxy.Timeouts.Load()
	if err := tb.Mgmt.DeleteAllOf(ctx, &v1alpha1.MachineRequest{}, client.InNamespace(testbed.Namespace)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	waitUntil(t, tb, 4*time.Minute, func() error {
		list := &v1alpha1.MachineRequestList{}
		if err := tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d MachineRequests left (%s)", len(list.Items), whereTheyStand(list.Items))
		}
		return nil
	})
	hung := tb.Harvester.Proxy.Timeouts.Load() - hungBefore
	if hung == 0 {
		t.Fatal("no watch was hung: the test did not test what it says")
	}
	vms, vmis, pvcs, secrets, err := tb.HarvesterLeft(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if vms+vmis+pvcs+secrets != 0 {
		t.Fatalf("left on Harvester: %d VMs, %d VMIs, %d PVCs, %d Secrets", vms, vmis, pvcs, secrets)
	}
	t.Logf("%d machines deleted in %s while %d watch requests hung; nothing left on Harvester", n, time.Since(began).Round(time.Second), hung)
}

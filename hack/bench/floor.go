package main

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The management floor is what the direct twin leaves out and no MachineRequest provider can:
// the management cluster. Whatever a provider does on Harvester, its users create and delete
// MachineRequests, it watches them, and it writes at least three times per machine: its finalizer
// with the machine's place (one write, as this provider does), the status that says Running with
// the IP, and the finalizer's removal once the VM is gone. The bench does exactly that on the
// direct twin's management API server, with the Harvester side idle, and measures the CPU of the
// management API server and etcd, and of its own writes and watch (labelled as the direct
// provider's, on a connection of their own).
//
// On a machine whose CPUs every process shares, time to all Running is CPU over CPUs once the
// run saturates them (both the provider's and the direct run do), so no provider can take less
// than the direct run's time by the ratio of (its CPU + this floor) to its CPU: the ratio the
// floor line prints.

// floorResult is the management floor, creating and deleting.
type floorResult struct {
	// serverCPU is the management API server's and etcd's CPU seconds, creating and deleting.
	serverCPU [2]float64
	// clientCPU is the CPU seconds of the writes and watch of the floor's provider (see
	// labelledCPU), creating and deleting; clientCPUErr says why it was not measured.
	clientCPU    [2]float64
	clientCPUErr error
}

// measureManagementFloor creates n MachineRequests as createAll does and plays the least a
// provider must do with them, then deletes them and lets them go.
func measureManagementFloor(ctx context.Context, o options, sc scenario, tb *testbed.Testbed) (floorResult, error) {
	var res floorResult
	cfg := ownConnection(tb.MgmtConfig)
	var provider client.Client
	var seen *ipSeen
	var stopWatch func()
	var err error
	asDirectProvider(ctx, func(ctx context.Context) {
		if provider, err = client.New(cfg, client.Options{Scheme: tb.Mgmt.Scheme()}); err != nil {
			return
		}
		// The provider's watch of MachineRequests, which hears of every write below.
		seen, stopWatch, err = watchFirst(ctx, cfg, tb.Mgmt.Scheme(), testbed.Namespace, &v1alpha1.MachineRequest{}, func(obj any) (string, bool) {
			mr, ok := obj.(*v1alpha1.MachineRequest)
			if !ok {
				return "", false
			}
			return mr.Name, mr.Status.Phase == v1alpha1.MachinePhaseRunning
		})
	})
	if err != nil {
		return res, err
	}
	defer stopWatch()
	counts, err := watchCounts(ctx, []countedKind{(&machineRequests{}).counted(tb)})
	if err != nil {
		return res, err
	}
	defer counts.stop()

	cpuAtStart := processCPU(tb)
	profile := startLabelledCPU()
	if err := createAll(ctx, tb, o.n, !sc.noUserData); err != nil {
		return res, err
	}
	if err := forEachMachineAsProvider(ctx, o.n, func(ctx context.Context, i int) error { return placeAndRun(ctx, provider, i) }); err != nil {
		return res, err
	}
	if err := waitFor(ctx, o.timeout, tb, func() (bool, error) { return seen.count() == o.n, nil }); err != nil {
		return res, fmt.Errorf("management floor: waiting for the watch to see %d Running (%d): %w", o.n, seen.count(), err)
	}
	res.clientCPU[0], res.clientCPUErr = profile.stop()
	res.serverCPU[0] = managementServerCPU(cpuSince(tb, cpuAtStart))

	cpuAtStart = processCPU(tb)
	profile = startLabelledCPU()
	if err := (&machineRequests{}).deleteAll(ctx, tb); err != nil {
		return res, err
	}
	if err := forEachMachineAsProvider(ctx, o.n, func(ctx context.Context, i int) error { return release(ctx, provider, i) }); err != nil {
		return res, err
	}
	if err := counts.waitEmpty(ctx, o.timeout, tb); err != nil {
		return res, fmt.Errorf("management floor: waiting for the MachineRequests to go (%s left): %w", counts.sample(), err)
	}
	var deleteErr error
	res.clientCPU[1], deleteErr = profile.stop()
	if res.clientCPUErr == nil {
		res.clientCPUErr = deleteErr
	}
	res.serverCPU[1] = managementServerCPU(cpuSince(tb, cpuAtStart))
	return res, nil
}

// forEachMachineAsProvider runs do for machines 0..n-1 as forEachMachine does, as the
// provider's work (see asDirectProvider).
func forEachMachineAsProvider(ctx context.Context, n int, do func(context.Context, int) error) error {
	return forEachMachine(n, func(i int) error {
		var err error
		asDirectProvider(ctx, func(ctx context.Context) { err = do(ctx, i) })
		return err
	})
}

// placeAndRun writes what a provider must of machine i once its VM reports an IP: the finalizer
// with the place (a merge patch locked on the resourceVersion, which createAll's answer does not
// give here, so the finalizer goes in a JSON patch that also tests the list is absent, as on a new
// MachineRequest), then the status.
func placeAndRun(ctx context.Context, c client.Client, i int) error {
	mr := &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.Namespace, Name: machineName(i)}}
	place := v1alpha1.EncodePlacement(v1alpha1.Placement{ClusterID: "floor", Server: "https://harvester.invalid", Namespace: testbed.HarvesterNamespace, Name: mr.Name})
	meta := fmt.Sprintf(`[{"op":"add","path":"/metadata/finalizers","value":[%q]},{"op":"add","path":"/metadata/annotations","value":{%q:%q}}]`,
		v1alpha1.MachineRequestFinalizer, v1alpha1.AnnotationPlacement, place)
	if err := c.Patch(ctx, mr, client.RawPatch(types.JSONPatchType, []byte(meta))); err != nil {
		return fmt.Errorf("management floor: finalizer and place of %s: %w", mr.Name, err)
	}
	status := client.MergeFrom(mr.DeepCopy())
	mr.Status.Phase = v1alpha1.MachinePhaseRunning
	mr.Status.ProviderID = "harvester://" + string(mr.UID)
	mr.Status.IPAddress = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	mr.Status.IPAddresses = []string{mr.Status.IPAddress}
	if err := c.Status().Patch(ctx, mr, status); err != nil {
		return fmt.Errorf("management floor: status of %s: %w", mr.Name, err)
	}
	return nil
}

// release removes the finalizer of machine i, which is being deleted, as a provider does once
// its VM is gone: a JSON patch that tests the list is the provider's finalizer alone.
func release(ctx context.Context, c client.Client, i int) error {
	mr := &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.Namespace, Name: machineName(i)}}
	patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/finalizers","value":[%q]},{"op":"remove","path":"/metadata/finalizers"}]`, v1alpha1.MachineRequestFinalizer)
	if err := c.Patch(ctx, mr, client.RawPatch(types.JSONPatchType, []byte(patch))); err != nil {
		return fmt.Errorf("management floor: finalizer of %s: %w", mr.Name, err)
	}
	return nil
}

// managementServerCPU is the management API server's and etcd's share of cpuSince's answer.
func managementServerCPU(cpu map[string]float64) float64 {
	return cpu["management kube-apiserver"] + cpu["management etcd"]
}

// describe renders the floor per machine and the least ratio to direct it allows.
func (f floorResult) describe(d directResult, n int) string {
	perMachine := func(seconds float64) float64 { return 1000 * seconds / float64(n) }
	own := "its own writes' and watch's CPU not measured: " + fmt.Sprint(f.clientCPUErr)
	if f.clientCPUErr == nil {
		own = fmt.Sprintf("its writes' and watch's own CPU %.1f ms per machine (%.1f + %.1f)",
			perMachine(f.clientCPU[0]+f.clientCPU[1]), perMachine(f.clientCPU[0]), perMachine(f.clientCPU[1]))
	}
	return fmt.Sprintf("management floor (the user's creates and deletes, a watch of MachineRequests, a provider's 3 writes per machine: finalizer with place, status Running, finalizer removed): management API server and etcd %.1f s creating + %.1f s deleting, %s; so no MachineRequest provider can beat %s on this machine",
		f.serverCPU[0], f.serverCPU[1], own, f.ratios(d))
}

// ratios is the least create and delete ratio to direct the floor allows (see the file's comment).
func (f floorResult) ratios(d directResult) string {
	create, del := f.leastRatios(d)
	return fmt.Sprintf("create %.2fx, delete %.2fx", create, del)
}

// leastRatios are the least create and delete ratios to direct the floor allows.
func (f floorResult) leastRatios(d directResult) (create, del float64) {
	least := func(direct, floor float64) float64 { return (direct + floor) / direct }
	return least(d.cpu[0], f.serverCPU[0]+f.clientCPU[0]), least(d.cpu[1], f.serverCPU[1]+f.clientCPU[1])
}

// vsFloor is the provider's own margin over the floor, in a form scripts read: its times over
// the least times any provider could take here, and the manager's CPU over a perfect provider's.
// For MachineRequests the least times are the direct twin's times by the floor's least ratios,
// and a perfect provider's CPU is the direct twin's own plus the floor's writes and watch; for
// the Cluster API front door both come from the Cluster API floor's run (capifloor.go).
func vsFloor(ours result, d directResult) (string, error) {
	var leastRunning, leastDeleted, perfectCPU float64
	switch {
	case d.floorErr != nil:
		return "", d.floorErr
	case ours.scenario.clusterAPI && d.capiFloor.providerCPUErr != nil:
		return "", d.capiFloor.providerCPUErr
	case ours.scenario.clusterAPI:
		leastRunning, leastDeleted = d.capiFloor.toRunning.Seconds(), d.capiFloor.toDeleted.Seconds()
		perfectCPU = d.capiFloor.providerCPU[0] + d.capiFloor.providerCPU[1]
	case d.providerCPUErr != nil || d.floor.clientCPUErr != nil:
		return "", errors.Join(d.providerCPUErr, d.floor.clientCPUErr)
	default:
		create, del := d.floor.leastRatios(d)
		leastRunning, leastDeleted = create*d.toRunning.Seconds(), del*d.toDeleted.Seconds()
		perfectCPU = d.providerCPU[0] + d.providerCPU[1] + d.floor.clientCPU[0] + d.floor.clientCPU[1]
	}
	return fmt.Sprintf("vs floor: create %.2fx, delete %.2fx; manager CPU %.1fx a perfect provider's",
		ours.toRunning.Seconds()/leastRunning, ours.toDeleted.Seconds()/leastDeleted, ours.cpuSeconds/perfectCPU), nil
}

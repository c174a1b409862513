package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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

// The contract's floor is the same with the writes Butler's MachineRequest contract asks of every
// provider on top (the phases and events the Butler bootstrap and users read): the status that says Creating once the VM exists, and the events Created,
// Running and Deleted (readable in kubectl describe). Seven writes per machine, where the
// management floor counts three: what this provider writes. The management floor is the
// yardstick; the contract's floor says how much of the margin over it the contract itself costs.

// floorResult is the management floor (or the contract's), creating and deleting.
type floorResult struct {
	// contract is set for the contract's floor.
	contract bool
	// serverCPU is the management API server's and etcd's CPU seconds, creating and deleting.
	serverCPU [2]float64
	// clientCPU is the CPU seconds of the writes and watch of the floor's provider (see
	// labelledCPU), creating and deleting; clientCPUErr says why it was not measured.
	clientCPU    [2]float64
	clientCPUErr error
}

// measureManagementFloor creates n MachineRequests as createAll does and plays the least a
// provider must do with them, then deletes them and lets them go.
func measureManagementFloor(ctx context.Context, o options, sc scenario, tb *testbed.Testbed, contract bool) (floorResult, error) {
	res := floorResult{contract: contract}
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

	// Each machine's UID, which its events name (a provider knows it from its watch).
	uids := make([]types.UID, o.n)
	cpuAtStart := processCPU(tb)
	profile := startLabelledCPU()
	if err := createAll(ctx, tb, o.n, !sc.noUserData); err != nil {
		return res, err
	}
	if err := forEachMachineAsProvider(ctx, o.n, func(ctx context.Context, i int) error {
		uid, err := placeAndRun(ctx, provider, i, contract)
		uids[i] = uid
		return err
	}); err != nil {
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
	if err := forEachMachineAsProvider(ctx, o.n, func(ctx context.Context, i int) error { return release(ctx, provider, i, uids[i], contract) }); err != nil {
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
// MachineRequest), then the status. For the contract's floor, the status Creating and the event
// Created come between, and the event Running last.
func placeAndRun(ctx context.Context, c client.Client, i int, contract bool) (types.UID, error) {
	mr := &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.Namespace, Name: machineName(i)}}
	place := v1alpha1.EncodePlacement(v1alpha1.Placement{ClusterID: "floor", Server: "https://harvester.invalid", Namespace: testbed.HarvesterNamespace, Name: mr.Name})
	meta := fmt.Sprintf(`[{"op":"add","path":"/metadata/finalizers","value":[%q]},{"op":"add","path":"/metadata/annotations","value":{%q:%q}}]`,
		v1alpha1.MachineRequestFinalizer, v1alpha1.AnnotationPlacement, place)
	if err := c.Patch(ctx, mr, client.RawPatch(types.JSONPatchType, []byte(meta))); err != nil {
		return "", fmt.Errorf("management floor: finalizer and place of %s: %w", mr.Name, err)
	}
	vm := floorVM(mr.Name)
	if contract {
		status := client.MergeFrom(mr.DeepCopy())
		mr.Status.Phase = v1alpha1.MachinePhaseCreating
		mr.Status.ProviderID = "harvester://" + string(mr.UID)
		setConditions(mr, metav1.ConditionTrue, v1alpha1.ReasonVMCreating, "Creating "+vm+" on Harvester")
		if err := c.Status().Patch(ctx, mr, status); err != nil {
			return "", fmt.Errorf("contract's floor: status Creating of %s: %w", mr.Name, err)
		}
		if err := c.Create(ctx, floorEvent(mr, "Created", "Created "+vm+" on Harvester")); err != nil {
			return "", fmt.Errorf("contract's floor: event Created of %s: %w", mr.Name, err)
		}
	}
	status := client.MergeFrom(mr.DeepCopy())
	mr.Status.Phase = v1alpha1.MachinePhaseRunning
	mr.Status.ProviderID = "harvester://" + string(mr.UID)
	mr.Status.IPAddress = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	mr.Status.IPAddresses = []string{mr.Status.IPAddress}
	running := vm + " is running at " + mr.Status.IPAddress
	if contract {
		setConditions(mr, metav1.ConditionFalse, v1alpha1.ReasonVMRunning, running)
	}
	if err := c.Status().Patch(ctx, mr, status); err != nil {
		return "", fmt.Errorf("management floor: status of %s: %w", mr.Name, err)
	}
	if contract {
		if err := c.Create(ctx, floorEvent(mr, "Running", running)); err != nil {
			return "", fmt.Errorf("contract's floor: event Running of %s: %w", mr.Name, err)
		}
	}
	return mr.UID, nil
}

// setConditions gives mr the three conditions a provider's status carries: Progressing as given,
// Ready its opposite, Degraded False.
func setConditions(mr *v1alpha1.MachineRequest, progressing metav1.ConditionStatus, reason, message string) {
	ready := metav1.ConditionFalse
	if progressing == metav1.ConditionFalse {
		ready = metav1.ConditionTrue
	}
	for _, c := range []metav1.Condition{
		{Type: v1alpha1.ConditionProgressing, Status: progressing, Reason: reason, Message: message},
		{Type: v1alpha1.ConditionReady, Status: ready, Reason: reason, Message: message},
		{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "Healthy", Message: "Nothing keeps the provider from making progress"},
	} {
		meta.SetStatusCondition(&mr.Status.Conditions, c)
	}
}

// floorVM names machine name's VM in the contract's floor's messages, as the provider does.
func floorVM(name string) string { return "VirtualMachine " + testbed.HarvesterNamespace + "/" + name }

// floorEvent is a Normal event about mr, as a provider's event recorder posts it.
func floorEvent(mr *v1alpha1.MachineRequest, reason, message string) *corev1.Event {
	now := metav1.Now()
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: mr.Namespace, Name: fmt.Sprintf("%s.%x", mr.Name, now.UnixNano())},
		InvolvedObject: corev1.ObjectReference{Kind: "MachineRequest", APIVersion: v1alpha1.GroupVersion.String(),
			Namespace: mr.Namespace, Name: mr.Name, UID: mr.UID, ResourceVersion: mr.ResourceVersion},
		Reason: reason, Message: message, Type: corev1.EventTypeNormal, Count: 1,
		Source:         corev1.EventSource{Component: "floor"},
		FirstTimestamp: now, LastTimestamp: now,
	}
}

// release removes the finalizer of machine i, which is being deleted, as a provider does once
// its VM is gone: a JSON patch that tests the list is the provider's finalizer alone. For the
// contract's floor, the event Deleted first.
func release(ctx context.Context, c client.Client, i int, uid types.UID, contract bool) error {
	mr := &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.Namespace, Name: machineName(i), UID: uid}}
	if contract {
		if err := c.Create(ctx, floorEvent(mr, "Deleted", "Deleted "+floorVM(mr.Name)+" and its disks from Harvester")); err != nil {
			return fmt.Errorf("contract's floor: event Deleted of %s: %w", mr.Name, err)
		}
	}
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
	what, who := "management floor (the user's creates and deletes, a watch of MachineRequests, a provider's 3 writes per machine: finalizer with place, status Running, finalizer removed)", "no MachineRequest provider"
	if f.contract {
		what, who = "contract's floor (the same, plus what the MachineRequest contract asks of a provider: status Creating and the events Created, Running, Deleted; 7 writes per machine)", "no provider that keeps the contract"
	}
	return fmt.Sprintf("%s: management API server and etcd %.1f s creating + %.1f s deleting, %s; so %s can beat %s on this machine",
		what, f.serverCPU[0], f.serverCPU[1], own, who, f.ratios(d))
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
// the least times any provider could take here, and the manager's CPU over a perfect provider's
// (floorMarginOf); over the contract's floor too for MachineRequests, if it was measured.
func vsFloor(ours result, d directResult) (string, error) {
	m, err := floorMarginOf(ours, d)
	if err != nil {
		return "", err
	}
	line := "vs floor: " + m.String()
	if m.runCPU > 0 {
		line += " (" + cpuDifference(ours.obs.cpu, d.capiFloor.createCPU) + ")"
	}
	if !ours.scenario.clusterAPI && d.contractFloor.clientCPUErr == nil && d.contractFloor.serverCPU[0] > 0 {
		line += "; vs the contract's floor: " + d.contractFloor.margin(ours, d).String()
	}
	return line, nil
}

// floorMargin is a provider's times to all Running and to all deleted over the least times any
// provider could take in the same run, and its manager's CPU over a perfect provider's.
//
// For the Cluster API front door, runCPU is what every process of the run used until all Running
// over what the floor's run used (0: not measured). Both runs keep two CPUs busy at about the same
// rate while Cluster API core creates the machines, so the time to all Running follows the CPU
// the run needs: runCPU is where a create ratio over 1 comes from (docs/performance.md).
type floorMargin struct{ create, del, cpu, runCPU float64 }

func (m floorMargin) String() string {
	s := fmt.Sprintf("create %.2fx, delete %.2fx; manager CPU %.1fx a perfect provider's", m.create, m.del, m.cpu)
	if m.runCPU > 0 {
		s += fmt.Sprintf("; CPU until all Running %.2fx the floor's run's", m.runCPU)
	}
	return s
}

// cpuDifference renders what each kind of process used in a run over what it used in the floor's
// run (CPU seconds by kind, as cpuSince answers), the largest difference first, those under 0.05 s
// left out: "+5.1 s: manager +1.9, management kube-apiserver +1.8".
func cpuDifference(run, floor map[string]float64) string {
	kinds := maps.Clone(run)
	if kinds == nil {
		kinds = map[string]float64{}
	}
	for k, s := range floor {
		kinds[k] -= s
	}
	names := slices.Collect(maps.Keys(kinds))
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(math.Abs(kinds[b]), math.Abs(kinds[a])); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := []string{}
	for _, k := range names {
		if math.Abs(kinds[k]) >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %+.1f", k, kinds[k]))
		}
	}
	return fmt.Sprintf("%+.1f s: %s", totalCPU(run)-totalCPU(floor), strings.Join(parts, ", "))
}

// floorMarginOf is the provider's margin over the floor of its run. For MachineRequests the least
// times are the direct twin's times by the floor's least ratios, and a perfect provider's CPU is
// the direct twin's own plus the floor's writes and watch. For the Cluster API front door both
// come from the Cluster API floor's run (capifloor.go).
func floorMarginOf(ours result, d directResult) (floorMargin, error) {
	switch {
	case d.floorErr != nil:
		return floorMargin{}, d.floorErr
	case ours.scenario.clusterAPI && d.capiFloor.providerCPUErr != nil:
		return floorMargin{}, d.capiFloor.providerCPUErr
	case ours.scenario.clusterAPI:
		m := marginOf(ours, d.capiFloor.toRunning.Seconds(), d.capiFloor.toDeleted.Seconds(),
			d.capiFloor.providerCPU[0]+d.capiFloor.providerCPU[1])
		if floorCPU := totalCPU(d.capiFloor.createCPU); floorCPU > 0 {
			m.runCPU = totalCPU(ours.obs.cpu) / floorCPU
		}
		return m, nil
	case d.providerCPUErr != nil || d.floor.clientCPUErr != nil:
		return floorMargin{}, errors.Join(d.providerCPUErr, d.floor.clientCPUErr)
	}
	return d.floor.margin(ours, d), nil
}

// margin is the provider's margin over the floor f on top of the direct twin d.
func (f floorResult) margin(ours result, d directResult) floorMargin {
	create, del := f.leastRatios(d)
	return marginOf(ours, create*d.toRunning.Seconds(), del*d.toDeleted.Seconds(),
		d.providerCPU[0]+d.providerCPU[1]+f.clientCPU[0]+f.clientCPU[1])
}

// marginOf is the provider's margin over the least times and a perfect provider's CPU, in seconds.
func marginOf(ours result, leastRunning, leastDeleted, perfectCPU float64) floorMargin {
	return floorMargin{create: ours.toRunning.Seconds() / leastRunning, del: ours.toDeleted.Seconds() / leastDeleted, cpu: ours.cpuSeconds / perfectCPU}
}

// repeatedMargins is the margins over the floor of one run done several times (-repeat). On a
// shared 2-CPU machine the floor's own time to all Running varies by 10 % and more from one run to
// the next (docs/performance.md), as much as the margins it measures: one run's ratio cannot
// decide a goal, the median of several can.
type repeatedMargins struct {
	name    string
	margins []floorMargin
}

// summary is the median of each ratio, then each run's, in the order they ran.
func (r repeatedMargins) summary() string {
	ratio := func(get func(floorMargin) float64) (float64, string) {
		values := make([]float64, len(r.margins))
		each := make([]string, len(r.margins))
		for i, m := range r.margins {
			values[i], each[i] = get(m), fmt.Sprintf("%.2f", get(m))
		}
		return median(values), strings.Join(each, ", ")
	}
	create, creates := ratio(func(m floorMargin) float64 { return m.create })
	del, deletes := ratio(func(m floorMargin) float64 { return m.del })
	cpu, cpus := ratio(func(m floorMargin) float64 { return m.cpu })
	s := fmt.Sprintf("- %s, vs floor over %d runs, median: create %.2fx (%s), delete %.2fx (%s); manager CPU %.1fx a perfect provider's (%s)",
		r.name, len(r.margins), create, creates, del, deletes, cpu, cpus)
	if !slices.ContainsFunc(r.margins, func(m floorMargin) bool { return m.runCPU <= 0 }) {
		runCPU, runCPUs := ratio(func(m floorMargin) float64 { return m.runCPU })
		s += fmt.Sprintf("; CPU until all Running %.2fx the floor's run's (%s)", runCPU, runCPUs)
	}
	return s
}

// median is the middle value, or the mean of the middle two (values is not empty; it is sorted
// in place).
func median(values []float64) float64 {
	slices.Sort(values)
	n := len(values)
	if n%2 == 0 {
		return (values[n/2-1] + values[n/2]) / 2
	}
	return values[n/2]
}

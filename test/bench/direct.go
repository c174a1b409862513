package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The "direct" scenario is the physical limit of this machine for a scenario: no management side
// and no provider; the bench itself creates on the simulated Harvester exactly what a perfect
// provider would (the provider's own builders: the cloud-init Secret when there is userData, the
// root disk, the VM), learns each IP by watching VMIs, and deletes the VMs (Harvester removes
// their disks, the garbage collector their Secrets). The provider's times divided by these say
// what the provider itself costs.

// directResult is what the direct scenario measures.
type directResult struct {
	toRunning, toDeleted time.Duration
	left                 int
	// deletion is what was left every second while everything was deleted.
	deletion string
	// createCPU is the CPU each process used from the first create to all Running.
	createCPU string
	// cpu is the CPU seconds of every process, creating and deleting.
	cpu [2]float64
	// hvWrites is what the Harvester API server was asked to write per machine, by verb and
	// resource, creating and deleting: the direct provider's writes and the simulator's.
	hvWrites string
	// floor is the management side no MachineRequest provider can avoid, capiFloor what Cluster
	// API core costs with a perfect provider (the Cluster API front door's); floorErr says why
	// the run's was not measured.
	floor floorResult
	// contractFloor is the floor with the writes the MachineRequest contract asks of a provider (floor.go); its
	// serverCPU is zero if it was not measured.
	contractFloor floorResult
	capiFloor     clusterAPIFloor
	floorErr      error
	// providerCPU is the CPU the direct provider's own work used (see labelledCPU), creating
	// and deleting; providerCPUErr says why it was not measured.
	providerCPU    [2]float64
	providerCPUErr error
}

func runDirect(ctx context.Context, o options, sc scenario, work string) (directResult, error) {
	res, err := runDirectTwin(ctx, o, sc, work)
	if err == nil && sc.clusterAPI {
		// After the direct twin's testbed has stopped: its API servers would compete with it.
		res.capiFloor, res.floorErr = measureClusterAPIFloor(ctx, o, sc, work)
	}
	return res, err
}

// runDirectTwin runs the direct twin and, for MachineRequests, the management floor on its
// testbed.
func runDirectTwin(ctx context.Context, o options, sc scenario, work string) (directResult, error) {
	var res directResult
	tb, err := startSeeded(ctx, o, sc, testbed.Options{WorkDir: filepath.Join(work, "direct"), NoManager: true})
	defer tb.Stop()
	if err != nil {
		return res, err
	}
	asDirectProvider(ctx, func(ctx context.Context) { err = res.drive(ctx, o, sc, tb) })
	if err != nil {
		return res, err
	}
	// The API server's word, not the watches': what is left once they saw nothing.
	vms, vmis, pvcs, secrets, err := tb.HarvesterLeft(ctx)
	if err != nil {
		return res, err
	}
	res.left = vms + vmis + pvcs + secrets
	if !sc.clusterAPI {
		res.floor, res.floorErr = measureManagementFloor(ctx, o, sc, tb, false)
		if res.floorErr == nil {
			res.contractFloor, res.floorErr = measureManagementFloor(ctx, o, sc, tb, true)
		}
	}
	return res, nil
}

// drive does what a perfect provider would, as the direct provider (see asDirectProvider): it
// creates the machines, learns their IPs from its watch of VMIs, and deletes them. What it does
// only to measure (the per-second counts of the deletion) runs unlabelled. With several Harvester
// clusters, machine i goes to cluster i mod K, as the provider's run spreads them, and the
// perfect provider keeps a client and a watch of VMIs to each.
func (d *directResult) drive(ctx context.Context, o options, sc scenario, tb *testbed.Testbed) error {
	clusters := make([]directCluster, len(tb.Harvesters))
	for k, hv := range tb.Harvesters {
		cfg := ownConnection(hv.Config)
		c, err := client.New(cfg, client.Options{Scheme: hv.Client.Scheme()})
		if err != nil {
			return err
		}
		imageRef := harvester.ObjectRef{Namespace: testbed.HarvesterNamespace, Name: testbed.ImageName}
		image, err := harvester.ReadImage(ctx, c, imageRef)
		if err != nil {
			return err
		}
		running, stop, err := watchVMIAddresses(ctx, cfg, c.Scheme())
		if err != nil {
			return err
		}
		defer stop()
		clusters[k] = directCluster{c: c, image: image, running: running}
	}
	running := func() int {
		sum := 0
		for _, cl := range clusters {
			sum += cl.running.count()
		}
		return sum
	}

	writesAtStart, err := harvesterWrites(ctx, tb)
	if err != nil {
		return err
	}
	cpuAtStart := processCPU(tb)
	profile := startLabelledCPU()
	start := time.Now()
	if err := forEachMachine(o.n, func(i int) error {
		cl := clusters[i%len(clusters)]
		return createDirect(ctx, cl.c, cl.image, i, !sc.noUserData)
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, o.timeout, tb, func() (bool, error) { return running() == o.n, nil }); err != nil {
		return fmt.Errorf("waiting for VMIs to report an IP (%d of %d): %w", running(), o.n, err)
	}
	d.toRunning = time.Since(start)
	d.providerCPU[0], d.providerCPUErr = profile.stop()
	createCPU := cpuSince(tb, cpuAtStart)
	d.createCPU, d.cpu[0] = describeCPU(createCPU), totalCPU(createCPU)

	var counts *deletionCounts
	var progress *deletionProgress
	pprof.Do(ctx, pprof.Labels(labelKey, "measurement"), func(ctx context.Context) {
		if counts, err = watchCounts(ctx, harvesterKinds(tb)); err == nil {
			progress = sampleDeletion(ctx, tb, counts)
		}
	})
	if err != nil {
		return err
	}
	defer counts.stop()
	profile = startLabelledCPU()
	start = time.Now()
	for _, cl := range clusters {
		if _, err := deleteCollection(ctx, cl.c, &kubevirtv1.VirtualMachine{}, client.InNamespace(testbed.HarvesterNamespace)); err != nil {
			return err
		}
	}
	if err := counts.waitEmpty(ctx, o.timeout, tb); err != nil {
		return fmt.Errorf("waiting for deletion (%s left: %s): %w", counts.what(), counts.sample(), err)
	}
	d.toDeleted = time.Since(start)
	var deleteErr error
	d.providerCPU[1], deleteErr = profile.stop()
	d.providerCPUErr = errors.Join(d.providerCPUErr, deleteErr)
	d.deletion = progress.finish()
	d.cpu[1] = totalCPU(progress.cpu)
	writesAtEnd, err := harvesterWrites(ctx, tb)
	if err != nil {
		return err
	}
	d.hvWrites = describeWrites(writesAtStart, writesAtEnd, o.n)
	return nil
}

// directCluster is what the direct provider keeps of one Harvester cluster: its client, the image
// of the machines there, and its watch of VMIs.
type directCluster struct {
	c       client.Client
	image   harvester.ImageInfo
	running *ipSeen
}

// createDirect creates machine i as the provider would (createDirectMachine), as createAll's
// MachineRequest i asks.
func createDirect(ctx context.Context, c client.Client, image harvester.ImageInfo, i int, userData bool) error {
	name := machineName(i)
	var data string
	if userData {
		data = "#cloud-config\nhostname: " + name + "\n"
	}
	spec := directSpec(name, types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)), data)
	if i < 3 { // as createAll's MachineRequests
		spec.Role = "control-plane"
	}
	_, err := createDirectMachine(ctx, c, image, spec)
	return err
}

// directSpec is a machine of the size of createAll's MachineRequests and the Cluster API run's
// HarvesterMachines, on the testbed's network.
func directSpec(name string, owner types.UID, userData string) *harvester.MachineSpec {
	return &harvester.MachineSpec{
		Owner:     harvester.Owner{Namespace: testbed.Namespace, Name: name, UID: owner},
		Namespace: testbed.HarvesterNamespace, Name: name, Role: "worker", CPU: 4, MemoryMB: 8192, DiskGB: 50,
		NICs:     []harvester.NIC{{Network: harvester.ObjectRef{Namespace: testbed.HarvesterNamespace, Name: testbed.NetworkName}}},
		UserData: userData,
	}
}

// createDirectMachine creates the machine as the provider would, with its builders and in its
// order: the root disk, the cloud-init Secret owned by it (if there is userData), the VM. It
// returns the VM as the API server created it.
func createDirectMachine(ctx context.Context, c client.Client, image harvester.ImageInfo, spec *harvester.MachineSpec) (*kubevirtv1.VirtualMachine, error) {
	spec.Image = image.Ref
	root := harvester.BuildRootDiskClaim(spec, image)
	if err := c.Create(ctx, root); err != nil {
		return nil, err
	}
	if spec.HasCloudInit() {
		owner := metav1.OwnerReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: root.Name, UID: root.UID}
		if err := c.Create(ctx, harvester.BuildCloudInitSecret(spec, &owner)); err != nil {
			return nil, err
		}
	}
	vm := harvester.BuildVirtualMachine(spec)
	return vm, c.Create(ctx, vm)
}

// forEachMachine runs create for 0..n-1 from 8 goroutines, as createAll creates MachineRequests.
func forEachMachine(n int, create func(int) error) error {
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				errs <- create(i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// watchVMIAddresses records when each VMI first reports a routable IPv4 address on the machine's
// NIC, as the provider's informer would see it.
func watchVMIAddresses(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (*ipSeen, func(), error) {
	return watchFirst(ctx, cfg, scheme, testbed.HarvesterNamespace, &kubevirtv1.VirtualMachineInstance{}, func(obj any) (string, bool) {
		vmi, ok := obj.(*kubevirtv1.VirtualMachineInstance)
		if !ok {
			return "", false
		}
		return vmi.Name, vmi.Status.Phase == kubevirtv1.Running && harvester.SelectAddresses(vmi.Status.Interfaces, harvester.NICName).Primary != ""
	})
}

// compareWithDirect prints the vsDirect line of a run and returns it for the report, with the
// direct run's times.
func compareWithDirect(r result, d directResult) string {
	line := vsDirect(r, d)
	if floor, err := vsFloor(r, d); err == nil {
		line += "\n   " + floor
	} else {
		line += "\n   vs floor: not measured: " + err.Error()
	}
	fmt.Println("   " + line)
	return fmt.Sprintf("- %s: %s (direct: all Running in %s, deleted in %s; %s; %s)", r.runName(), line,
		d.toRunning.Round(10*time.Millisecond), d.toDeleted.Round(10*time.Millisecond), d.providerCPUPerMachine(r.n), d.floorLine(r.n))
}

// providerCPUPerMachine is the direct provider's own CPU per machine, creating + deleting: the
// floor under the manager's.
func (d directResult) providerCPUPerMachine(n int) string {
	if d.providerCPUErr != nil {
		return "the direct provider's own CPU not measured: " + d.providerCPUErr.Error()
	}
	perMachine := func(seconds float64) float64 { return 1000 * seconds / float64(n) }
	return fmt.Sprintf("the direct provider's own CPU %.1f ms per machine (%.1f creating + %.1f deleting)",
		perMachine(d.providerCPU[0]+d.providerCPU[1]), perMachine(d.providerCPU[0]), perMachine(d.providerCPU[1]))
}

// floorLine describes the management floor, or why it was not measured.
func (d directResult) floorLine(n int) string {
	if d.floorErr != nil {
		return "floor not measured: " + d.floorErr.Error()
	}
	if d.capiFloor.toRunning > 0 {
		return d.capiFloor.describe(n)
	}
	return d.floor.describe(d, n) + "; " + d.contractFloor.describe(d, n)
}

// vsDirect is the line that compares a scenario with its physical limit, in a form scripts read.
func vsDirect(ours result, direct directResult) string {
	return fmt.Sprintf("vs direct: create %.2fx, delete %.2fx; manager CPU %.1f ms per machine",
		ours.toRunning.Seconds()/direct.toRunning.Seconds(), ours.toDeleted.Seconds()/direct.toDeleted.Seconds(),
		1000*ours.cpuSeconds/float64(ours.n))
}

package machinerequest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// fakeMachines is the Harvester side as the unit tests want it to behave.
type fakeMachines struct {
	identity  harvester.ClusterIdentity
	ensure    func(*harvester.MachineSpec) (harvester.Observation, error)
	observe   func(harvester.MachineRef) (harvester.Observation, error)
	delete    func(harvester.MachineRef) (harvester.Deletion, error)
	preflight func() (string, []harvester.Check)
	image     func(harvester.ImageSpec) (harvester.ImageImport, error)
	exists    func(harvester.ObjectRef) (bool, error)
	calls     []string
}

func (f *fakeMachines) EnsureImage(_ context.Context, s harvester.ImageSpec) (harvester.ImageImport, error) {
	f.calls = append(f.calls, "EnsureImage")
	return f.image(s)
}

func (f *fakeMachines) ImageExists(_ context.Context, ref harvester.ObjectRef) (bool, error) {
	f.calls = append(f.calls, "ImageExists")
	return f.exists(ref)
}

func (f *fakeMachines) Identity(context.Context) (harvester.ClusterIdentity, error) {
	return f.identity, nil
}

// Ensure behaves as the engine's: for a machine without a recorded VM, the front door's gate,
// then its record of the place; then what the test wants (recorded as call "Ensure": it may
// create).
func (f *fakeMachines) Ensure(ctx context.Context, s *harvester.MachineSpec) (harvester.Observation, error) {
	if g, ok := s.Door.(harvester.CreationGate); ok && s.VMUID == "" {
		if err := g.Gate(ctx); err != nil {
			return harvester.Observation{}, err
		}
	}
	if r, ok := s.Door.(harvester.PlaceRecorder); ok {
		if err := r.Record(ctx, f.identity); err != nil {
			return harvester.Observation{}, err
		}
	}
	f.calls = append(f.calls, "Ensure")
	return f.ensure(s)
}

func (f *fakeMachines) Observe(_ context.Context, ref harvester.MachineRef) (harvester.Observation, error) {
	f.calls = append(f.calls, "Observe")
	return f.observe(ref)
}

func (f *fakeMachines) Delete(_ context.Context, ref harvester.MachineRef) (harvester.Deletion, error) {
	f.calls = append(f.calls, "Delete")
	return f.delete(ref)
}

type fakeFactory struct {
	machines *fakeMachines
	err      error
	calls    int
	// namespaces lists the Harvester namespace of every client asked for.
	namespaces []string
}

func (f *fakeMachines) Preflight(context.Context, harvester.PreflightSpec) (string, []harvester.Check) {
	f.calls = append(f.calls, "Preflight")
	return f.preflight()
}

func (f *fakeFactory) Invalidate(harvester.Credentials) {}

func (f *fakeFactory) ClusterFor(_ context.Context, creds harvester.Credentials) (harvester.Cluster, error) {
	f.calls++
	f.namespaces = append(f.namespaces, creds.Namespace)
	if f.err != nil {
		return nil, f.err
	}
	return f.machines, nil
}

type fixture struct {
	t        *testing.T
	client   client.Client
	factory  *fakeFactory
	machines *fakeMachines
	recorder *events.FakeRecorder
	r        *Reconciler
}

func newScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(objs...).
		WithStatusSubresource(&v1alpha1.MachineRequest{}).Build()
	m := &fakeMachines{
		ensure: func(*harvester.MachineSpec) (harvester.Observation, error) {
			return harvester.Observation{}, errors.New("Ensure not expected")
		},
		observe: func(harvester.MachineRef) (harvester.Observation, error) {
			return harvester.Observation{}, errors.New("Observe not expected")
		},
		delete: func(harvester.MachineRef) (harvester.Deletion, error) {
			return harvester.Deletion{}, errors.New("Delete not expected")
		},
		preflight: func() (string, []harvester.Check) { return "", nil },
		image: func(harvester.ImageSpec) (harvester.ImageImport, error) {
			return harvester.ImageImport{}, errors.New("EnsureImage not expected")
		},
		exists:   func(harvester.ObjectRef) (bool, error) { return false, errors.New("ImageExists not expected") },
		identity: testCluster,
	}
	f := &fixture{t: t, client: c, machines: m, factory: &fakeFactory{machines: m}, recorder: events.NewFakeRecorder(100)}
	f.r = &Reconciler{Client: c, Harvester: f.factory, Recorder: f.recorder}
	f.r.applyDefaults()
	return f
}

func (f *fixture) reconcile(mr *v1alpha1.MachineRequest) (ctrl.Result, error) {
	f.t.Helper()
	return f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(mr)})
}

func (f *fixture) get(mr *v1alpha1.MachineRequest) *v1alpha1.MachineRequest {
	f.t.Helper()
	out := &v1alpha1.MachineRequest{}
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(mr), out); err != nil {
		f.t.Fatalf("get MachineRequest: %v", err)
	}
	return out
}

func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func harvesterPC(provider v1alpha1.ProviderType) *v1alpha1.ProviderConfig {
	return &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "pc", Namespace: "butler-system"},
		Spec: v1alpha1.ProviderConfigSpec{
			Provider:       provider,
			CredentialsRef: &v1alpha1.SecretReference{Name: "harvester-kubeconfig"},
			Harvester:      &v1alpha1.HarvesterProviderConfig{Namespace: "vms", NetworkName: "default/vlan40", ImageName: "default/talos"},
		},
	}
}

func machineRequest() *v1alpha1.MachineRequest {
	return &v1alpha1.MachineRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Namespace: "butler-system", UID: types.UID("11111111-2222-3333-4444-555555555555"), Generation: 1},
		Spec: v1alpha1.MachineRequestSpec{
			ProviderRef: v1alpha1.ProviderReference{Name: "pc"},
			MachineName: "cluster-cp-0", Role: v1alpha1.MachineRoleControlPlane,
			CPU: 4, MemoryMB: 8192, DiskGB: 50, UserData: "#cloud-config\n",
		},
	}
}

func withFinalizer(mr *v1alpha1.MachineRequest) *v1alpha1.MachineRequest {
	mr.Finalizers = []string{v1alpha1.MachineRequestFinalizer}
	return mr
}

func condition(mr *v1alpha1.MachineRequest, t string) *metav1.Condition {
	return meta.FindStatusCondition(mr.Status.Conditions, t)
}

func requireCondition(t *testing.T, mr *v1alpha1.MachineRequest, condType string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	c := condition(mr, condType)
	if c == nil || c.Status != status || c.Reason != reason {
		t.Fatalf("condition %s = %+v, want status %s reason %s", condType, c, status, reason)
	}
	return c
}

func requireEvent(t *testing.T, got []string, prefix string) {
	t.Helper()
	for _, e := range got {
		if strings.HasPrefix(e, prefix) {
			return
		}
	}
	t.Fatalf("no event starting with %q in %q", prefix, got)
}

// testCluster is the Harvester cluster the fake factory reaches.
var testCluster = harvester.ClusterIdentity{ID: "cluster-a", Server: "https://harvester-a.example:6443"}

// placed records that the machine lives in Harvester namespace "vms" of testCluster, with VM UID
// "vm-uid", as it would be once its VM was created.
func placed(mr *v1alpha1.MachineRequest) *v1alpha1.MachineRequest {
	metav1.SetMetaDataAnnotation(&mr.ObjectMeta, v1alpha1.AnnotationPlacement, v1alpha1.EncodePlacement(
		v1alpha1.Placement{ClusterID: testCluster.ID, Server: testCluster.Server, Namespace: "vms", Name: mr.Spec.MachineName}))
	mr.Status.ProviderID = "harvester://vm-uid"
	return mr
}

var running = harvester.Observation{
	VMExists: true, VMUID: "vm-uid", ProviderID: "harvester://vm-uid", PrintableStatus: "Running", VMIPhase: "Running", Running: true,
	Addresses: harvester.Addresses{Primary: "10.40.0.10", All: []string{"10.40.0.10", "fe80::1"}, MAC: "52:54:00:00:00:01"},
}

// Required test: the controller skips MachineRequests of other providers, and never writes to
// one whose ProviderConfig is missing unless our finalizer shows it is ours.
func TestProviderFilter(t *testing.T) {
	for name, pc := range map[string]*v1alpha1.ProviderConfig{
		"other provider":         harvesterPC(v1alpha1.ProviderTypeNutanix),
		"ProviderConfig missing": nil,
	} {
		t.Run(name, func(t *testing.T) {
			objs := []client.Object{machineRequest()}
			if pc != nil {
				objs = append(objs, pc)
			}
			f := newFixture(t, objs...)
			before := f.get(machineRequest())
			res, err := f.reconcile(before)
			if err != nil || res != (ctrl.Result{}) {
				t.Fatalf("Reconcile = %+v, %v; want no requeue and no error", res, err)
			}
			after := f.get(before)
			if after.ResourceVersion != before.ResourceVersion {
				t.Fatalf("MachineRequest was written to: %+v", after)
			}
			if f.factory.calls != 0 || len(f.events()) != 0 {
				t.Fatalf("Harvester contacted %d times or events recorded", f.factory.calls)
			}
		})
	}
}

// Required test: Pending -> Creating, and idempotency when the VM already exists.
func TestVMCreate(t *testing.T) {
	f := newFixture(t, machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester))
	created := true
	var got *harvester.MachineSpec
	f.machines.ensure = func(s *harvester.MachineSpec) (harvester.Observation, error) {
		got = s
		obs := harvester.Observation{VMExists: true, VMCreated: created, VMUID: "vm-uid", ProviderID: "harvester://vm-uid", PrintableStatus: "Starting"}
		created = false // a second Ensure finds the VM (ours) in place
		return obs, nil
	}

	res, err := f.reconcile(machineRequest())
	if err != nil || res.RequeueAfter != f.r.CreatingPollInterval {
		t.Fatalf("Reconcile = %+v, %v; want RequeueAfter %s", res, err, f.r.CreatingPollInterval)
	}
	mr := f.get(machineRequest())
	// One status write while creating, once the VM exists: Creating, with its providerID.
	if mr.Status.Phase != v1alpha1.MachinePhaseCreating || mr.Status.ProviderID != "harvester://vm-uid" || mr.Status.ObservedGeneration != mr.Generation {
		t.Fatalf("status = %+v; want Creating, observedGeneration %d, providerID harvester://vm-uid", mr.Status, mr.Generation)
	}
	want := v1alpha1.Placement{ClusterID: testCluster.ID, Server: testCluster.Server, Namespace: "vms", Name: "cluster-cp-0"}
	legacy := mr.Status.Placement //nolint:staticcheck // SA1019: the deprecated field must stay empty
	if p, err := mr.RecordedPlacement(); err != nil || p == nil || *p != want || legacy != nil {
		t.Fatalf("placement = %+v (%v), status.placement %+v; want %+v in the annotation", p, err, legacy, want)
	}
	if !hasFinalizer(mr) {
		t.Fatal("finalizer not added")
	}
	requireCondition(t, mr, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonVMCreating)
	requireCondition(t, mr, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonVMCreating)
	requireEvent(t, f.events(), "Normal Created")
	if got.Namespace != "vms" || got.Name != "cluster-cp-0" || got.Image.String() != "default/talos" ||
		got.PrimaryNetwork().String() != "default/vlan40" || got.CPU != 4 || got.MemoryMB != 8192 || got.DiskGB != 50 || got.Owner.UID != mr.UID {
		t.Fatalf("MachineSpec = %+v", got)
	}

	// Idempotent: the VM exists now; nothing new happens.
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	again := f.get(mr)
	if again.Status.Phase != v1alpha1.MachinePhaseCreating || len(f.events()) != 0 {
		t.Fatalf("second reconcile changed phase to %s or recorded events", again.Status.Phase)
	}
	if again.ResourceVersion != mr.ResourceVersion {
		t.Fatalf("second reconcile wrote the unchanged status (resourceVersion %s -> %s)", mr.ResourceVersion, again.ResourceVersion)
	}
}

// Required test: Creating -> Running once the IP is reported.
func TestStatusPoll(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.Phase = v1alpha1.MachinePhaseCreating
	f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
	obs := running
	obs.Addresses = harvester.Addresses{}
	f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) { return obs, nil }

	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	got := f.get(mr)
	if got.Status.Phase != v1alpha1.MachinePhaseCreating {
		t.Fatalf("phase %s before an IP was reported", got.Status.Phase)
	}
	requireCondition(t, got, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonVMCreating)

	obs = running
	res, err := f.reconcile(mr)
	if err != nil || res.RequeueAfter != f.r.HealthCheckInterval {
		t.Fatalf("Reconcile = %+v, %v; want the health check requeue", res, err)
	}
	got = f.get(mr)
	if got.Status.Phase != v1alpha1.MachinePhaseRunning || got.Status.IPAddress != "10.40.0.10" ||
		len(got.Status.IPAddresses) != 2 || got.Status.MACAddress != "52:54:00:00:00:01" {
		t.Fatalf("status = %+v", got.Status)
	}
	requireCondition(t, got, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonVMRunning)
	requireCondition(t, got, v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonVMRunning)
	requireCondition(t, got, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)
	if got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("observedGeneration %d, want %d", got.Status.ObservedGeneration, got.Generation)
	}
	requireEvent(t, f.events(), "Normal Running")
}

// Required test: the finalizer goes only after the VM is gone; a missing VM deletes fine.
func TestDelete(t *testing.T) {
	f, mr := deletingMachine(t)
	gone := false
	f.machines.delete = func(harvester.MachineRef) (harvester.Deletion, error) {
		if gone {
			return harvester.Deletion{Done: true}, nil
		}
		return harvester.Deletion{Remaining: "VirtualMachine vms/cluster-cp-0"}, nil
	}

	// A deletion under way for less than DeletionReportDelay is not reported.
	res, err := f.reconcile(mr)
	if err != nil || res.RequeueAfter <= 0 || res.RequeueAfter > f.r.DeletionPollInterval {
		t.Fatalf("Reconcile = %+v, %v; want a requeue within the deletion poll interval", res, err)
	}
	got := f.get(mr)
	if !hasFinalizer(got) || got.Status.Phase != v1alpha1.MachinePhaseRunning {
		t.Fatalf("finalizer removed or phase %s written while a quick deletion is under way", got.Status.Phase)
	}

	// One that takes longer says what it waits for.
	f.r.DeletionReportDelay = time.Nanosecond
	res, err = f.reconcile(mr)
	if err != nil || res.RequeueAfter != f.r.DeletionPollInterval {
		t.Fatalf("Reconcile = %+v, %v", res, err)
	}
	got = f.get(mr)
	if !hasFinalizer(got) || got.Status.Phase != v1alpha1.MachinePhaseDeleting {
		t.Fatalf("finalizer removed or phase %s while the VM still exists", got.Status.Phase)
	}
	c := requireCondition(t, got, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonDeleting)
	if !strings.Contains(c.Message, "VirtualMachine vms/cluster-cp-0") {
		t.Fatalf("message %q does not name what is left", c.Message)
	}

	gone = true // the VM is missing (deleted, or never there): idempotent success
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(mr), &v1alpha1.MachineRequest{}); err == nil {
		t.Fatal("MachineRequest still exists after the VM was gone")
	}
	requireEvent(t, f.events(), "Normal Deleted")
}

// A deletion that makes progress is not reported step by step: the status names what is left
// only once the same thing has held the deletion up for DeletionReportDelay.
func TestDeletionReportsOnlyWhatHoldsItUp(t *testing.T) {
	f, mr := deletingMachine(t)
	f.r.DeletionReportDelay = 50 * time.Millisecond
	left := "VirtualMachine vms/cluster-cp-0"
	f.machines.delete = func(harvester.MachineRef) (harvester.Deletion, error) {
		return harvester.Deletion{Remaining: left}, nil
	}

	// The deletion has been under way for longer than the delay, but each step is left behind
	// before the delay is up: nothing is written.
	time.Sleep(f.r.DeletionReportDelay)
	for _, step := range []string{"VirtualMachine vms/cluster-cp-0", "PersistentVolumeClaim vms/cluster-cp-0-disk-0", "Secret vms/cluster-cp-0-cloudinit"} {
		left = step
		res, err := f.reconcile(mr)
		if err != nil || res.RequeueAfter <= 0 || res.RequeueAfter > f.r.DeletionReportDelay+objstatus.TimerSlack {
			t.Fatalf("Reconcile = %+v, %v; want a requeue when the delay is up", res, err)
		}
		if got := f.get(mr); got.Status.Phase != v1alpha1.MachinePhaseRunning {
			t.Fatalf("phase %s written while the deletion makes progress (%s left)", got.Status.Phase, step)
		}
	}

	// The Secret stays: once it has held the deletion up for the delay, the status says so.
	time.Sleep(f.r.DeletionReportDelay)
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	got := f.get(mr)
	if got.Status.Phase != v1alpha1.MachinePhaseDeleting {
		t.Fatalf("phase %s, want Deleting once the Secret holds the deletion up", got.Status.Phase)
	}
	c := requireCondition(t, got, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonDeleting)
	if !strings.Contains(c.Message, "Secret vms/cluster-cp-0-cloudinit") || strings.Contains(c.Message, "VirtualMachine") {
		t.Fatalf("message %q does not name what holds the deletion up alone", c.Message)
	}
}

// Required test: permanent errors make the MachineRequest Failed with a Warning event; transient
// errors never do; waiting is not an error.
func TestErrorHandling(t *testing.T) {
	t.Run("permanent", func(t *testing.T) {
		f := newFixture(t, machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester))
		f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
			return harvester.Observation{}, harvester.Permanent(v1alpha1.ReasonImageNotFound, "VirtualMachineImage default/talos does not exist")
		}
		res, err := f.reconcile(machineRequest())
		if err != nil || res != (ctrl.Result{}) {
			t.Fatalf("Reconcile = %+v, %v; want no requeue, no error", res, err)
		}
		got := f.get(machineRequest())
		if got.Status.Phase != v1alpha1.MachinePhaseFailed || got.Status.FailureReason != v1alpha1.ReasonImageNotFound ||
			!strings.Contains(got.Status.FailureMessage, "default/talos") {
			t.Fatalf("status = %+v", got.Status)
		}
		requireCondition(t, got, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonImageNotFound)
		requireCondition(t, got, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonImageNotFound)
		requireEvent(t, f.events(), "Warning ImageNotFound")

		// Terminal for this generation: Harvester is not asked again.
		calls := len(f.machines.calls)
		if _, err := f.reconcile(got); err != nil || len(f.machines.calls) != calls {
			t.Fatalf("Failed machine was retried without a spec change (err %v)", err)
		}
		// A spec change retries.
		got.Spec.Image = "default/talos-v2"
		got.Generation = 2
		if err := f.client.Update(context.Background(), got); err != nil {
			t.Fatal(err)
		}
		f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
			return harvester.Observation{VMExists: true, VMCreated: true, ProviderID: "harvester://x"}, nil
		}
		if _, err := f.reconcile(got); err != nil {
			t.Fatal(err)
		}
		if s := f.get(got).Status; s.Phase != v1alpha1.MachinePhaseCreating || s.FailureReason != "" {
			t.Fatalf("after a spec change status = %+v; want Creating without failure", s)
		}
	})
	t.Run("transient", func(t *testing.T) {
		f := newFixture(t, machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester))
		f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
			return harvester.Observation{}, errors.New("create VirtualMachine vms/cluster-cp-0 on Harvester: 503 Service Unavailable")
		}
		res, err := f.reconcile(machineRequest())
		if err == nil || res != (ctrl.Result{}) {
			t.Fatalf("Reconcile = %+v, %v; want the error back and no RequeueAfter", res, err)
		}
		got := f.get(machineRequest())
		if got.Status.Phase == v1alpha1.MachinePhaseFailed {
			t.Fatal("a transient error made the machine Failed")
		}
		c := requireCondition(t, got, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonHarvesterUnavailable)
		if !strings.Contains(c.Message, "503") {
			t.Fatalf("Degraded message %q does not say why", c.Message)
		}
	})
	t.Run("waiting", func(t *testing.T) {
		f := newFixture(t, machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester))
		f.factory.err = harvester.Waiting(v1alpha1.ReasonCredentialsUnavailable, 30*time.Second, "credentials Secret butler-system/harvester-kubeconfig does not exist")
		res, err := f.reconcile(machineRequest())
		if err != nil || res.RequeueAfter != 30*time.Second {
			t.Fatalf("Reconcile = %+v, %v; want RequeueAfter 30s and no error", res, err)
		}
		got := f.get(machineRequest())
		if got.Status.Phase != v1alpha1.MachinePhasePending {
			t.Fatalf("phase %s, want Pending", got.Status.Phase)
		}
		requireCondition(t, got, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonCredentialsUnavailable)
	})
}

// A Running machine whose VM is deleted out of band becomes Failed VMDeleted with Ready=False.
func TestRunningVMDeleted(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.Phase, mr.Status.IPAddress, mr.Status.ObservedGeneration = v1alpha1.MachinePhaseRunning, "10.40.0.10", 1
	f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
	f.machines.observe = func(harvester.MachineRef) (harvester.Observation, error) { return harvester.Observation{}, nil }
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	got := f.get(mr)
	if got.Status.Phase != v1alpha1.MachinePhaseFailed || got.Status.FailureReason != v1alpha1.ReasonVMDeleted || got.Status.IPAddress != "" {
		t.Fatalf("status = %+v", got.Status)
	}
	requireCondition(t, got, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonVMDeleted)
	requireEvent(t, f.events(), "Warning VMDeleted")
}

// Deleting with the ProviderConfig gone says why, and the annotation releases the finalizer.
func TestDeleteBlockedAndEscapeHatch(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	f := newFixture(t, mr)
	if err := f.client.Delete(context.Background(), mr); err != nil {
		t.Fatal(err)
	}
	res, err := f.reconcile(mr)
	if err != nil || res.RequeueAfter == 0 {
		t.Fatalf("Reconcile = %+v, %v; want a wait", res, err)
	}
	got := f.get(mr)
	c := requireCondition(t, got, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonDeletionBlocked)
	for _, want := range []string{"butler-system/pc", v1alpha1.AnnotationSkipHarvesterCleanup} {
		if !strings.Contains(c.Message, want) {
			t.Fatalf("message %q does not mention %q", c.Message, want)
		}
	}
	requireEvent(t, f.events(), "Warning DeletionBlocked")

	got.Annotations = map[string]string{v1alpha1.AnnotationSkipHarvesterCleanup: "true"}
	if err := f.client.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reconcile(got); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(mr), &v1alpha1.MachineRequest{}); err == nil {
		t.Fatal("finalizer not released by the escape hatch")
	}
	requireEvent(t, f.events(), "Warning CleanupSkipped")
}

// Semantic validation the published schema lets through ends in Failed with the field named.
func TestInvalidSpecFails(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*v1alpha1.MachineRequest)
		reason string
		field  string
	}{
		"userData over a Secret": {func(m *v1alpha1.MachineRequest) { m.Spec.UserData = strings.Repeat("x", corev1.MaxSecretSize+1) }, v1alpha1.ReasonUserDataTooLarge, "spec.userData"},
		"bad label key":          {func(m *v1alpha1.MachineRequest) { m.Spec.Labels = map[string]string{"a b": "c"} }, v1alpha1.ReasonInvalidSpec, "spec.labels"},
		"reserved label":         {func(m *v1alpha1.MachineRequest) { m.Spec.Labels = map[string]string{"harvesterhci.io/x": "c"} }, v1alpha1.ReasonInvalidSpec, "spec.labels"},
		"bad image":              {func(m *v1alpha1.MachineRequest) { m.Spec.Image = "a/b/c" }, v1alpha1.ReasonInvalidSpec, "spec.image"},
	} {
		t.Run(name, func(t *testing.T) {
			mr := machineRequest()
			tc.mutate(mr)
			f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
			if _, err := f.reconcile(mr); err != nil {
				t.Fatal(err)
			}
			got := f.get(mr)
			if got.Status.Phase != v1alpha1.MachinePhaseFailed || got.Status.FailureReason != tc.reason || !strings.Contains(got.Status.FailureMessage, tc.field) {
				t.Fatalf("status = %s %s %q", got.Status.Phase, got.Status.FailureReason, got.Status.FailureMessage)
			}
			if len(f.machines.calls) != 0 {
				t.Fatalf("Harvester was asked to %v for an invalid request", f.machines.calls)
			}
		})
	}
}

// A VM that is starting is no failure: within the start grace period the machine says it is
// starting, with a message that does not follow KubeVirt's status (no status write per step) and
// no event; past it, VMNotStarting says where the start stands, once. A diagnosis Harvester gives
// is reported at once, and a quota is Degraded.
func TestStartGracePeriod(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.Phase = v1alpha1.MachinePhaseCreating
	f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
	f.r.StartGracePeriod = time.Minute
	obs := harvester.Observation{VMExists: true, VMUID: "vm-uid", ProviderID: "harvester://vm-uid", VMCreatedAt: time.Now().Add(-10 * time.Second),
		Starting: "KubeVirt reports status ErrorUnschedulable; VirtualMachineInstance Scheduling"}
	f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) { return obs, nil }

	var messages []string
	for _, status := range []string{"WaitingForVolumeBinding", "ErrorUnschedulable", "Starting"} {
		obs.PrintableStatus = status
		res, err := f.reconcile(mr)
		if err != nil || res.RequeueAfter <= 0 || res.RequeueAfter > f.r.CreatingPollInterval {
			t.Fatalf("Reconcile = %+v, %v", res, err)
		}
		c := requireCondition(t, f.get(mr), v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonVMCreating)
		messages = append(messages, c.Message)
	}
	if messages[0] != messages[1] || messages[1] != messages[2] {
		t.Fatalf("the message follows KubeVirt's status: %q", messages)
	}
	if e := f.events(); len(e) != 0 {
		t.Fatalf("events while starting: %q", e)
	}

	obs.VMCreatedAt = time.Now().Add(-2 * time.Minute)
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	c := requireCondition(t, f.get(mr), v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonVMNotStarting)
	if !strings.Contains(c.Message, "starting for more than 1m0s") || !strings.Contains(c.Message, obs.Starting) {
		t.Fatalf("message %q", c.Message)
	}
	requireEvent(t, f.events(), "Warning VMNotStarting")
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	if e := f.events(); len(e) != 0 {
		t.Fatalf("the same diagnosis again: %q", e)
	}

	obs.VMCreatedAt = time.Now()
	obs.Diagnosis = &harvester.Diagnosis{Reason: v1alpha1.ReasonQuotaExceeded, Message: "exceeded quota: vm-quota"}
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	requireCondition(t, f.get(mr), v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonQuotaExceeded)
	requireEvent(t, f.events(), "Warning QuotaExceeded")
}

// A diagnosis that may appear with nothing changing on Harvester (the scheduler's reason read
// after its grace) is looked for when it may have appeared, not at the next poll.
func TestCreatingLooksAgainWhenADiagnosisMayHaveAppeared(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.Phase = v1alpha1.MachinePhaseCreating
	f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
	obs := running
	obs.Running, obs.Addresses = false, harvester.Addresses{}
	obs.VMCreatedAt = time.Now()
	obs.DiagnoseAgainAt = time.Now().Add(2 * time.Second)
	f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) { return obs, nil }
	res, err := f.reconcile(mr)
	if err != nil || res.RequeueAfter <= 0 || res.RequeueAfter > 2*time.Second+50*time.Millisecond {
		t.Fatalf("Reconcile = %+v, %v; want a requeue within 2s (poll interval %s)", res, err, f.r.CreatingPollInterval)
	}
}

// A VM that KubeVirt is still shutting down within its grace period is not holding the deletion
// up: the status names it only once it has been left DeletionReportDelay past that period.
func TestDeletionWaitsOutTheVMsShutdownGrace(t *testing.T) {
	f, mr := deletingMachine(t)
	f.r.DeletionReportDelay = 50 * time.Millisecond
	grace := 200 * time.Millisecond
	f.machines.delete = func(harvester.MachineRef) (harvester.Deletion, error) {
		return harvester.Deletion{Remaining: "VirtualMachine vms/cluster-cp-0", ShutdownGrace: grace}, nil
	}
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}

	// Past the report delay, within the grace period: nothing written, and the next look is
	// when the grace period and the delay are up.
	time.Sleep(2 * f.r.DeletionReportDelay)
	res, err := f.reconcile(mr)
	if err != nil || res.RequeueAfter <= 0 || res.RequeueAfter > grace+objstatus.TimerSlack {
		t.Fatalf("Reconcile = %+v, %v; want a requeue when the grace period and the delay are up", res, err)
	}
	if got := f.get(mr); got.Status.Phase != v1alpha1.MachinePhaseRunning {
		t.Fatalf("phase %s written while the VM is within its shutdown grace period", got.Status.Phase)
	}

	time.Sleep(grace)
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	got := f.get(mr)
	if got.Status.Phase != v1alpha1.MachinePhaseDeleting {
		t.Fatalf("phase %s, want Deleting once the VM outlived its grace period by the delay", got.Status.Phase)
	}
	c := requireCondition(t, got, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonDeleting)
	if !strings.Contains(c.Message, "VirtualMachine vms/cluster-cp-0") {
		t.Fatalf("message %q does not name the VM", c.Message)
	}
}

// deletingMachine is a Running machine whose deletion has begun, in its fixture.
func deletingMachine(t *testing.T) (*fixture, *v1alpha1.MachineRequest) {
	t.Helper()
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.Phase = v1alpha1.MachinePhaseRunning
	f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
	if err := f.client.Delete(context.Background(), mr); err != nil {
		t.Fatal(err)
	}
	return f, mr
}

// A machine whose objects on Harvester are watched is woken by their events: it is polled only as
// a safety net (WatchedPollInterval), creating and deleting; one whose objects are read live is
// polled at the short intervals, since nothing else tells of their changes.
func TestWatchedMachinesArePolledOnlyAsASafetyNet(t *testing.T) {
	for _, watched := range []bool{true, false} {
		t.Run(fmt.Sprintf("watched=%t", watched), func(t *testing.T) {
			f := newFixture(t, machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester))
			f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
				return harvester.Observation{VMExists: true, VMCreated: true, VMUID: "vm-uid", ProviderID: "harvester://vm-uid", PrintableStatus: "Starting", Watched: watched}, nil
			}
			wantCreating, wantDeleting := f.r.CreatingPollInterval, f.r.DeletionPollInterval
			if watched {
				wantCreating, wantDeleting = f.r.WatchedPollInterval, f.r.WatchedPollInterval
			}
			res, err := f.reconcile(machineRequest())
			if err != nil || res.RequeueAfter != wantCreating {
				t.Fatalf("creating: Reconcile = %+v, %v; want RequeueAfter %s", res, err, wantCreating)
			}

			d, mr := deletingMachine(t)
			d.machines.delete = func(harvester.MachineRef) (harvester.Deletion, error) {
				return harvester.Deletion{Remaining: "VirtualMachine vms/cluster-cp-0", Watched: watched}, nil
			}
			d.r.DeletionReportDelay = time.Nanosecond // the second look is past the report: the plain poll
			if _, err := d.reconcile(mr); err != nil {
				t.Fatal(err)
			}
			res, err = d.reconcile(mr)
			if err != nil || res.RequeueAfter != wantDeleting {
				t.Fatalf("deleting: Reconcile = %+v, %v; want RequeueAfter %s", res, err, wantDeleting)
			}
		})
	}
	if got := requeue.PollInterval(true, 2*time.Minute, time.Minute); got != 2*time.Minute {
		t.Errorf("a watched machine is polled every %s, more often than an unwatched one (2m)", got)
	}
}

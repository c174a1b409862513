package machinerequest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// pcInNamespace is a harvester ProviderConfig whose machines go to Harvester namespace ns.
func pcInNamespace(ns string) *v1alpha1.ProviderConfig {
	pc := harvesterPC(v1alpha1.ProviderTypeHarvester)
	pc.Spec.Harvester.Namespace = ns
	return pc
}

// The place is stored, with the finalizer, before anything is created on Harvester: a crash right
// after a create, or a ProviderConfig edit, can never leave a VM the MachineRequest does not point
// to. The VM's UID is stored as soon as the VM exists.
func TestPlacementRecordedBeforeAnythingIsCreated(t *testing.T) {
	f := newFixture(t, machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester))
	var storedWhenCreating *v1alpha1.Placement
	finalizerWhenCreating := false
	f.machines.ensure = func(s *harvester.MachineSpec) (harvester.Observation, error) {
		stored := f.get(machineRequest())
		storedWhenCreating, _ = stored.RecordedPlacement()
		finalizerWhenCreating = hasFinalizer(stored)
		if s.VMUID != "" {
			return harvester.Observation{}, fmt.Errorf("a new machine was given VM UID %q", s.VMUID)
		}
		return running, nil
	}
	if _, err := f.reconcile(machineRequest()); err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.Placement{ClusterID: testCluster.ID, Server: testCluster.Server, Namespace: "vms", Name: "cluster-cp-0"}
	if storedWhenCreating == nil || *storedWhenCreating != want || !finalizerWhenCreating {
		t.Fatalf("placement stored when Ensure ran = %+v (finalizer %v), want %+v with the finalizer", storedWhenCreating, finalizerWhenCreating, want)
	}
	got := f.get(machineRequest())
	if legacy := got.Status.Placement; got.Status.ProviderID != running.ProviderID || legacy != nil { //nolint:staticcheck // SA1019: the deprecated field must stay empty
		t.Fatalf("after the create: providerID %q, status.placement %+v; want %s and none", got.Status.ProviderID, legacy, running.ProviderID)
	}
}

// A ProviderConfig pointed at another namespace: the running machine is observed where it lives,
// stays Running, and Degraded says why; nothing is created in the new namespace.
func TestRunningMachineStaysWhereItLives(t *testing.T) {
	for name, pc := range map[string]*v1alpha1.ProviderConfig{
		"namespace changed": pcInNamespace("vms-new"),
		"provider changed":  harvesterPC(v1alpha1.ProviderTypeNutanix),
	} {
		t.Run(name, func(t *testing.T) {
			mr := placed(withFinalizer(machineRequest()))
			mr.Status.Phase = v1alpha1.MachinePhaseRunning
			f := newFixture(t, mr, pc)
			var observed harvester.MachineRef
			f.machines.observe = func(ref harvester.MachineRef) (harvester.Observation, error) {
				observed = ref
				return running, nil
			}
			if _, err := f.reconcile(mr); err != nil {
				t.Fatal(err)
			}
			if observed.Namespace != "vms" || observed.Name != "cluster-cp-0" || observed.VMUID != "vm-uid" {
				t.Fatalf("observed %+v, want the recorded place vms/cluster-cp-0 with VM uid-vm", observed)
			}
			if !slices.Contains(f.factory.namespaces, "vms") {
				t.Fatalf("clients asked for namespaces %v, none for where the machine lives", f.factory.namespaces)
			}
			got := f.get(mr)
			if p, _ := got.RecordedPlacement(); got.Status.Phase != v1alpha1.MachinePhaseRunning || p == nil || p.Namespace != "vms" {
				t.Fatalf("status = %+v", got.Status)
			}
			requireCondition(t, got, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonVMRunning)
			c := requireCondition(t, got, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonProviderConfigMoved)
			requireMentions(t, c.Message, "butler-system/pc", "vms/cluster-cp-0", "delete and recreate")
		})
	}
}

// Credentials that now reach another cluster: the machine is neither observed there (no false
// VMDeleted) nor deleted there (no early finalizer release).
func TestCredentialsOfAnotherClusterTouchNothing(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.Phase = v1alpha1.MachinePhaseRunning
	f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
	f.machines.identity = harvester.ClusterIdentity{ID: "cluster-b", Server: "https://harvester-b.example:6443"}
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	got := f.get(mr)
	if got.Status.Phase != v1alpha1.MachinePhaseRunning {
		t.Fatalf("phase %s, want Running", got.Status.Phase)
	}
	c := requireCondition(t, got, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonProviderConfigMoved)
	requireMentions(t, c.Message, "cluster-a", "cluster-b", v1alpha1.AnnotationSkipHarvesterCleanup)

	if err := f.client.Delete(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	got = f.get(mr)
	if !hasFinalizer(got) {
		t.Fatal("finalizer released although the VM on cluster-a was never deleted")
	}
	requireCondition(t, got, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonDeletionBlocked)
	for _, call := range f.machines.calls {
		if call == "Observe" || call == "Delete" || call == "Ensure" {
			t.Fatalf("Harvester cluster-b was asked to %s", call)
		}
	}
}

// Deletion after the ProviderConfig moved deletes where the machine lives.
func TestDeletionWhereTheMachineLives(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.Phase = v1alpha1.MachinePhaseRunning
	f := newFixture(t, mr, pcInNamespace("vms-new"))
	if err := f.client.Delete(context.Background(), mr); err != nil {
		t.Fatal(err)
	}
	var deleted harvester.MachineRef
	f.machines.delete = func(ref harvester.MachineRef) (harvester.Deletion, error) {
		deleted = ref
		return harvester.Deletion{Done: true}, nil
	}
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	if deleted.Namespace != "vms" || deleted.Name != "cluster-cp-0" {
		t.Fatalf("deleted %+v, want vms/cluster-cp-0", deleted)
	}
	if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(mr), &v1alpha1.MachineRequest{}); !apierrors.IsNotFound(err) {
		t.Fatalf("MachineRequest not released: %v", err)
	}
}

// A machine whose VM was never recorded, retried after its ProviderConfig moved: what an earlier
// attempt left at the old place is removed, and the machine is created where the ProviderConfig
// points now.
func TestMachineWithoutVMStartsAfreshWhereTheProviderConfigPoints(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.ProviderID = ""
	mr.Status.Phase = v1alpha1.MachinePhasePending
	f := newFixture(t, mr, pcInNamespace("vms-new"))
	f.machines.observe = func(harvester.MachineRef) (harvester.Observation, error) { return harvester.Observation{}, nil }
	var deleted, created string
	f.machines.delete = func(ref harvester.MachineRef) (harvester.Deletion, error) {
		deleted = ref.Namespace
		return harvester.Deletion{Done: true}, nil
	}
	f.machines.ensure = func(s *harvester.MachineSpec) (harvester.Observation, error) {
		created = s.Namespace
		obs := running
		obs.VMUID, obs.ProviderID, obs.VMCreated = "new-uid", "harvester://new-uid", true
		return obs, nil
	}
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	if deleted != "vms" || created != "vms-new" {
		t.Fatalf("cleaned up %q and created in %q, want vms and vms-new", deleted, created)
	}
	got := f.get(mr)
	if p, _ := got.RecordedPlacement(); p == nil || p.Namespace != "vms-new" || got.Status.ProviderID != "harvester://new-uid" {
		t.Fatalf("placement %+v, providerID %q", p, got.Status.ProviderID)
	}
}

// Nothing was created (no place recorded, and the status shows it never got past the checks):
// deletion needs neither the ProviderConfig nor Harvester. A machine without a record that went
// further (served by the published provider, or by a version that recorded nothing before it
// created) may have left something where its ProviderConfig points: its deletion waits until it
// can look there, and says how to get out of it.
func TestDeletionOfAnUnrecordedMachine(t *testing.T) {
	for name, tc := range map[string]struct {
		phase    v1alpha1.MachinePhase
		reason   string
		released bool
	}{
		"pending":                   {phase: v1alpha1.MachinePhasePending, released: true},
		"failed on configuration":   {phase: v1alpha1.MachinePhaseFailed, reason: v1alpha1.ReasonProviderConfigNotFound, released: true},
		"creating, earlier version": {phase: v1alpha1.MachinePhaseCreating},
		"failed on its VM":          {phase: v1alpha1.MachinePhaseFailed, reason: v1alpha1.ReasonProvisioningTimeout},
	} {
		t.Run(name, func(t *testing.T) {
			mr := withFinalizer(machineRequest())
			mr.Status.Phase, mr.Status.FailureReason = tc.phase, tc.reason
			f := newFixture(t, mr) // no ProviderConfig
			if err := f.client.Delete(context.Background(), mr); err != nil {
				t.Fatal(err)
			}
			if _, err := f.reconcile(mr); err != nil {
				t.Fatal(err)
			}
			err := f.client.Get(context.Background(), client.ObjectKeyFromObject(mr), &v1alpha1.MachineRequest{})
			if released := apierrors.IsNotFound(err); released != tc.released {
				t.Fatalf("released %v (%v), want %v", released, err, tc.released)
			}
			if f.factory.calls != 0 {
				t.Fatalf("Harvester contacted %d times", f.factory.calls)
			}
			if !tc.released {
				c := requireCondition(t, f.get(mr), v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonDeletionBlocked)
				requireMentions(t, c.Message, "butler-system/pc", v1alpha1.AnnotationSkipHarvesterCleanup)
			}
		})
	}
}

// A MachineRequest with our finalizer whose ProviderConfig now names another provider is never
// stranded: with nothing created it is handed over; with a VM, deleting it honours skip-cleanup.
func TestFinalizerNeverStrandedByAnotherProvider(t *testing.T) {
	t.Run("nothing created", func(t *testing.T) {
		mr := withFinalizer(machineRequest())
		mr.Status.Phase = v1alpha1.MachinePhasePending
		f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeNutanix))
		if _, err := f.reconcile(mr); err != nil {
			t.Fatal(err)
		}
		if got := f.get(mr); hasFinalizer(got) {
			t.Fatal("finalizer kept on a MachineRequest another provider serves")
		}
		requireEvent(t, f.events(), "Normal Released")
	})
	t.Run("skip-cleanup", func(t *testing.T) {
		mr := placed(withFinalizer(machineRequest()))
		mr.Annotations = map[string]string{v1alpha1.AnnotationSkipHarvesterCleanup: "true"}
		pc := harvesterPC(v1alpha1.ProviderTypeNutanix)
		pc.Spec.Harvester = nil
		f := newFixture(t, mr, pc)
		if err := f.client.Delete(context.Background(), mr); err != nil {
			t.Fatal(err)
		}
		if _, err := f.reconcile(mr); err != nil {
			t.Fatal(err)
		}
		if err := f.client.Get(context.Background(), client.ObjectKeyFromObject(mr), &v1alpha1.MachineRequest{}); !apierrors.IsNotFound(err) {
			t.Fatalf("skip-cleanup did not release the MachineRequest: %v", err)
		}
		requireEvent(t, f.events(), "Warning CleanupSkipped")
	})
}

// Adding and removing our finalizer keeps finalizers another controller added between our read
// and our write (a merge patch replaces the whole list).
func TestFinalizerWritesKeepOtherFinalizers(t *testing.T) {
	const other = "example.com/other"
	var c client.Client
	sneak := true
	c = fake.NewClientBuilder().WithScheme(newScheme(t)).
		WithObjects(machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester)).
		WithStatusSubresource(&v1alpha1.MachineRequest{}).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*v1alpha1.MachineRequest); ok && sneak {
				sneak = false // another controller adds its finalizer after our read
				mr := &v1alpha1.MachineRequest{}
				if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), mr); err != nil {
					return err
				}
				mr.Finalizers = append(mr.Finalizers, other)
				if err := cl.Update(ctx, mr); err != nil {
					return err
				}
			}
			if err := cl.Patch(ctx, obj, patch, opts...); err != nil && patch.Type() == types.JSONPatchType && strings.Contains(err.Error(), "test failed") {
				// What the API server answers when a JSON patch's test fails (its patch
				// handler): 422 without causes. The fake client returns the patch library's error.
				return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{Resource: "machinerequests"}, obj.GetName(), err.Error(), 0, false)
			} else if err != nil {
				return err
			}
			return nil
		}}).Build()
	f := newFixture(t)
	f.client, f.r.Client = c, c
	f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
		return harvester.Observation{VMExists: true, VMUID: "vm-uid", ProviderID: "harvester://vm-uid"}, nil
	}
	f.machines.delete = func(harvester.MachineRef) (harvester.Deletion, error) { return harvester.Deletion{Done: true}, nil }

	for range 2 { // the first write conflicts and is retried
		if _, err := f.reconcile(machineRequest()); err != nil {
			t.Fatal(err)
		}
	}
	got := f.get(machineRequest())
	if !slices.Contains(got.Finalizers, other) || !hasFinalizer(got) {
		t.Fatalf("finalizers %v, want both %s and ours", got.Finalizers, other)
	}

	sneak = true
	if err := c.Delete(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := f.reconcile(got); err != nil {
			t.Fatal(err)
		}
	}
	got = f.get(got)
	if hasFinalizer(got) || !slices.Contains(got.Finalizers, other) || len(got.Finalizers) != 2 {
		t.Fatalf("finalizers %v, want ours removed and the two others kept", got.Finalizers)
	}
}

// A status write is never skipped because the cache lags behind the last write: after a transient
// error clears, Degraded goes back to False in the next reconcile even though the cached copy
// still shows it False from before the error.
func TestStatusWrittenWhenTheCacheLags(t *testing.T) {
	var frozen *v1alpha1.MachineRequest // what a lagging cache returns
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).
		WithObjects(machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester)).
		WithStatusSubresource(&v1alpha1.MachineRequest{}).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if mr, ok := obj.(*v1alpha1.MachineRequest); ok && frozen != nil {
				frozen.DeepCopyInto(mr)
				return nil
			}
			return cl.Get(ctx, key, obj, opts...)
		}}).Build()
	f := newFixture(t)
	f.client, f.r.Client = c, c
	harvesterDown := false
	f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
		if harvesterDown {
			return harvester.Observation{}, errors.New("get VirtualMachine vms/cluster-cp-0 on Harvester: 503 Service Unavailable")
		}
		return harvester.Observation{VMExists: true, VMUID: "vm-uid", ProviderID: "harvester://vm-uid", PrintableStatus: "Starting"}, nil
	}
	stored := func() *v1alpha1.MachineRequest {
		mr := &v1alpha1.MachineRequest{}
		if err := f.r.Client.(client.WithWatch).Get(context.Background(), client.ObjectKeyFromObject(machineRequest()), mr); err != nil {
			t.Fatal(err)
		}
		return mr
	}

	if _, err := f.reconcile(machineRequest()); err != nil {
		t.Fatal(err)
	}
	frozen = stored() // the cache stops here: Creating, Degraded=False
	requireCondition(t, frozen, v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)

	harvesterDown = true
	if _, err := f.reconcile(machineRequest()); err == nil {
		t.Fatal("want the transient error back")
	}
	frozen2 := frozen
	frozen = nil
	requireCondition(t, stored(), v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonHarvesterUnavailable)
	frozen = frozen2

	harvesterDown = false
	if _, err := f.reconcile(machineRequest()); err != nil {
		t.Fatal(err)
	}
	frozen = nil
	requireCondition(t, stored(), v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected)
}

// A 409 from Harvester (KubeVirt and Harvester rewrite VMs all the time) is retried soon, without
// an error and without Degraded.
func TestConflictIsRetriedQuietly(t *testing.T) {
	f := newFixture(t, machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester))
	f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
		conflict := apierrors.NewConflict(schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachines"}, "cluster-cp-0", errors.New("the object has been modified"))
		return harvester.Observation{}, fmt.Errorf("annotate VirtualMachine vms/cluster-cp-0 on Harvester: %w", conflict)
	}
	res, err := f.reconcile(machineRequest())
	if err != nil || res.RequeueAfter != objstatus.ConflictRetry {
		t.Fatalf("Reconcile = %+v, %v; want RequeueAfter %s and no error", res, err, objstatus.ConflictRetry)
	}
	if c := condition(f.get(machineRequest()), v1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		t.Fatalf("Degraded = %+v after a conflict", c)
	}
}

func requireMentions(t *testing.T, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Fatalf("%q does not mention %q", s, w)
		}
	}
}

// backdate moves the machine's conditions' transitions back by d, as if it had been waiting that long.
func backdate(f *fixture, mr *v1alpha1.MachineRequest, d time.Duration) {
	f.t.Helper()
	got := f.get(mr)
	for i := range got.Status.Conditions {
		got.Status.Conditions[i].LastTransitionTime = metav1.NewTime(got.Status.Conditions[i].LastTransitionTime.Add(-d))
	}
	if err := f.client.Status().Update(context.Background(), got); err != nil {
		f.t.Fatal(err)
	}
	f.r.statuses.Forget(got) // the status was written behind the reconciler's back
}

// A machine with no VM waiting on its configuration becomes Failed with that reason after the grace
// period (not before), and is retried by itself once the configuration works.
func TestConfigurationWaitFailsAfterGraceAndRetriesWhenFixed(t *testing.T) {
	f := newFixture(t, machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester))
	f.factory.err = harvester.Waiting(v1alpha1.ReasonCredentialsUnavailable, 30*time.Second, "credentials Secret butler-system/harvester-kubeconfig does not exist")
	res, err := f.reconcile(machineRequest())
	if err != nil || res.RequeueAfter <= 0 || res.RequeueAfter > f.r.ConfigGracePeriod+objstatus.TimerSlack {
		t.Fatalf("Reconcile = %+v, %v; want a requeue when the grace period ends", res, err)
	}
	if p := f.get(machineRequest()).Status.Phase; p != v1alpha1.MachinePhasePending {
		t.Fatalf("phase %s within the grace period", p)
	}
	backdate(f, machineRequest(), f.r.ConfigGracePeriod)
	if _, err := f.reconcile(machineRequest()); err != nil {
		t.Fatal(err)
	}
	got := f.get(machineRequest())
	if got.Status.Phase != v1alpha1.MachinePhaseFailed || got.Status.FailureReason != v1alpha1.ReasonCredentialsUnavailable {
		t.Fatalf("status %s %s after the grace period", got.Status.Phase, got.Status.FailureReason)
	}
	requireEvent(t, f.events(), "Warning CredentialsUnavailable")

	// Still broken: stays Failed. Fixed: retried, and created.
	if _, err := f.reconcile(got); err != nil || f.get(got).Status.Phase != v1alpha1.MachinePhaseFailed {
		t.Fatalf("a Failed machine was retried while its credentials still fail (err %v)", err)
	}
	f.factory.err = nil
	f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
		return harvester.Observation{VMExists: true, VMCreated: true, VMUID: "vm-uid", ProviderID: "harvester://vm-uid"}, nil
	}
	if _, err := f.reconcile(got); err != nil {
		t.Fatal(err)
	}
	if s := f.get(got).Status; s.Phase != v1alpha1.MachinePhaseCreating || s.FailureReason != "" {
		t.Fatalf("after the fix: %s %s", s.Phase, s.FailureReason)
	}
	requireEvent(t, f.events(), "Normal Retrying")
}

// A machine that already has a VM never fails on configuration: it keeps waiting.
func TestConfigurationWaitNeverFailsAMachineWithAVM(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.Phase = v1alpha1.MachinePhaseRunning
	f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
	f.factory.err = harvester.Waiting(v1alpha1.ReasonCredentialsUnavailable, 30*time.Second, "credentials Secret gone")
	for range 2 {
		if _, err := f.reconcile(mr); err != nil {
			t.Fatal(err)
		}
		backdate(f, mr, time.Hour)
	}
	if got := f.get(mr); got.Status.Phase != v1alpha1.MachinePhaseRunning {
		t.Fatalf("phase %s (%s)", got.Status.Phase, got.Status.FailureReason)
	}
}

// A machine not Running within the provisioning timeout is Failed with the diagnosis; with a
// timeout of 0 it waits for ever.
func TestProvisioningTimeout(t *testing.T) {
	starting := harvester.Observation{VMExists: true, VMUID: "vm-uid", ProviderID: "harvester://vm-uid", PrintableStatus: "Starting",
		Diagnosis: &harvester.Diagnosis{Reason: v1alpha1.ReasonVMUnschedulable, Message: "0/3 nodes are available: 3 Insufficient memory"}}
	for name, timeout := range map[string]time.Duration{"15m": 15 * time.Minute, "none": 0} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester))
			f.r.ProvisioningTimeout = timeout
			f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) { return starting, nil }
			if _, err := f.reconcile(machineRequest()); err != nil {
				t.Fatal(err)
			}
			backdate(f, machineRequest(), 16*time.Minute)
			if _, err := f.reconcile(machineRequest()); err != nil {
				t.Fatal(err)
			}
			got := f.get(machineRequest())
			if timeout == 0 {
				if got.Status.Phase != v1alpha1.MachinePhaseCreating {
					t.Fatalf("phase %s with no timeout", got.Status.Phase)
				}
				return
			}
			if got.Status.Phase != v1alpha1.MachinePhaseFailed || got.Status.FailureReason != v1alpha1.ReasonProvisioningTimeout ||
				!strings.Contains(got.Status.FailureMessage, "Insufficient memory") {
				t.Fatalf("status %s %s %q", got.Status.Phase, got.Status.FailureReason, got.Status.FailureMessage)
			}
		})
	}
}

// The place must persist before anything is created: an API server that does not keep the
// annotation (a webhook or policy strips it) or answers NotFound (the MachineRequest is gone)
// leaves Harvester untouched.
func TestNothingCreatedUnlessThePlacePersists(t *testing.T) {
	for name, tc := range map[string]struct {
		patch  func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error
		reason string
	}{
		"annotation stripped": {
			patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if err := cl.Patch(ctx, obj, patch, opts...); err != nil {
					return err
				}
				annotations := obj.GetAnnotations()
				delete(annotations, v1alpha1.AnnotationPlacement) // what a mutating webhook would do
				obj.SetAnnotations(annotations)
				return cl.Update(ctx, obj)
			},
			reason: v1alpha1.ReasonPlacementNotRecorded,
		},
		"gone": {
			patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if _, ok := obj.(*v1alpha1.MachineRequest); ok {
					return apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "machinerequests"}, obj.GetName())
				}
				return cl.Patch(ctx, obj, patch, opts...)
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(newScheme(t)).
				WithObjects(machineRequest(), harvesterPC(v1alpha1.ProviderTypeHarvester)).
				WithStatusSubresource(&v1alpha1.MachineRequest{}).
				WithInterceptorFuncs(interceptor.Funcs{Patch: tc.patch}).Build()
			f := newFixture(t)
			f.client, f.r.Client = c, c
			f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
				return harvester.Observation{}, errors.New("created although the place was not recorded")
			}
			if _, err := f.reconcile(machineRequest()); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(f.machines.calls, "Ensure") {
				t.Fatal("Harvester was asked to create")
			}
			if tc.reason != "" {
				c := requireCondition(t, f.get(machineRequest()), v1alpha1.ConditionProgressing, metav1.ConditionTrue, tc.reason)
				requireMentions(t, c.Message, v1alpha1.AnnotationPlacement, "webhooks")
			}
		})
	}
}

// A place recorded by an earlier version in status.placement (which Butler's schema prunes) is
// moved to the annotation, and the status field cleared.
func TestLegacyStatusPlacementMovedToTheAnnotation(t *testing.T) {
	mr := withFinalizer(machineRequest())
	mr.Status.Phase = v1alpha1.MachinePhaseRunning
	mr.Status.Placement = &v1alpha1.Placement{ClusterID: testCluster.ID, Server: testCluster.Server, Namespace: "vms-old", Name: "cluster-cp-0", VMUID: "vm-uid"} //nolint:staticcheck // SA1019: as an earlier version recorded it
	f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
	var observed harvester.MachineRef
	f.machines.observe = func(ref harvester.MachineRef) (harvester.Observation, error) {
		observed = ref
		return running, nil
	}
	if _, err := f.reconcile(mr); err != nil {
		t.Fatal(err)
	}
	if observed.Namespace != "vms-old" || observed.VMUID != "vm-uid" {
		t.Fatalf("observed %+v, want the VM status.placement recorded", observed)
	}
	got := f.get(mr)
	p, err := got.RecordedPlacement()
	want := v1alpha1.Placement{ClusterID: testCluster.ID, Server: testCluster.Server, Namespace: "vms-old", Name: "cluster-cp-0"}
	legacy := got.Status.Placement //nolint:staticcheck // SA1019: the deprecated field must be cleared
	if err != nil || p == nil || *p != want || got.Annotations[v1alpha1.AnnotationPlacement] == "" || legacy != nil {
		t.Fatalf("annotation %q, status.placement %+v; want %+v moved to the annotation", got.Annotations[v1alpha1.AnnotationPlacement], legacy, want)
	}
	if got.Status.ProviderID != "harvester://vm-uid" {
		t.Fatalf("providerID %q", got.Status.ProviderID)
	}
}

// A machine whose VM exists is never judged by the creation-only gates: its ProviderConfig turning
// not-Ready while the VM boots does not fail it, however long that lasts.
func TestCreationGatesNeverJudgeAMachineWithAVM(t *testing.T) {
	mr := placed(withFinalizer(machineRequest()))
	mr.Status.Phase = v1alpha1.MachinePhaseCreating
	pc := harvesterPC(v1alpha1.ProviderTypeHarvester)
	pc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionNetworkReady, Status: metav1.ConditionFalse, Reason: "NetworkNotFound",
		Message: "network gone", ObservedGeneration: pc.Generation, LastTransitionTime: metav1.Now()}}
	f := newFixture(t, mr, pc)
	starting := harvester.Observation{VMExists: true, VMUID: "vm-uid", ProviderID: "harvester://vm-uid", PrintableStatus: "Starting", VMCreatedAt: time.Now()}
	f.machines.ensure = func(s *harvester.MachineSpec) (harvester.Observation, error) {
		if s.VMUID != "vm-uid" {
			return harvester.Observation{}, fmt.Errorf("the recorded VM was not given: %q", s.VMUID)
		}
		return starting, nil
	}
	for range 2 {
		if _, err := f.reconcile(mr); err != nil {
			t.Fatal(err)
		}
		backdate(f, mr, f.r.ConfigGracePeriod+time.Minute)
	}
	got := f.get(mr)
	if got.Status.Phase != v1alpha1.MachinePhaseCreating || got.Status.FailureReason != "" {
		t.Fatalf("phase %s (%s): a machine with a VM was judged by the ProviderConfig's checks", got.Status.Phase, got.Status.FailureReason)
	}
	requireCondition(t, got, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonVMCreating)
}

// Credentials that now reach another cluster: a machine that never got a VM starts afresh there
// (with a Warning naming where an interrupted attempt may have left something); one with a VM
// waits for the credentials of its own cluster.
func TestClusterMove(t *testing.T) {
	t.Run("no VM", func(t *testing.T) {
		mr := placed(withFinalizer(machineRequest()))
		mr.Status.ProviderID = ""
		mr.Status.Phase = v1alpha1.MachinePhaseCreating
		f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
		clusterB := harvester.ClusterIdentity{ID: "cluster-b", Server: "https://harvester-b.example:6443"}
		f.machines.identity = clusterB
		f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
			return harvester.Observation{VMExists: true, VMCreated: true, VMUID: "b-uid", ProviderID: "harvester://b-uid", PrintableStatus: "Starting"}, nil
		}
		if _, err := f.reconcile(mr); err != nil {
			t.Fatal(err)
		}
		got := f.get(mr)
		if p, _ := got.RecordedPlacement(); p == nil || p.ClusterID != clusterB.ID || got.Status.ProviderID != "harvester://b-uid" {
			t.Fatalf("placement %+v, providerID %q; want the machine created on cluster-b", p, got.Status.ProviderID)
		}
		requireEvent(t, f.events(), "Warning "+v1alpha1.ReasonProviderConfigMoved)
	})
	t.Run("no VM, held up before its new place is recorded", func(t *testing.T) {
		mr := placed(withFinalizer(machineRequest()))
		mr.Status.ProviderID = ""
		mr.Status.Phase = v1alpha1.MachinePhaseCreating
		pc := harvesterPC(v1alpha1.ProviderTypeHarvester)
		pc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionNetworkReady, Status: metav1.ConditionFalse, Reason: "NetworkNotFound",
			Message: "network gone", ObservedGeneration: pc.Generation, LastTransitionTime: metav1.Now()}}
		f := newFixture(t, mr, pc)
		f.machines.identity = harvester.ClusterIdentity{ID: "cluster-b", Server: "https://harvester-b.example:6443"}
		var moved int
		for range 3 {
			if _, err := f.reconcile(mr); err != nil {
				t.Fatal(err)
			}
			for _, e := range f.events() {
				if strings.HasPrefix(e, "Warning "+v1alpha1.ReasonProviderConfigMoved) {
					moved++
				}
			}
		}
		got := f.get(mr)
		if p, err := got.RecordedPlacement(); p != nil || err != nil || moved != 1 || slices.Contains(f.machines.calls, "Ensure") {
			t.Fatalf("placement %+v (%v), %d ProviderConfigMoved events, calls %v; want the old place forgotten once, nothing created", p, err, moved, f.machines.calls)
		}
		requireCondition(t, got, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonProviderConfigNotReady)
	})
	t.Run("with a VM", func(t *testing.T) {
		mr := placed(withFinalizer(machineRequest()))
		mr.Status.Phase = v1alpha1.MachinePhaseCreating
		f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
		f.machines.identity = harvester.ClusterIdentity{ID: "cluster-b", Server: "https://harvester-b.example:6443"}
		if _, err := f.reconcile(mr); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(f.machines.calls, "Ensure") {
			t.Fatal("a machine with a VM on cluster-a was created on cluster-b")
		}
		got := f.get(mr)
		c := requireCondition(t, got, v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonProviderConfigMoved)
		requireMentions(t, c.Message, "cluster-a", "cluster-b")
		if p, _ := got.RecordedPlacement(); p == nil || p.ClusterID != testCluster.ID {
			t.Fatalf("placement %+v changed", p)
		}
	})
}

// A retry keeps the VM the machine has (it stays judged as a machine with a VM, never failed on its
// configuration), except after VMDeleted, when the retry is to create a new one.
func TestRetryKeepsTheRecordedVMUnlessItWasDeleted(t *testing.T) {
	for reason, keep := range map[string]bool{v1alpha1.ReasonProvisioningTimeout: true, v1alpha1.ReasonVMDeleted: false} {
		t.Run(reason, func(t *testing.T) {
			mr := placed(withFinalizer(machineRequest()))
			mr.Annotations[v1alpha1.AnnotationRetry] = "true"
			mr.Status.Phase, mr.Status.FailureReason = v1alpha1.MachinePhaseFailed, reason
			f := newFixture(t, mr, harvesterPC(v1alpha1.ProviderTypeHarvester))
			f.factory.err = harvester.Waiting(v1alpha1.ReasonCredentialsUnavailable, 30*time.Second, "credentials Secret gone")
			if _, err := f.reconcile(mr); err != nil {
				t.Fatal(err)
			}
			got := f.get(mr)
			if kept := got.Status.ProviderID != ""; kept != keep || got.Status.Phase != v1alpha1.MachinePhasePending {
				t.Fatalf("after a retry of %s: phase %s, providerID %q; want it kept: %v", reason, got.Status.Phase, got.Status.ProviderID, keep)
			}
		})
	}
}

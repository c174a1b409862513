package harvester

import (
	"context"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
)

// While the VM is left, a deletion says how long KubeVirt lets its guest take to shut down: the
// grace period the API server answered with (Harvester's webhook sets 120 s), or KubeVirt's
// default when there is none. Once the VM is gone, nothing left has a grace period of its own.
func TestDeletionSaysHowLongTheVMMayTakeToShutDown(t *testing.T) {
	for name, tc := range map[string]struct {
		grace *int64
		want  time.Duration
	}{
		"Harvester's default":           {grace: ptr.To[int64](120), want: 120 * time.Second},
		"set by the user":               {grace: ptr.To[int64](5), want: 5 * time.Second},
		"unset: KubeVirt's own default": {grace: nil, want: 30 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			spec := testSpec()
			spec.UserData = ""
			vm := BuildVirtualMachine(spec)
			vm.Spec.Template.Spec.TerminationGracePeriodSeconds = tc.grace
			vm.Finalizers = []string{kubevirtv1.VirtualMachineControllerFinalizer} // KubeVirt's: the VM outlives its DELETE
			c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(vm).Build()
			m := newTestCluster(c)
			ref := MachineRef{Owner: spec.Owner, Namespace: spec.Namespace, Name: spec.Name}

			d, err := m.Delete(context.Background(), ref)
			if err != nil {
				t.Fatal(err)
			}
			if d.Done || d.Remaining != "VirtualMachine vms/cluster-cp-0" || d.ShutdownGrace != tc.want {
				t.Fatalf("Delete = %+v, want the VM left with a shutdown grace of %s", d, tc.want)
			}

			// KubeVirt lets go of the VM once its VMI is gone.
			left := &kubevirtv1.VirtualMachine{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(vm), left); err != nil || left.DeletionTimestamp == nil {
				t.Fatalf("VM not marked for deletion: %v", err)
			}
			left.Finalizers = nil
			if err := c.Update(context.Background(), left); err != nil {
				t.Fatal(err)
			}
			if d, err = m.Delete(context.Background(), ref); err != nil || !d.Done || d.ShutdownGrace != 0 {
				t.Fatalf("Delete = %+v, %v once the VM is gone; want done", d, err)
			}
		})
	}
}

// A machine's observation and deletion say whether its objects are watched (the owned cache
// serves the namespace, and its events reach the Notifier), so that the front door polls only as
// a safety net; read live, they are not, and the front door polls as it must. A VM adopted from
// the published provider, whose template gives its VMI no owner annotation, is observed as not
// watched: its VMI's changes wake nothing.
func TestObservationAndDeletionSayWhetherTheMachineIsWatched(t *testing.T) {
	t.Run("adopted VM", func(t *testing.T) {
		spec := testSpec()
		spec.UserData = ""
		vm := BuildVirtualMachine(spec)
		delete(vm.Spec.Template.ObjectMeta.Annotations, AnnotationMachineRequest)
		c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(vm).Build()
		m := NewCluster(clustercache.NewCluster(c, map[string]client.Reader{ownedCache: c}, nil, "https://harvester.example:6443", spec.Namespace)).(*engine)
		obs, err := m.Observe(context.Background(), MachineRef{Owner: spec.Owner, Namespace: spec.Namespace, Name: spec.Name})
		if err != nil || !obs.VMExists || obs.Watched {
			t.Fatalf("Observe = %+v, %v; want the VM, not watched", obs, err)
		}
	})
	for name, watched := range map[string]bool{"owned cache serves": true, "read live": false} {
		t.Run(name, func(t *testing.T) {
			spec := testSpec()
			spec.UserData = ""
			vm := BuildVirtualMachine(spec)
			vm.Finalizers = []string{kubevirtv1.VirtualMachineControllerFinalizer}
			c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(vm).Build()
			var caches map[string]client.Reader
			if watched {
				caches = map[string]client.Reader{ownedCache: c}
			}
			m := NewCluster(clustercache.NewCluster(c, caches, nil, "https://harvester.example:6443", spec.Namespace)).(*engine)
			ref := MachineRef{Owner: spec.Owner, Namespace: spec.Namespace, Name: spec.Name}

			obs, err := m.Observe(context.Background(), ref)
			if err != nil || !obs.VMExists || obs.Watched != watched {
				t.Fatalf("Observe = %+v, %v; want the VM, Watched %t", obs, err, watched)
			}
			d, err := m.Delete(context.Background(), ref)
			if err != nil || d.Done || d.Watched != watched {
				t.Fatalf("Delete = %+v, %v; want the VM left, Watched %t", d, err, watched)
			}
		})
	}
}

// snapshotReader serves what a lagging cache would: the objects as they were when it was made.
type snapshotReader struct {
	client.Reader
	objects map[client.ObjectKey]*kubevirtv1.VirtualMachine
}

func (r snapshotReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if vm, ok := r.objects[key]; ok {
		vm.DeepCopyInto(obj.(*kubevirtv1.VirtualMachine))
		return nil
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// KubeVirt and Harvester write a running VM often, so the cache's copy is easily a version
// behind when the deletion comes: the VM is deleted all the same, in one step and without an
// error to retry on, as it is now (its live version); a VM that is no longer the one read (a new
// UID under the name) is not deleted on the strength of the old one.
func TestDeletionOfAVMTheCacheHasAnOlderVersionOf(t *testing.T) {
	for name, replaced := range map[string]bool{"written since": false, "replaced since": true} {
		t.Run(name, func(t *testing.T) {
			spec := testSpec()
			spec.UserData = ""
			vm := BuildVirtualMachine(spec)
			vm.UID = "vm-uid-1"
			// No disks here, and the annotation says so: nothing to patch before the delete,
			// which goes with the version as read.
			delete(vm.Annotations, AnnotationRemovedPVCs)
			vm.Finalizers = []string{kubevirtv1.VirtualMachineControllerFinalizer}
			c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(vm).Build()
			ctx := context.Background()
			cached := &kubevirtv1.VirtualMachine{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(vm), cached); err != nil {
				t.Fatal(err)
			}
			now := cached.DeepCopy()
			if replaced {
				now.Finalizers = nil
				if err := c.Update(ctx, now); err != nil {
					t.Fatal(err)
				}
				if err := c.Delete(ctx, now); err != nil {
					t.Fatal(err)
				}
				now = BuildVirtualMachine(spec)
				now.UID = "vm-uid-2"
				if err := c.Create(ctx, now); err != nil {
					t.Fatal(err)
				}
			} else {
				now.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning // KubeVirt's write
				if err := c.Update(ctx, now); err != nil {
					t.Fatal(err)
				}
			}
			stale := snapshotReader{Reader: c, objects: map[client.ObjectKey]*kubevirtv1.VirtualMachine{client.ObjectKeyFromObject(vm): cached}}
			m := NewCluster(clustercache.NewCluster(c, map[string]client.Reader{ownedCache: stale}, nil, "https://harvester.example:6443", spec.Namespace)).(*engine)
			ref := MachineRef{Owner: spec.Owner, Namespace: spec.Namespace, Name: spec.Name}

			d, err := m.Delete(ctx, ref)
			left := &kubevirtv1.VirtualMachine{}
			if gerr := c.Get(ctx, client.ObjectKeyFromObject(vm), left); gerr != nil {
				t.Fatal(gerr)
			}
			if replaced {
				if err == nil || left.DeletionTimestamp != nil {
					t.Fatalf("Delete = %+v, %v; VM %s deleting %t: want the new VM untouched and the conflict returned", d, err, left.UID, left.DeletionTimestamp != nil)
				}
				return
			}
			if err != nil || d.Done || left.DeletionTimestamp == nil {
				t.Fatalf("Delete = %+v, %v; VM deleting %t: want it deleted in one step", d, err, left.DeletionTimestamp != nil)
			}
		})
	}
}

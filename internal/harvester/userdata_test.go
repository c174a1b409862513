package harvester

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// testDoor is a front door with its user data read when needed (see countingLoader).
type testDoor struct {
	data  string
	err   error
	reads int
}

func (d *testDoor) LoadUserData(context.Context) (string, error) {
	d.reads++
	return d.data, d.err
}

// gatedDoor is a testDoor that is a CreationGate too.
type gatedDoor struct {
	*testDoor
	gate func() error
}

func (d gatedDoor) Gate(context.Context) error { return d.gate() }

// countingLoader moves spec's UserData behind its Door's LoadUserData and counts the reads.
func countingLoader(spec *MachineSpec, err error) *int {
	door := &testDoor{data: spec.UserData, err: err}
	spec.UserData, spec.Door = "", door
	return &door.reads
}

// Data read when needed (Cluster API's bootstrap data Secret) is read to make the machine's
// cloud-init Secret, or to remake it, and never for a machine whose Secret is there.
func TestUserDataReadOnlyWhenNeeded(t *testing.T) {
	made := func() (*MachineSpec, []client.Object) {
		spec := testSpec()
		vm := BuildVirtualMachine(spec)
		disk := BuildRootDiskClaim(spec, ImageInfo{Ref: spec.Image, StorageClassName: "lh-1"})
		return spec, []client.Object{vm, BuildCloudInitSecret(spec, nil), disk}
	}
	ctx := context.Background()

	t.Run("the Secret is there: no read", func(t *testing.T) {
		spec, objs := made()
		reads := countingLoader(spec, nil)
		m := claimsCluster(t, interceptor.Funcs{}, objs...)
		if err := m.ensureCloudInitSecret(ctx, spec, nil); err != nil || *reads != 0 {
			t.Fatalf("err %v, %d reads; want none", err, *reads)
		}
	})
	t.Run("the Secret was deleted: one read, remade with the data", func(t *testing.T) {
		spec, objs := made()
		want := BuildCloudInitSecret(spec, nil)
		reads := countingLoader(spec, nil)
		m := claimsCluster(t, interceptor.Funcs{}, objs[0], objs[2])
		if err := m.ensureCloudInitSecret(ctx, spec, nil); err != nil || *reads != 1 {
			t.Fatalf("err %v, %d reads; want one", err, *reads)
		}
		got := &corev1.Secret{}
		if err := m.machines.c.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
			t.Fatal(err)
		}
		if string(got.Data[userDataKey]) != spec.UserData || got.Annotations[AnnotationCloudInitHash] != want.Annotations[AnnotationCloudInitHash] {
			t.Fatalf("remade Secret holds %q (hash %s)", got.Data[userDataKey], got.Annotations[AnnotationCloudInitHash])
		}
		if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].Kind != "PersistentVolumeClaim" {
			t.Fatalf("remade Secret owned by %v, want its root disk", got.OwnerReferences)
		}
	})
	t.Run("read once: data read is not read again", func(t *testing.T) {
		spec, objs := made()
		data := spec.UserData
		reads := countingLoader(spec, nil)
		m := claimsCluster(t, interceptor.Funcs{}, objs[0], objs[2])
		if err := spec.loadUserData(ctx); err != nil || *reads != 1 || spec.UserData != data {
			t.Fatalf("err %v, %d reads, userData %q; want one read of %q", err, *reads, spec.UserData, data)
		}
		if err := m.ensureCloudInitSecret(ctx, spec, nil); err != nil || *reads != 1 {
			t.Fatalf("err %v, %d reads; want the one read before", err, *reads)
		}
	})
	t.Run("someone else's Secret of the name: read, to take it over as ours", func(t *testing.T) {
		spec, objs := made()
		foreign := objs[1].(*corev1.Secret)
		foreign.Labels = map[string]string{"owner": "someone-else"}
		reads := countingLoader(spec, nil)
		m := claimsCluster(t, interceptor.Funcs{}, objs...)
		err := m.ensureCloudInitSecret(ctx, spec, nil)
		if *reads != 1 {
			t.Fatalf("%d reads (err %v); want one, before judging the Secret", *reads, err)
		}
		if _, conflict := errkind.AsPermanent(err); !conflict {
			t.Fatalf("err = %v, want a name conflict: the Secret is not ours", err)
		}
	})
	t.Run("no machine yet: the read's error is Ensure's, before anything is made", func(t *testing.T) {
		spec := testSpec()
		notYet := errors.New("bootstrap data not written yet")
		countingLoader(spec, notYet)
		gated := false
		spec.Door = gatedDoor{testDoor: spec.Door.(*testDoor), gate: func() error { gated = true; return nil }}
		m := claimsCluster(t, interceptor.Funcs{})
		if _, err := m.Ensure(ctx, spec); !errors.Is(err, notYet) {
			t.Fatalf("err = %v, want the loader's", err)
		}
		if gated {
			t.Fatal("the gate was asked before the data was read: the bootstrap data comes first, as before")
		}
		if err := m.machines.c.Get(ctx, client.ObjectKey{Namespace: spec.Namespace, Name: spec.Name}, &kubevirtv1.VirtualMachine{}); err == nil {
			t.Fatal("a VM was made without its data")
		}
	})
	t.Run("a succession reads it to prove the machine", func(t *testing.T) {
		spec, vm, objs := movedMachine()
		reads := countingLoader(spec, nil)
		m := claimsCluster(t, interceptor.Funcs{}, objs...)
		if p, err := m.succeed(ctx, spec, vm.DeepCopy()); err != nil || p.UID != "old" || *reads != 1 {
			t.Fatalf("succeed = %+v, %v after %d reads; want the earlier owner, one read", p, err, *reads)
		}
	})
}

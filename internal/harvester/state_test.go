package harvester

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// stateClaim is the state claim KubeVirt makes for VM vm (of UID owner).
func stateClaim(name, vm string, owner types.UID) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: stateClaimMeta(name, vm)}
	pvc.OwnerReferences = []metav1.OwnerReference{{APIVersion: kubevirtv1.SchemeGroupVersion.String(), Kind: "VirtualMachine", Name: vm, UID: owner, Controller: new(true)}}
	return pvc
}

// A machine with persistent firmware state is not created while a state claim an earlier VM of
// its name left is there: KubeVirt would start the new VM on it (the old TPM's keys). The claim
// is deleted, and creation waits until it is gone; a claim of a VM that exists is that VM's.
func TestPersistentStateIsNeverInherited(t *testing.T) {
	ctx := context.Background()
	spec := testSpec()
	spec.Firmware = Firmware{UEFI: true, TPM: true, PersistentTPM: true}
	left := stateClaim("persistent-state-for-cluster-cp-0-q8x2d", spec.Name, "uid-of-a-deleted-vm")
	elsewhere := stateClaim("persistent-state-for-other-vm-a1b2c", "other-vm", "uid-other")
	c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(left, elsewhere).Build()
	m := newTestCluster(c)

	err := m.noLeftState(ctx, spec)
	if w, ok := errkind.AsWaiting(err); !ok || w.Reason != reasons.VMCreating || !strings.Contains(w.Message, left.Name) {
		t.Fatalf("noLeftState = %v, want a wait that names %s", err, left.Name)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(left), &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the left state claim: %v, want it deleted", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(elsewhere), &corev1.PersistentVolumeClaim{}); err != nil {
		t.Fatalf("another VM's state claim: %v, want it untouched", err)
	}
	if err := m.noLeftState(ctx, spec); err != nil {
		t.Fatalf("noLeftState = %v once the claim is gone", err)
	}

	// The claim of a VM that exists under the name is that VM's: never deleted.
	vm := BuildVirtualMachine(spec)
	vm.UID = "uid-live"
	live := stateClaim("persistent-state-for-cluster-cp-0-z9y8x", spec.Name, vm.UID)
	c = fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(vm, live).Build()
	if got, err := newTestCluster(c).deleteLeftStateClaims(ctx, spec.Namespace, spec.Name); err != nil || len(got) != 0 {
		t.Fatalf("deleteLeftStateClaims = %v, %v with the owner VM there; want nothing", got, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(live), &corev1.PersistentVolumeClaim{}); err != nil {
		t.Fatalf("the live VM's state claim: %v", err)
	}

	// Without persistent state nothing is listed: the check costs such machines nothing.
	plain := testSpec()
	reads := 0
	counting := fake.NewClientBuilder().WithScheme(remoteScheme).WithInterceptorFuncs(interceptorCountingLists(&reads)).Build()
	if err := newTestCluster(counting).noLeftState(ctx, plain); err != nil || reads != 0 {
		t.Fatalf("noLeftState = %v after %d lists for a machine without persistent state", err, reads)
	}
}

// Deleting a machine with persistent state waits for its VM's state claim, deletes it once the
// VM is gone, and polls for it (no watch follows it); a machine without any lists nothing.
func TestDeletionTakesTheStateClaimWithIt(t *testing.T) {
	ctx := context.Background()
	spec := testSpec()
	spec.UserData = ""
	spec.Firmware = Firmware{UEFI: true, PersistentEFI: true}
	claim := stateClaim("persistent-state-for-cluster-cp-0-q8x2d", spec.Name, "uid-of-the-deleted-vm")
	claim.Finalizers = []string{"kubernetes.io/pvc-protection"} // kept until the launcher pod is gone
	c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(claim).Build()
	// The owned cache serves the namespace (a watched machine), but holds no state claim.
	m := NewCluster(clustercache.NewCluster(c, map[string]client.Reader{ownedCache: c}, nil, "https://harvester.example:6443", spec.Namespace)).(*engine)

	d, err := m.Delete(ctx, spec.Ref())
	if err != nil || d.Done || !strings.Contains(d.Remaining, claim.Name) || d.Watched {
		t.Fatalf("Delete = %+v, %v; want the state claim remaining, polled", d, err)
	}
	left := &corev1.PersistentVolumeClaim{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), left); err != nil || left.DeletionTimestamp == nil {
		t.Fatalf("the state claim: %v, want it marked for deletion", err)
	}
	left.Finalizers = nil
	if err := c.Update(ctx, left); err != nil {
		t.Fatal(err)
	}
	if d, err = m.Delete(ctx, spec.Ref()); err != nil || !d.Done || !d.Watched {
		t.Fatalf("Delete = %+v, %v once the claim is gone; want done", d, err)
	}
}

// interceptorCountingLists counts the lists of PersistentVolumeClaims.
func interceptorCountingLists(n *int) interceptor.Funcs {
	return interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*corev1.PersistentVolumeClaimList); ok {
			*n++
		}
		return c.List(ctx, list, opts...)
	}}
}

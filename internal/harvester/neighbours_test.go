package harvester

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestGuestNeighbours(t *testing.T) {
	ctx := context.Background()
	machine := func(name string) Owner {
		return Owner{Kind: "HarvesterMachine", Namespace: "tenants", Name: name, UID: "u-" + "name"}
	}
	meta := func(name string, o *Owner) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Namespace: "vms", Name: name}
		if o != nil {
			m.Labels, m.Annotations = ownerLabels(*o, ""), ownerAnnotations(*o)
		}
		return m
	}
	mine, other, request := machine("mine-0"), machine("other-0"), Owner{Namespace: "butler", Name: "mr-0", UID: "u-mr"}
	guest := guestOwner()
	otherGuest := Owner{Kind: "HarvesterCluster", Namespace: "tenants", Name: "other"}
	ours := func(o OwnerRef) bool {
		return o == OwnerRef{Kind: "HarvesterMachine", Namespace: "tenants", Name: "mine-0"} || o == OwnerRef{Kind: "HarvesterCluster", Namespace: "tenants", Name: "tenant"}
	}
	going := meta("going", nil)
	now := metav1.Now()
	going.DeletionTimestamp, going.Finalizers = &now, []string{"kubevirt.io/virtualMachineControllerFinalize"}
	objs := []client.Object{
		&kubevirtv1.VirtualMachine{ObjectMeta: meta("mine-0", &mine)},
		&corev1.PersistentVolumeClaim{ObjectMeta: meta("mine-0-disk-0", &mine)},
		BuildGuestServiceAccount(guest, "vms"),
		&corev1.ServiceAccount{ObjectMeta: meta("default", nil)},
		&kubevirtv1.VirtualMachine{ObjectMeta: going},
		&corev1.PersistentVolumeClaim{ObjectMeta: meta("pvc-0b1c", nil)},
	}
	for name, tc := range map[string]struct {
		extra            []client.Object
		unlabelledClaims bool
		count            int
		says             []string
	}{
		"alone, the guest's own volumes aside":     {count: 0},
		"an unlabelled PVC before the first issue": {unlabelledClaims: true, count: 1, says: []string{"PersistentVolumeClaim vms/pvc-0b1c"}},
		"another cluster's VM and disk": {
			extra: []client.Object{&kubevirtv1.VirtualMachine{ObjectMeta: meta("other-0", &other)}, &corev1.PersistentVolumeClaim{ObjectMeta: meta("other-0-disk-0", &other)}},
			count: 2, says: []string{"VirtualMachine vms/other-0 of HarvesterMachine tenants/other-0", "PersistentVolumeClaim vms/other-0-disk-0 of HarvesterMachine tenants/other-0"},
		},
		"a MachineRequest's VM": {
			extra: []client.Object{&kubevirtv1.VirtualMachine{ObjectMeta: meta("mr-0", &request)}},
			count: 1, says: []string{"VirtualMachine vms/mr-0 of MachineRequest butler/mr-0"},
		},
		"the operator's own VM": {
			extra: []client.Object{&kubevirtv1.VirtualMachine{ObjectMeta: meta("router", nil)}},
			count: 1, says: []string{"VirtualMachine vms/router"},
		},
		"the state claim of one of ours, before the first issue": {
			extra:            []client.Object{&corev1.PersistentVolumeClaim{ObjectMeta: stateClaimMeta("persistent-state-for-mine-0-x7k2p", "mine-0")}},
			unlabelledClaims: true, count: 1, says: []string{"PersistentVolumeClaim vms/pvc-0b1c"},
		},
		"the state claim another VM left, before the first issue": {
			extra:            []client.Object{&corev1.PersistentVolumeClaim{ObjectMeta: stateClaimMeta("persistent-state-for-gone-0-a1b2c", "gone-0")}},
			unlabelledClaims: true, count: 2, says: []string{"PersistentVolumeClaim vms/persistent-state-for-gone-0-a1b2c"},
		},
		"another cluster's credentials": {
			extra: []client.Object{BuildGuestServiceAccount(otherGuest, "vms")},
			count: 1, says: []string{"of HarvesterCluster tenants/other"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(append(objs, tc.extra...)...).Build()
			n, err := newTestCluster(c).GuestNeighbours(ctx, "vms", ours, tc.unlabelledClaims)
			if err != nil {
				t.Fatal(err)
			}
			if n.Count != tc.count {
				t.Fatalf("%d neighbours, want %d: %s", n.Count, tc.count, n)
			}
			for _, want := range tc.says {
				if !strings.Contains(n.String(), want) {
					t.Errorf("%q does not say %q", n, want)
				}
			}
		})
	}
}

func TestNeighboursString(t *testing.T) {
	n := Neighbours{Count: 7, Examples: []string{"a", "b", "c", "d", "e"}}
	if got := n.String(); got != "7 (a, b, c, d, e and 2 more)" {
		t.Fatal(got)
	}
}

// stateClaimMeta is the metadata KubeVirt gives VM vm's state claim.
func stateClaimMeta(name, vm string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "vms", Name: name, Labels: map[string]string{StateClaimLabel: vm}}
}

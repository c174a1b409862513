package harvester

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// movedMachine is a machine made for owner "HarvesterMachine butler-system/cp-0" (UID old, created
// at made, management cluster "mgmt-a"), with its cloud-init Secret and root disk, and the spec of
// its re-creation (UID new, created an hour later on "mgmt-b", the same bootstrap data).
func movedMachine() (spec *MachineSpec, vm *kubevirtv1.VirtualMachine, objs []client.Object) {
	made := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	earlier := testSpec()
	earlier.Owner = Owner{Kind: "HarvesterMachine", Namespace: "butler-system", Name: "cp-0", UID: "old", Cluster: "mgmt-a",
		Succession: &Succession{Created: made}}
	vm = BuildVirtualMachine(earlier)
	vm.UID = "vm-uid"
	secret := BuildCloudInitSecret(earlier, nil)
	disk := BuildRootDiskClaim(earlier, ImageInfo{Ref: earlier.Image, StorageClassName: "lh-1"})
	spec = testSpec()
	spec.Owner = Owner{Kind: "HarvesterMachine", Namespace: "butler-system", Name: "cp-0", UID: "new", Cluster: "mgmt-b",
		Succession: &Succession{Created: made.Add(time.Hour), Tenant: types.NamespacedName{Namespace: "butler-system", Name: "cluster"}}}
	spec.VMUID = "vm-uid"
	// The re-creation's management cluster runs the tenant cluster: it holds its ownership Lease.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: OwnershipLeaseName(spec.Owner.Succession.Tenant)},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("mgmt-b")}}
	return spec, vm, []client.Object{vm, secret, disk, lease}
}

// The same machine re-created (clusterctl move, a restore) carries on with its VM, disks and
// cloud-init Secret; anything that is not provably that machine takes nothing and is told whose
// the VM is.
func TestSuccession(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(spec *MachineSpec, vm *kubevirtv1.VirtualMachine)
		// refused, if set, is what the NameTaken message must say; waiting what the OwnedElsewhere
		// one must; else the machine carries on.
		refused, waiting string
	}{
		"the same machine moved":           {},
		"the same machine, no VM recorded": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.VMUID = "" }},
		"other bootstrap data": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.UserData = "#cloud-config\n# forged\n" },
			refused: "bootstrap data is not the data"},
		"another namespace": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.Owner.Namespace = "evil" },
			refused: "was not created for HarvesterMachine evil/cp-0"},
		"another kind": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.Owner.Kind = "MachineRequest" },
			refused: "was not created for"},
		"another VM recorded": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.VMUID = "other-vm" },
			refused: "is not the VM this HarvesterMachine records"},
		"older than the owner recorded": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) {
			s.Owner.Succession.Created = s.Owner.Succession.Created.Add(-2 * time.Hour)
		}, refused: "the VM stays with the newer"},
		"no succession asked": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.Owner.Succession = nil },
			refused: "was not created for"},
		"no bootstrap data": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.UserData = "" },
			refused: "no bootstrap data to prove"},
		"no tenant cluster named": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.Owner.Succession.Tenant.Name = "" },
			refused: "names no tenant cluster"},
		// A copy restored while the cluster it was taken from runs: the same bootstrap data, newer.
		"another management cluster runs the tenant cluster": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.Owner.Cluster = "mgmt-c" },
			waiting: "is run by management cluster mgmt-b (it holds Lease vms/butler-owner-butler-system-cluster-"},
		"nobody holds the tenant cluster yet": {mutate: func(s *MachineSpec, _ *kubevirtv1.VirtualMachine) { s.Owner.Succession.Tenant.Name = "other" },
			waiting: "which it does not yet"},
	} {
		t.Run(name, func(t *testing.T) {
			spec, vm, objs := movedMachine()
			if tc.mutate != nil {
				tc.mutate(spec, vm)
			}
			m := claimsCluster(t, interceptor.Funcs{}, objs...)
			ctx := context.Background()
			p, err := m.succeed(ctx, spec, vm.DeepCopy())
			got := &kubevirtv1.VirtualMachine{}
			if err := m.machines.c.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil {
				t.Fatal(err)
			}
			if tc.waiting != "" {
				if w, ok := errkind.AsWaiting(err); !ok || w.Reason != reasons.OwnedElsewhere || !strings.Contains(w.Message, tc.waiting) {
					t.Fatalf("err = %v, want OwnedElsewhere saying %q", err, tc.waiting)
				}
				if got.Labels[LabelMachineRequestUID] != "old" {
					t.Fatalf("refused, yet the VM is labelled %v", got.Labels)
				}
				return
			}
			if tc.refused != "" {
				if perm, ok := errkind.AsPermanent(err); !ok || perm.Reason != ReasonNameTaken || !strings.Contains(perm.Message, tc.refused) ||
					!strings.Contains(perm.Message, "made for HarvesterMachine butler-system/cp-0 (UID old) of the management cluster whose kube-system namespace has UID mgmt-a") {
					t.Fatalf("err = %v, want NameTaken saying %q and whose the VM is", err, tc.refused)
				}
				if got.Labels[LabelMachineRequestUID] != "old" {
					t.Fatalf("refused, yet the VM is labelled %v", got.Labels)
				}
				return
			}
			if err != nil || p.UID != "old" || p.Cluster != "mgmt-a" || !p.Succession {
				t.Fatalf("succeed = %+v, %v; want the earlier owner old of mgmt-a", p, err)
			}
			if err := m.machines.c.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil || got.Labels["team"] != "platform" {
				t.Fatalf("VM labels %v (%v): the user's labels must stay", got.Labels, err)
			}
			for _, obj := range []client.Object{got, &corev1.Secret{}, &corev1.PersistentVolumeClaim{}} {
				key := client.ObjectKeyFromObject(objs[0])
				switch obj.(type) {
				case *corev1.Secret:
					key = client.ObjectKeyFromObject(objs[1])
				case *corev1.PersistentVolumeClaim:
					key = client.ObjectKeyFromObject(objs[2])
				}
				if err := m.machines.c.Get(ctx, key, obj); err != nil {
					t.Fatal(err)
				}
				if l := obj.GetLabels(); l[LabelMachineRequestUID] != "new" || l[LabelManagementCluster] != "mgmt-b" {
					t.Fatalf("%T %s labels %v after succession", obj, key, l)
				}
				if a := obj.GetAnnotations()[AnnotationOwnerCreated]; a != spec.Owner.Succession.Created.Format(time.RFC3339) {
					t.Fatalf("%T %s owner-created %q", obj, key, a)
				}
			}
		})
	}
}

// Two that decided at once: the second relabel finds the owner label changed since it read the
// object (the JSON patch's test) and takes nothing.
func TestSuccessionRelabelIsLockedOnTheOwnerLabel(t *testing.T) {
	spec, vm, objs := movedMachine()
	raced := false
	m := claimsCluster(t, interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*kubevirtv1.VirtualMachine); ok && !raced && patch.Type() == types.JSONPatchType {
			raced = true // another claimant relabels the VM first
			other := &kubevirtv1.VirtualMachine{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), other); err != nil {
				return err
			}
			other.Labels[LabelMachineRequestUID] = "someone-else"
			if err := c.Update(ctx, other); err != nil {
				return err
			}
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}, objs...)
	ctx := context.Background()
	if _, err := m.succeed(ctx, spec, vm.DeepCopy()); err == nil {
		t.Fatal("succeed took a VM relabelled since it was read")
	}
	got := &kubevirtv1.VirtualMachine{}
	if err := m.machines.c.Get(ctx, client.ObjectKeyFromObject(vm), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels[LabelMachineRequestUID] != "someone-else" {
		t.Fatalf("VM labels %v: the other claimant's relabel was overwritten", got.Labels)
	}
}

// A hand-over reaches only the management clusters it is limited to (the operator's list for a
// HarvesterMachine); a MachineRequest's, limited to none, reaches any.
func TestHandOverLimitedToTheListedManagementClusters(t *testing.T) {
	for name, tc := range map[string]struct {
		o    Owner
		want bool
	}{
		"no hand-over":           {Owner{}, false},
		"unlimited":              {Owner{HandOver: true}, true},
		"listed":                 {Owner{HandOver: true, HandOverFrom: []string{"mgmt-x", "mgmt-a"}}, true},
		"another cluster listed": {Owner{HandOver: true, HandOverFrom: []string{"mgmt-x"}}, false},
	} {
		if got := tc.o.handsOverFrom("mgmt-a"); got != tc.want {
			t.Errorf("%s: handsOverFrom(mgmt-a) = %v, want %v", name, got, tc.want)
		}
	}
}

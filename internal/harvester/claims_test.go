package harvester

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

func claimsCluster(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) *engine {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(objs...).WithInterceptorFuncs(funcs).Build()
	return newTestCluster(c)
}

// A claim someone else creates under our name between our look and our create is never taken
// for ours: the create's AlreadyExists is followed by a read and an ownership check.
func TestClaimCreatedConcurrentlyBySomeoneElseIsANameConflict(t *testing.T) {
	spec := testSpec()
	want := BuildRootDiskClaim(spec, ImageInfo{Ref: spec.Image, StorageClassName: "lh-1"})
	foreign := want.DeepCopy()
	foreign.Labels = map[string]string{"owner": "someone-else"}
	looked := false
	m := claimsCluster(t, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.PersistentVolumeClaim); ok && !looked {
			looked = true // our first look, before the other writer created it
			return apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, key.Name)
		}
		return c.Get(ctx, key, obj, opts...)
	}}, foreign)
	_, err := m.ensureClaim(context.Background(), want, spec.Owner)
	if p, ok := errkind.AsPermanent(err); !ok || p.Reason != ReasonNameTaken || !strings.Contains(p.Message, "PersistentVolumeClaim vms/cluster-cp-0-disk-0") {
		t.Fatalf("err = %v, want NameConflict naming the claim", err)
	}
}

func ownClaim(spec *MachineSpec, size string, class string) *corev1.PersistentVolumeClaim {
	pvc := BuildRootDiskClaim(spec, ImageInfo{Ref: spec.Image, StorageClassName: class})
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse(size)
	return pvc
}

func TestClaimMismatch(t *testing.T) {
	spec := testSpec()
	want := ownClaim(spec, "50Gi", "lh-1")
	for name, tc := range map[string]struct {
		have *corev1.PersistentVolumeClaim
		want string
	}{
		"same":  {ownClaim(spec, "50Gi", "lh-1"), ""},
		"size":  {ownClaim(spec, "20Gi", "lh-1"), "has size 20Gi, not 50Gi"},
		"class": {ownClaim(spec, "50Gi", "lh-2"), `has storage class "lh-2", not "lh-1"`},
		"image": {func() *corev1.PersistentVolumeClaim {
			p := ownClaim(spec, "50Gi", "lh-1")
			p.Annotations[AnnotationImageID] = "default/old"
			return p
		}(), `is cloned from image "default/old"`},
		"same in Mi": {ownClaim(spec, "51200Mi", "lh-1"), ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := claimMismatch(tc.have, want)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("claimMismatch = %q, want %q", got, tc.want)
			}
		})
	}
}

// A left-over claim of ours that no longer matches is replaced, unless a VM mounts it: then the
// machine waits and the message names the VM.
func TestMismatchedLeftoverClaim(t *testing.T) {
	spec := testSpec()
	want := ownClaim(spec, "50Gi", "lh-1")
	leftover := ownClaim(spec, "20Gi", "lh-1")
	t.Run("replaced", func(t *testing.T) {
		m := claimsCluster(t, interceptor.Funcs{}, leftover)
		_, err := m.ensureClaim(context.Background(), want, spec.Owner)
		if w, ok := errkind.AsWaiting(err); !ok || w.Reason != reasons.VMCreating || !strings.Contains(w.Message, "replacing") {
			t.Fatalf("err = %v, want a wait while it is replaced", err)
		}
		if err := m.remote.c.Get(context.Background(), client.ObjectKeyFromObject(leftover), &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
			t.Fatalf("left-over claim not deleted: %v", err)
		}
	})
	t.Run("in use", func(t *testing.T) {
		user := &kubevirtv1.VirtualMachine{
			ObjectMeta: metav1.ObjectMeta{Name: "someone", Namespace: "vms"},
			Spec: kubevirtv1.VirtualMachineSpec{RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways), Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
				Spec: kubevirtv1.VirtualMachineInstanceSpec{Volumes: []kubevirtv1.Volume{claimVolume("data", leftover.Name)}},
			}},
		}
		m := claimsCluster(t, interceptor.Funcs{}, leftover, user)
		_, err := m.ensureClaim(context.Background(), want, spec.Owner)
		if w, ok := errkind.AsWaiting(err); !ok || w.Reason != reasons.DiskInUse || !strings.Contains(w.Message, "VirtualMachine vms/someone") {
			t.Fatalf("err = %v, want DiskInUse naming the VM", err)
		}
		if err := m.remote.c.Get(context.Background(), client.ObjectKeyFromObject(leftover), &corev1.PersistentVolumeClaim{}); err != nil {
			t.Fatalf("a claim in use was deleted: %v", err)
		}
	})
}

// Only our claims, and a legacy root disk, are removed with a VM; never a hot-plugged volume.
func TestClaimsRemovedWithVM(t *testing.T) {
	spec := testSpec()
	vm := BuildVirtualMachine(spec)
	ours := ownClaim(spec, "50Gi", "lh-1")
	foreign := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "operator-data", Namespace: "vms"}}
	legacy := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: vm.Name + legacyRootDiskSuffix, Namespace: "vms", Labels: map[string]string{LabelManagedBy: ManagedByValue}}}
	vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, claimVolume("hotplug", foreign.Name), claimVolume("legacy", legacy.Name))
	m := claimsCluster(t, interceptor.Funcs{}, ours, foreign, legacy)
	got, err := m.claimsRemovedWith(context.Background(), vm, spec.Owner)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != ours.Name+","+legacy.Name {
		t.Fatalf("claims removed with the VM: %v", got)
	}
}

func TestQuotaAndAdmissionErrors(t *testing.T) {
	gr := schema.GroupResource{Resource: "persistentvolumeclaims"}
	quota := apierrors.NewForbidden(gr, "x-disk-0", errorString("exceeded quota: vm-storage, requested: requests.storage=20Gi, used: requests.storage=0, limited: requests.storage=10Gi"))
	if w, ok := errkind.AsWaiting(classify(quota, "create PersistentVolumeClaim vms/x-disk-0")); !ok || w.Reason != reasons.QuotaExceeded ||
		!strings.Contains(w.Message, "ResourceQuota vm-storage") || !strings.Contains(w.Message, "limited: requests.storage=10Gi") {
		t.Fatalf("quota: %v", w)
	}
	forbidden := apierrors.NewForbidden(gr, "x-disk-0", errorString(`User "u" cannot create resource`))
	if w, ok := errkind.AsWaiting(classify(forbidden, "create x")); !ok || w.Reason != reasons.PermissionDenied {
		t.Fatalf("forbidden: %v", w)
	}
	for _, err := range []error{apierrors.NewBadRequest("admission webhook denied the request: disk too small"), apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, "x", nil)} {
		if p, ok := errkind.AsPermanent(createError(err, "PersistentVolumeClaim vms/x")); !ok || p.Reason != reasons.InvalidSpec || !strings.Contains(p.Message, "PersistentVolumeClaim vms/x") {
			t.Fatalf("%v: %v", err, p)
		}
	}
	// KubeVirt without its VMPersistentState gate: the refusal says what to turn on.
	gateOff := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid,
		Message: `admission webhook "virtualmachine-validator.kubevirt.io" denied the request: VMPersistentState feature gate is not enabled in kubevirt-config`}}
	if p, ok := errkind.AsPermanent(createError(gateOff, "VirtualMachine vms/x")); !ok || p.Reason != reasons.InvalidSpec ||
		!strings.Contains(p.Message, "spec.firmware.tpm") || !strings.Contains(p.Message, "kubectl -n harvester-system edit kubevirt kubevirt") {
		t.Fatalf("the persistent state gate off: %v", p)
	}
	// KubeVirt without its HostDevices gate: likewise.
	hostDevicesOff := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid,
		Message: `admission webhook "virtualmachine-validator.kubevirt.io" denied the request: Host Devices feature gate is not enabled in kubevirt-config`}}
	if p, ok := errkind.AsPermanent(createError(hostDevicesOff, "VirtualMachine vms/x")); !ok || p.Reason != reasons.InvalidSpec ||
		!strings.Contains(p.Message, "spec.hostDevices") || !strings.Contains(p.Message, "add HostDevices to spec.configuration.developerConfiguration.featureGates") {
		t.Fatalf("the host devices gate off: %v", p)
	}
	conflict := apierrors.NewConflict(gr, "x", errorString("modified"))
	if err := classify(conflict, "patch x"); !apierrors.IsConflict(err) {
		t.Fatalf("a classified conflict is no longer recognisable: %v", err)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// The VMs that mount a disk are read page by page, and a VM on the last page counts as much as
// one on the first.
func TestVolumeUsersReadsEveryPage(t *testing.T) {
	const vms = 2*vmListPageSize + 7
	var objs []client.Object
	for i := range vms {
		vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: fmt.Sprintf("vm-%03d", i)}}
		vm.Spec.Template = &kubevirtv1.VirtualMachineInstanceTemplateSpec{}
		claim := fmt.Sprintf("disk-%03d", i)
		if i == 0 || i == vms-1 {
			claim = "shared" // the first VM and the last mount the same disk
		}
		vm.Spec.Template.Spec.Volumes = []kubevirtv1.Volume{{Name: "disk", VolumeSource: kubevirtv1.VolumeSource{
			PersistentVolumeClaim: &kubevirtv1.PersistentVolumeClaimVolumeSource{PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}
		objs = append(objs, vm)
	}
	pages := 0
	// The fake client ignores Limit and Continue: serve pages as the API server does.
	m := claimsCluster(t, interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		page, ok := list.(*kubevirtv1.VirtualMachineList)
		if !ok {
			return c.List(ctx, list, opts...)
		}
		o := (&client.ListOptions{}).ApplyOptions(opts)
		if o.Limit != vmListPageSize {
			return fmt.Errorf("limit %d, want pages of %d", o.Limit, vmListPageSize)
		}
		all := &kubevirtv1.VirtualMachineList{}
		if err := c.List(ctx, all, client.InNamespace(o.Namespace)); err != nil {
			return err
		}
		from := 0
		if o.Continue != "" {
			from, _ = strconv.Atoi(o.Continue)
		}
		to := min(from+int(o.Limit), len(all.Items))
		page.Items = all.Items[from:to]
		if page.Continue = ""; to < len(all.Items) {
			page.Continue = strconv.Itoa(to)
		}
		pages++
		return nil
	}}, objs...)
	users, err := m.volumeUsers(context.Background(), "vms")
	if err != nil {
		t.Fatal(err)
	}
	if pages != 3 {
		t.Errorf("read %d pages of VMs, want 3", pages)
	}
	if got := users["shared"]; len(got) != 2 || !strings.Contains(got[1], fmt.Sprintf("vm-%03d", vms-1)) {
		t.Errorf("users of the shared disk = %v, want the first VM and the last", got)
	}
	if len(users) != vms-1 {
		t.Errorf("%d disks have users, want %d", len(users), vms-1)
	}
}

// newTestCluster is the engine over c, without a cache.
func newTestCluster(c client.Client) *engine {
	return NewCluster(clustercache.NewCluster(c, nil, nil, "https://harvester.example:6443", "")).(*engine)
}

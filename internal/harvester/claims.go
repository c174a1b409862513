package harvester

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
)

// ensureDisks creates the disks that do not exist yet: PVCs, and for an image of the CDI backend a
// DataVolume as root disk. A disk of ours left by an earlier attempt is reused only if it is still
// what the spec asks for; otherwise it is replaced. It returns the root disk, to own the machine's
// cloud-init Secret.
func (m *machines) ensureDisks(ctx context.Context, spec *MachineSpec, image ImageInfo) (*metav1.OwnerReference, error) {
	var root metav1.OwnerReference
	var claims []*corev1.PersistentVolumeClaim
	if image.Backend == BackendCDI {
		dv, err := m.ensureDataVolume(ctx, BuildRootDiskDataVolume(spec, image), spec.Owner)
		if err != nil {
			return nil, err
		}
		root = ownerReference(cdiv1.SchemeGroupVersion.WithKind("DataVolume"), dv)
	} else {
		claims = append(claims, BuildRootDiskClaim(spec, image))
	}
	for i := range spec.ExtraDisks {
		claims = append(claims, BuildExtraDiskClaim(spec, i))
	}
	for i, want := range claims {
		pvc, err := m.ensureClaim(ctx, want, spec.Owner)
		if err != nil {
			return nil, err
		}
		if i == 0 && image.Backend != BackendCDI {
			root = ownerReference(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), pvc)
		}
	}
	return &root, nil
}

// ensureClaim returns the claim, created if the cache has none (a claim that exists after all is
// then read live and checked).
func (m *machines) ensureClaim(ctx context.Context, want *corev1.PersistentVolumeClaim, o Owner) (*corev1.PersistentVolumeClaim, error) {
	what := describe("PersistentVolumeClaim", want.Namespace, want.Name)
	have := &corev1.PersistentVolumeClaim{}
	err := m.peek(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		err = m.c.Create(ctx, want)
		if err == nil {
			return want, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, createError(err, what)
		}
		// Someone created it since we looked: whose is it? Read it live, the cache has not seen it.
		err = m.c.Get(ctx, client.ObjectKeyFromObject(want), have)
	}
	if err == nil && !isOwnedBy(have.Labels, o) {
		// Not ours: a left-over of an earlier MachineRequest of the same name is taken over.
		if err := m.takeOverLeftover(ctx, "PersistentVolumeClaim", have, o); err != nil {
			return nil, err
		}
	}
	switch {
	case err != nil:
		return nil, classify(err, "get "+what)
	case have.DeletionTimestamp != nil:
		return nil, Waiting(reasons.VMCreating, deletionRetry,
			"%s from an earlier attempt is still being deleted; waiting until it is gone", what)
	}
	mismatch := claimMismatch(have, want)
	if mismatch == "" {
		return have, nil
	}
	return nil, m.replaceDisk(ctx, have, what+" from an earlier attempt "+mismatch)
}

// ensureDataVolume creates the root disk DataVolume of a CDI image, or checks ours. DataVolumes
// are read live: they are few, and no informer watches them.
func (m *machines) ensureDataVolume(ctx context.Context, want *cdiv1.DataVolume, o Owner) (*cdiv1.DataVolume, error) {
	what := describe("DataVolume", want.Namespace, want.Name)
	have := &cdiv1.DataVolume{}
	err := m.c.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		m.requestImmediateBinding(ctx, want)
		err = m.c.Create(ctx, want)
		if err == nil {
			return want, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, dataVolumeError(err, "create "+what)
		}
		err = m.c.Get(ctx, client.ObjectKeyFromObject(want), have)
	}
	if err == nil && !isOwnedBy(have.Labels, o) {
		// Not ours: a left-over of an earlier MachineRequest of the same name is taken over.
		if err := m.takeOverLeftover(ctx, "DataVolume", have, o); err != nil {
			return nil, err
		}
	}
	switch {
	case err != nil:
		return nil, dataVolumeError(err, "get "+what)
	case have.DeletionTimestamp != nil:
		return nil, Waiting(reasons.VMCreating, deletionRetry,
			"%s from an earlier attempt is still being deleted; waiting until it is gone", what)
	}
	mismatch := dataVolumeMismatch(have, want)
	if mismatch == "" {
		return have, nil
	}
	return nil, m.replaceDisk(ctx, have, what+" from an earlier attempt "+mismatch)
}

// requestImmediateBinding asks CDI to bind the DataVolume's PVC at once when its storage class
// waits for a first consumer, as Harvester does for its own (GenerateDVAnnotations): the VM's pod
// is not created before the clone is done, so it would never consume it.
func (m *machines) requestImmediateBinding(ctx context.Context, dv *cdiv1.DataVolume) {
	sc := &storagev1.StorageClass{}
	if dv.Spec.Storage == nil || dv.Spec.Storage.StorageClassName == nil || m.c.Get(ctx, client.ObjectKey{Name: *dv.Spec.Storage.StorageClassName}, sc) != nil {
		return
	}
	if sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
		dv.Annotations = mergeMaps(dv.Annotations, map[string]string{annotationImmediateBinding: "true"})
	}
}

// dataVolumeError is createError for DataVolumes, and a permanent error when Harvester has no
// DataVolume API: without CDI, an image of the CDI backend cannot be cloned.
func dataVolumeError(err error, action string) error {
	if meta.IsNoMatchError(err) {
		return Permanent(reasons.ImageBackendUnsupported,
			"cannot %s: Harvester serves no DataVolume API (cdi.kubevirt.io/v1beta1), which images of backend %s need; use an image of backend %s", action, BackendCDI, BackendBackingImage)
	}
	if strings.HasPrefix(action, "create ") {
		return createError(err, strings.TrimPrefix(action, "create "))
	}
	return classify(err, action)
}

// claimMismatch says how a PVC of ours differs from what the spec asks for ("" if it does not):
// a disk of another size, class or image must not become the machine's disk.
func claimMismatch(have, want *corev1.PersistentVolumeClaim) string {
	var diffs []string
	haveSize, wantSize := have.Spec.Resources.Requests[corev1.ResourceStorage], want.Spec.Resources.Requests[corev1.ResourceStorage]
	if haveSize.Cmp(wantSize) != 0 {
		diffs = append(diffs, fmt.Sprintf("has size %s, not %s", haveSize.String(), wantSize.String()))
	}
	if haveClass, wantClass := ptrValue(have.Spec.StorageClassName), ptrValue(want.Spec.StorageClassName); haveClass != wantClass {
		diffs = append(diffs, fmt.Sprintf("has storage class %q, not %q", haveClass, wantClass))
	}
	if haveImage, wantImage := have.Annotations[AnnotationImageID], want.Annotations[AnnotationImageID]; haveImage != wantImage {
		diffs = append(diffs, fmt.Sprintf("is cloned from image %q, not %q", haveImage, wantImage))
	}
	return strings.Join(diffs, ", ")
}

// dataVolumeMismatch is claimMismatch for the root disk DataVolume of a CDI image.
func dataVolumeMismatch(have, want *cdiv1.DataVolume) string {
	var diffs []string
	var haveStorage, wantStorage cdiv1.StorageSpec
	if have.Spec.Storage != nil {
		haveStorage = *have.Spec.Storage
	}
	if want.Spec.Storage != nil {
		wantStorage = *want.Spec.Storage
	}
	haveSize, wantSize := haveStorage.Resources.Requests[corev1.ResourceStorage], wantStorage.Resources.Requests[corev1.ResourceStorage]
	if haveSize.Cmp(wantSize) != 0 {
		diffs = append(diffs, fmt.Sprintf("has size %s, not %s", haveSize.String(), wantSize.String()))
	}
	if haveClass, wantClass := ptrValue(haveStorage.StorageClassName), ptrValue(wantStorage.StorageClassName); haveClass != wantClass {
		diffs = append(diffs, fmt.Sprintf("has storage class %q, not %q", haveClass, wantClass))
	}
	if haveSource, wantSource := dataVolumeSource(have), dataVolumeSource(want); haveSource != wantSource {
		diffs = append(diffs, fmt.Sprintf("is cloned from %q, not %q", haveSource, wantSource))
	}
	return strings.Join(diffs, ", ")
}

func dataVolumeSource(dv *cdiv1.DataVolume) string {
	if dv.Spec.Source == nil || dv.Spec.Source.PVC == nil {
		return ""
	}
	return dv.Spec.Source.PVC.Namespace + "/" + dv.Spec.Source.PVC.Name
}

// replaceDisk deletes a disk of ours (a PVC, or a DataVolume with its PVC) that no longer matches
// the spec, so that it is created anew, unless a VM uses it: then the machine waits and the
// message says which VM.
func (m *machines) replaceDisk(ctx context.Context, disk client.Object, why string) error {
	users, err := m.claimUsers(ctx, disk.GetNamespace(), []string{disk.GetName()})
	if err != nil {
		return err
	}
	if u := users[disk.GetName()]; len(u) > 0 {
		return Waiting(reasons.DiskInUse, deletionRetry,
			"%s and cannot be replaced: %s uses it. Detach it from there or delete it, or give the machine back the disks it was created with", why, strings.Join(u, ", "))
	}
	uid := disk.GetUID()
	if err := m.c.Delete(ctx, disk, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		if refused := inUseRefusal(err); refused != "" {
			return Waiting(reasons.DiskInUse, deletionRetry, "%s and cannot be replaced: %s", why, refused)
		}
		return classify(err, "delete "+describe(kindOf(disk), disk.GetNamespace(), disk.GetName())+" (to replace it)")
	}
	return Waiting(reasons.VMCreating, deletionRetry, "%s: replacing it", why)
}

// claimUsers maps each of the given PVCs of namespace that a VM mounts to the VMs that mount it.
// It asks the caches once they have synced, both indexed by the disks VMs mount: the owned one for
// VMs labelled ours, the volumes one for every other VM of the namespace. That view lags the API
// server by a watch event, as a live list lags it by the time between the list and the delete
// that follows it (a VM whose label changes meanwhile may be in neither for that long: Harvester
// refuses to delete a volume a VM uses, and the refusal is waited on, see inUseRefusal). Without
// both caches the VMs are listed live, in a list deletions share (see volumeUsers).
func (m *machines) claimUsers(ctx context.Context, namespace string, claims []string) (map[string][]string, error) {
	owned, others := m.cacheFor(namespace), m.cluster.CacheFor(volumesCache, namespace)
	if owned == nil || others == nil {
		return m.volumeUsers(ctx, namespace)
	}
	users := map[string][]string{}
	for _, claim := range claims {
		seen := map[string]bool{}
		for _, cached := range []client.Reader{owned, others} {
			list := &kubevirtv1.VirtualMachineList{}
			if err := cached.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{vmsByClaim: claim}); err != nil {
				return nil, classify(err, "list VirtualMachines in namespace "+namespace)
			}
			for i := range list.Items {
				// A VM whose label just changed may be in both for a moment.
				if name := list.Items[i].Name; !seen[name] {
					seen[name] = true
					users[claim] = append(users[claim], describe("VirtualMachine", namespace, name))
				}
			}
		}
	}
	return users, nil
}

// volumeUsers maps each PVC of the namespace that a VM mounts to the VMs that mount it (the map is
// shared: read it, never change it), from a live list of the namespace's VMs; deletions that ask at the same time share one list (singleflight), so that
// deleting 1000 machines does not list the namespace's 1000 VMs 1000 times. The list is read in
// pages: a whole page of VMs is held in memory while it is decoded, and 1000 VMs at once were
// most of the manager's peak memory during a mass deletion.
func (m *machines) volumeUsers(ctx context.Context, namespace string) (map[string][]string, error) {
	shared := m.volumeUsersCalls.DoChan(namespace, func() (any, error) {
		// Not the first caller's context: its cancellation must not fail the others.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedListTimeout)
		defer cancel()
		users := map[string][]string{}
		next := ""
		for {
			page := &kubevirtv1.VirtualMachineList{}
			if err := m.c.List(lctx, page, client.InNamespace(namespace), client.Limit(vmListPageSize), client.Continue(next)); err != nil {
				return nil, classify(err, "list VirtualMachines in namespace "+namespace)
			}
			for i := range page.Items {
				vm := &page.Items[i]
				for _, claim := range mountedClaims(vm) {
					users[claim] = append(users[claim], describe("VirtualMachine", vm.Namespace, vm.Name))
				}
			}
			if next = page.Continue; next == "" {
				return users, nil
			}
		}
	})
	select {
	case res := <-shared:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.(map[string][]string), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// vmListPageSize is how many VMs volumeUsers reads at a time.
const vmListPageSize = 100

// sharedListTimeout bounds a list shared by several callers.
const sharedListTimeout = 30 * time.Second

// claimsRemovedWith names the claims of vm that Harvester may remove with it: those it mounts that
// are ours, plus the root disk of an adopted VM of the published provider. Never a volume someone
// hot-plugged or mounted from elsewhere, nor one another VM mounts too: Harvester's webhook would
// refuse to delete it, and the VM would wait for ever for Harvester to finish deleting it. Such a
// disk is left for the machine's deletion to wait on (see deleteDisks).
func (m *machines) claimsRemovedWith(ctx context.Context, vm *kubevirtv1.VirtualMachine, o Owner) ([]string, error) {
	users, err := m.claimUsers(ctx, vm.Namespace, mountedClaims(vm))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range mountedClaims(vm) {
		if len(users[name]) > 1 {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := m.read(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: name}, pvc)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, classify(err, "get "+describe("PersistentVolumeClaim", vm.Namespace, name))
		case isOwnedBy(pvc.Labels, o) || isLegacyRootDisk(pvc, vm):
			names = append(names, name)
		}
	}
	return names, nil
}

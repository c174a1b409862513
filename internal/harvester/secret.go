package harvester

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ensureCloudInitSecret creates the machine's cloud-init Secret, owned by owner (its root disk)
// when given, or brings ours up to date (a machine whose data is read when needed keeps the
// Secret it was made with: see UserDataLoader). A machine without cloud-init data has
// none.
func (m *machines) ensureCloudInitSecret(ctx context.Context, spec *MachineSpec, owner *metav1.OwnerReference) error {
	if !spec.userDataDeferred() && !spec.HasCloudInit() {
		return nil
	}
	key := client.ObjectKey{Namespace: spec.Namespace, Name: cloudInitSecretName(spec.Name)}
	have := secretMeta(key.Namespace, key.Name)
	err := m.peek(ctx, key, have)
	if spec.userDataDeferred() {
		if err == nil && isOwnedBy(have.Labels, spec.Owner) {
			return nil
		}
		if err := spec.loadUserData(ctx); err != nil {
			return err
		}
	}
	if !spec.HasCloudInit() {
		return nil
	}
	want := BuildCloudInitSecret(spec, owner)
	what := describe("Secret", want.Namespace, want.Name)
	if apierrors.IsNotFound(err) {
		if owner == nil {
			// Recreated for a VM that exists (someone deleted the Secret): it goes with the
			// root disk like the original.
			if want.OwnerReferences, err = m.rootDiskOwner(ctx, spec); err != nil {
				return err
			}
		}
		err = m.c.Create(ctx, want)
		if !apierrors.IsAlreadyExists(err) {
			return createError(err, what)
		}
		// It appeared since the cache was looked at: whose is it, and what does it hold?
		err = m.c.Get(ctx, client.ObjectKeyFromObject(want), have)
	}
	switch {
	case err != nil:
		return classify(err, "get "+what)
	case !isOwnedBy(have.Labels, spec.Owner):
		if err := m.takeOverLeftover(ctx, "Secret", have, spec.Owner); err != nil {
			return err
		}
	case have.Annotations[AnnotationCloudInitHash] == want.Annotations[AnnotationCloudInitHash]:
		return nil
	}
	// Other data, or a Secret of an earlier version without the hash: set both. The data merges
	// key by key (a key the spec no longer has is sent as null): no resourceVersion needed.
	data := map[string]any{userDataKey: want.Data[userDataKey], networkDataKey: nil}
	if v, ok := want.Data[networkDataKey]; ok {
		data[networkDataKey] = v
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{AnnotationCloudInitHash: want.Annotations[AnnotationCloudInitHash]}},
		"data":     data,
	})
	if err != nil {
		return err
	}
	if err := m.c.Patch(ctx, have, client.RawPatch(types.MergePatchType, body)); err != nil {
		return classify(err, "update "+what)
	}
	return nil
}

// rootDiskOwner names the machine's root disk as the owner of its cloud-init Secret: the PVC, or
// the DataVolume of an image of the CDI backend; none if neither of ours exists (the provider
// then deletes the Secret itself with the machine).
func (m *machines) rootDiskOwner(ctx context.Context, spec *MachineSpec) ([]metav1.OwnerReference, error) {
	key := client.ObjectKey{Namespace: spec.Namespace, Name: diskClaimName(spec.Name, 0)}
	pvc := &corev1.PersistentVolumeClaim{}
	err := m.read(ctx, key, pvc)
	switch {
	case err == nil && isOwnedBy(pvc.Labels, spec.Owner):
		return []metav1.OwnerReference{ownerReference(corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), pvc)}, nil
	case err != nil && !apierrors.IsNotFound(err):
		return nil, classify(err, "get "+describe("PersistentVolumeClaim", key.Namespace, key.Name))
	}
	dv, err := m.ownedRootDataVolume(ctx, spec.Ref())
	if err != nil || dv == nil {
		return nil, err
	}
	return []metav1.OwnerReference{ownerReference(cdiv1.SchemeGroupVersion.WithKind("DataVolume"), dv)}, nil
}

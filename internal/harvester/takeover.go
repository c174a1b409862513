package harvester

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// adoptable recognises a VM created by the published provider for this MachineRequest: it carries
// the published managed-by label and none of ours, and its UID is the MachineRequest's bare
// providerID, or (without a providerID) the front door asked to adopt by name.
func adoptable(vm *kubevirtv1.VirtualMachine, o Owner) bool {
	if vm.Labels[LabelMachineRequestUID] != "" || vm.Labels[LabelManagedBy] != ManagedByValue {
		return false
	}
	if o.LegacyProviderID != "" {
		return strings.TrimPrefix(o.LegacyProviderID, ProviderIDPrefix) == string(vm.UID)
	}
	return o.AdoptByName
}

func (m *machines) adopt(ctx context.Context, vm *kubevirtv1.VirtualMachine, o Owner) (*kubevirtv1.VirtualMachine, error) {
	// Labels and annotations merge key by key: no resourceVersion, so that KubeVirt's and
	// Harvester's constant writes to the VM cannot make this patch fail.
	patch := client.MergeFrom(vm.DeepCopy())
	vm.Labels = mergeMaps(vm.Labels, ownerLabels(o, vm.Labels[LabelRole]))
	vm.Annotations = mergeMaps(vm.Annotations, ownerAnnotations(o))
	if err := m.c.Patch(ctx, vm, patch); err != nil {
		return nil, classify(err, "label "+describe("VirtualMachine", vm.Namespace, vm.Name)+" as ours")
	}
	return vm, nil
}

// takeOverSuperseded takes over the VM under the machine's name if this provider created it for an
// earlier MachineRequest of the same namespace and name, with its disks and cloud-init Secret.
// That MachineRequest no longer exists: a namespace holds one object of a name, and this one has
// another UID. This is how a Butler bootstrap run again after a failed one (its management cluster
// deleted, the MachineRequests with it) finds the VMs of the first run, as the published provider
// did. A VM of anyone else stays a NameConflict.
func (m *machines) takeOverSuperseded(ctx context.Context, spec *MachineSpec) (*kubevirtv1.VirtualMachine, types.UID, error) {
	vm := &kubevirtv1.VirtualMachine{}
	if err := m.read(ctx, client.ObjectKey{Namespace: spec.Namespace, Name: spec.Name}, vm); err != nil {
		return nil, "", classify(err, "get "+describe("VirtualMachine", spec.Namespace, spec.Name))
	}
	old := types.UID(vm.Labels[LabelMachineRequestUID])
	if err := supersedable("VirtualMachine", vm, spec.Owner); err != nil {
		return nil, "", err
	}
	if err := m.relabelMachine(ctx, spec, vm, old); err != nil {
		return nil, "", err
	}
	return vm, old, nil
}

// relabelMachine gives the machine's objects labelled for the earlier owner old (its disks, the
// root DataVolume, the cloud-init Secret, and vm) the labels of spec.Owner.
func (m *machines) relabelMachine(ctx context.Context, spec *MachineSpec, vm *kubevirtv1.VirtualMachine, old types.UID) error {
	// Disks and Secret first, the VM last: ownership is read from the VM, so an interrupted
	// takeover is done again, and never leaves disks labelled for the earlier MachineRequest
	// behind a VM that is already ours (they would not be removed with it).
	claims, err := m.ownedClaims(ctx, MachineRef{Owner: Owner{UID: old}, Namespace: spec.Namespace}, true)
	if err != nil {
		return err
	}
	for i := range claims {
		if err := m.relabel(ctx, "PersistentVolumeClaim", &claims[i], spec.Owner); err != nil {
			return err
		}
	}
	// The root disk of a CDI image is a DataVolume (its PVC, CDI's, is relabelled above).
	dv := &cdiv1.DataVolume{}
	err = m.read(ctx, client.ObjectKey{Namespace: spec.Namespace, Name: diskClaimName(spec.Name, 0)}, dv)
	switch {
	case err == nil && isOwnedBy(dv.Labels, Owner{UID: old}):
		if err := m.relabel(ctx, "DataVolume", dv, spec.Owner); err != nil {
			return err
		}
	case err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
		return classify(err, "get "+describe("DataVolume", spec.Namespace, diskClaimName(spec.Name, 0)))
	}
	secret := secretMeta(spec.Namespace, cloudInitSecretName(spec.Name))
	err = m.read(ctx, client.ObjectKeyFromObject(secret), secret)
	switch {
	case err == nil && isOwnedBy(secret.Labels, Owner{UID: old}):
		if err := m.relabel(ctx, "Secret", secret, spec.Owner); err != nil {
			return err
		}
	case err != nil && !apierrors.IsNotFound(err):
		return classify(err, "get "+describe("Secret", spec.Namespace, cloudInitSecretName(spec.Name)))
	}
	return m.relabel(ctx, "VirtualMachine", vm, spec.Owner)
}

// relabel gives an object of ours the ownership labels of another owner. The change is a JSON
// patch that first tests the ownership label still holds the UID it was read with: of two
// reconciles that decided to take the object (two managers, two management clusters), the second
// fails and looks again, instead of both believing they own it. Nothing else of the object is
// locked, so that KubeVirt's and Harvester's own writes cannot fail it.
func (m *machines) relabel(ctx context.Context, kind string, obj client.Object, o Owner) error {
	ops := []map[string]any{{"op": "test", "path": "/metadata/labels/" + jsonPointerEscape(LabelMachineRequestUID), "value": obj.GetLabels()[LabelMachineRequestUID]}}
	// Our keys only, one by one: labels and annotations others set meanwhile stay.
	for _, k := range slices.Sorted(maps.Keys(ownerLabels(o, obj.GetLabels()[LabelRole]))) {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/labels/" + jsonPointerEscape(k), "value": ownerLabels(o, obj.GetLabels()[LabelRole])[k]})
	}
	annotations := ownerAnnotations(o)
	if obj.GetAnnotations() == nil {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": annotations})
	} else {
		for _, k := range slices.Sorted(maps.Keys(annotations)) {
			ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/" + jsonPointerEscape(k), "value": annotations[k]})
		}
		if _, stale := obj.GetAnnotations()[AnnotationOwnerCreated]; stale && annotations[AnnotationOwnerCreated] == "" {
			// An owner that records no creation time leaves none of an earlier one behind.
			ops = append(ops, map[string]any{"op": "remove", "path": "/metadata/annotations/" + jsonPointerEscape(AnnotationOwnerCreated)})
		}
	}
	if _, stale := obj.GetLabels()[LabelManagementCluster]; stale && o.Cluster == "" {
		ops = append(ops, map[string]any{"op": "remove", "path": "/metadata/labels/" + jsonPointerEscape(LabelManagementCluster)})
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	if err := m.c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, body)); err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsConflict(err) {
			// The test failed: someone relabelled it since it was read. Look again.
			return fmt.Errorf("label %s as ours: its owner changed since it was read, will look again: %w", describe(kind, obj.GetNamespace(), obj.GetName()), err)
		}
		return classify(err, "label "+describe(kind, obj.GetNamespace(), obj.GetName())+" as ours")
	}
	return nil
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// supersedable says whether obj, which carries another MachineRequest's UID, may be taken over by
// o: it was made by this provider for an earlier MachineRequest of the same namespace and name
// (which no longer exists: a namespace holds one object of a name), by the same management cluster
// (or one that recorded none), or the user handed it over. Otherwise it is a NameConflict that
// says how to hand it over where that applies: two management clusters (two bootstrap runs)
// against one Harvester namespace must never take objects from each other back and forth.
func supersedable(kind string, obj client.Object, o Owner) error {
	old := obj.GetLabels()[LabelMachineRequestUID]
	if key, ok := ownerKeyOf(obj); old == "" || types.UID(old) == o.UID || !ok || key != o.Key() {
		return nameConflict(kind, obj, o)
	}
	if maker := obj.GetLabels()[LabelManagementCluster]; maker != "" && maker != o.Cluster && !o.handsOverFrom(maker) {
		return Permanent(ReasonNameTakenByAnotherManagementCluster,
			"%s was created for %s of another management cluster (kube-system UID %s; this one is %q): it is left untouched",
			describe(kind, obj.GetNamespace(), obj.GetName()), o, maker, o.Cluster)
	}
	return nil
}

// takeOverLeftover takes over a disk or Secret an earlier MachineRequest of the same namespace and
// name left without a VM (its run died before creating the VM), where supersedable allows it.
func (m *machines) takeOverLeftover(ctx context.Context, kind string, obj client.Object, o Owner) error {
	if err := supersedable(kind, obj, o); err != nil {
		return err
	}
	return m.relabel(ctx, kind, obj, o)
}

func nameConflict(kind string, obj client.Object, o Owner) error {
	return Permanent(ReasonNameTaken,
		"%s exists on Harvester but was not created for %s: it is left untouched%s",
		describe(kind, obj.GetNamespace(), obj.GetName()), o, whoseObject(kind, obj))
}

// whoseObject names the owner an object on Harvester was made for, from its labels, and says how
// to read them, for a message about an object that is not ours: never delete it unseen, it may be
// another cluster's live node.
func whoseObject(kind string, obj client.Object) string {
	l := obj.GetLabels()
	owner := l[LabelOwnerKind]
	if owner == "" {
		owner = OwnerKindMachineRequest
	}
	if full := obj.GetAnnotations()[AnnotationMachineRequest]; full != "" {
		owner += " " + full
	} else {
		owner += " " + l[LabelMachineRequestNamespace] + "/" + l[LabelMachineRequestName]
	}
	who := fmt.Sprintf(". It was made for %s (UID %s)", owner, l[LabelMachineRequestUID])
	if mc := l[LabelManagementCluster]; mc != "" {
		who += " of the management cluster whose kube-system namespace has UID " + mc
	}
	if l[LabelMachineRequestUID] == "" {
		who = ". This provider did not make it (it has no owner label)"
	}
	return who + fmt.Sprintf("; read its labels with `kubectl -n %s get %s %s --show-labels` on Harvester, and a management cluster's identity with `kubectl get namespace kube-system -o jsonpath='{.metadata.uid}'`",
		obj.GetNamespace(), kubectlResource(kind), obj.GetName())
}

// kubectlResource is how kubectl names a kind of object on Harvester.
func kubectlResource(kind string) string {
	switch kind {
	case "VirtualMachine":
		return "virtualmachines.kubevirt.io"
	case "DataVolume":
		return "datavolumes.cdi.kubevirt.io"
	}
	return strings.ToLower(kind)
}

package harvester

import (
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The disks of a machine are ours when they carry the machine's ownership label. The one
// exception is the root disk of a VM created by the published provider (adopted, see adoptable):
// it was named "<vm>-rootdisk" and labelled only with LabelManagedBy.
const legacyRootDiskSuffix = "-rootdisk"

// kindOf names the kind of a disk for messages.
func kindOf(obj client.Object) string {
	if _, ok := obj.(*cdiv1.DataVolume); ok {
		return "DataVolume"
	}
	return "PersistentVolumeClaim"
}

// inUseRefusalPrefix starts the message of Harvester's PVC webhook when it refuses to delete a
// volume a VM uses or owns ("can not delete the volume <name> which is currently attached to
// VM: <namespace>/<vm>"): 409 Conflict since Harvester v1.8.0, 422 Invalid before. It must be
// waited on, never retried at once as an optimistic-locking conflict would be.
const inUseRefusalPrefix = "can not delete the volume "

// inUseRefusal returns Harvester's message when err is its webhook refusing to delete a volume in
// use ("" otherwise).
func inUseRefusal(err error) string {
	if !apierrors.IsConflict(err) && !apierrors.IsInvalid(err) {
		return ""
	}
	msg := statusMessage(err)
	if i := strings.Index(msg, inUseRefusalPrefix); i >= 0 {
		return "Harvester refuses to delete it: " + msg[i:]
	}
	return ""
}

// isLegacyRootDisk recognises the root disk the published provider created for vm.
func isLegacyRootDisk(pvc *corev1.PersistentVolumeClaim, vm *kubevirtv1.VirtualMachine) bool {
	return pvc.Name == vm.Name+legacyRootDiskSuffix && pvc.Labels[LabelManagedBy] == ManagedByValue && pvc.Labels[LabelMachineRequestUID] == ""
}

// mountedClaims lists the PVCs a VM's template mounts, in order.
func mountedClaims(vm *kubevirtv1.VirtualMachine) []string {
	if vm.Spec.Template == nil {
		return nil
	}
	var names []string
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			names = append(names, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return names
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// namesOf names the objects.
func namesOf(objs []client.Object) []string {
	names := make([]string, 0, len(objs))
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	return names
}

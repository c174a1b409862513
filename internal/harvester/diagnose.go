package harvester

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// Diagnosis is what Harvester says about why a machine is not up yet.
type Diagnosis struct {
	Reason  string
	Message string
}

// diagnose explains a VM that is not running with an IP, from what KubeVirt and Harvester report:
// scheduling, disks, the VMI's conditions. It returns nil when nothing is wrong yet (the VM is
// simply starting). Errors while reading are ignored: a diagnosis is a hint, never a reason to fail.
func (m *remoteMachines) diagnose(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) *Diagnosis {
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	if vmi != nil {
		for _, c := range vmi.Status.Conditions {
			if string(c.Type) == string(corev1.PodScheduled) && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return &Diagnosis{v1alpha1.ReasonVMUnschedulable, fmt.Sprintf(
					"%s cannot be scheduled: %s Free CPU or memory on Harvester, or lower spec.cpu / spec.memoryMB", what, strings.TrimSpace(c.Message))}
			}
		}
	}
	if d := m.diagnoseDisks(ctx, vm); d != nil {
		return d
	}
	if vmi != nil && vmi.Status.Phase != kubevirtv1.Running {
		for _, c := range vmi.Status.Conditions {
			if c.Status != corev1.ConditionFalse || c.Message == "" {
				continue
			}
			if strings.Contains(c.Message, "network-attachment-definition") && strings.Contains(c.Message, "not found") {
				return &Diagnosis{v1alpha1.ReasonNetworkNotFound, fmt.Sprintf(
					"%s cannot start: %s: create the VM network on Harvester or correct the ProviderConfig's harvester.networkName", what, c.Message)}
			}
			return &Diagnosis{v1alpha1.ReasonVMNotStarting, fmt.Sprintf("%s is %s: %s: %s", what, vmi.Status.Phase, c.Reason, c.Message)}
		}
	}
	return nil
}

// diagnoseDisks reports a missing or unbound disk, with the reason Harvester's events give.
func (m *remoteMachines) diagnoseDisks(ctx context.Context, vm *kubevirtv1.VirtualMachine) *Diagnosis {
	if vm.Spec.Template == nil {
		return nil
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		name := v.PersistentVolumeClaim.ClaimName
		pvc := &corev1.PersistentVolumeClaim{}
		err := m.read(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: name}, pvc)
		switch {
		case apierrors.IsNotFound(err):
			return &Diagnosis{v1alpha1.ReasonVolumeMissing, fmt.Sprintf(
				"PersistentVolumeClaim %s/%s (disk %s) was deleted outside the provider: the VM cannot start; delete and recreate the MachineRequest", vm.Namespace, name, v.Name)}
		case err != nil || pvc.Status.Phase != corev1.ClaimPending:
			continue
		}
		why := m.latestWarning(ctx, pvc)
		if id := pvc.Annotations[AnnotationImageID]; id != "" {
			if ref, err := ParseObjectRef(id, vm.Namespace); err == nil {
				if info, err := getImage(ctx, m.c, ref); err == nil && info.ImportFailure != "" && !info.Imported {
					return &Diagnosis{v1alpha1.ReasonImageImportFailed, fmt.Sprintf(
						"PersistentVolumeClaim %s/%s waits for VirtualMachineImage %s, whose import failed (%s): fix or re-upload the image", vm.Namespace, name, ref, info.ImportFailure)}
				}
			}
		}
		if why == "" {
			why = "no event explains it yet"
		}
		return &Diagnosis{v1alpha1.ReasonVolumeNotBound, fmt.Sprintf("PersistentVolumeClaim %s/%s (disk %s) is Pending: %s", vm.Namespace, name, v.Name, why)}
	}
	return nil
}

// latestWarning returns the message of the newest Warning event about obj ("" if none).
func (m *remoteMachines) latestWarning(ctx context.Context, obj client.Object) string {
	list := &corev1.EventList{}
	if err := m.c.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{"involvedObject.name": obj.GetName()}); err != nil {
		return ""
	}
	var warnings []corev1.Event
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning && e.InvolvedObject.UID == obj.GetUID() {
			warnings = append(warnings, e)
		}
	}
	if len(warnings) == 0 {
		return ""
	}
	sort.Slice(warnings, func(i, j int) bool { return eventTime(warnings[i]).Before(eventTime(warnings[j])) })
	return warnings[len(warnings)-1].Message
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// runningSince is when the VMI entered phase Running (zero if it has not).
func runningSince(vmi *kubevirtv1.VirtualMachineInstance) time.Time {
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == kubevirtv1.Running {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return time.Time{}
}

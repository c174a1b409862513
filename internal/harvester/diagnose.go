package harvester

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
)

// Diagnosis is what Harvester says about why a machine is not up yet.
type Diagnosis struct {
	Reason  string
	Message string
}

// unboundPVCsMessage is what the scheduler says of a pod whose PVCs are not bound yet. KubeVirt
// starts a VM's virt-launcher pod while its root disk is still being cloned, and copies this
// PodScheduled=False condition into the VMI (and the VM shows ErrorUnschedulable): part of every
// start, not a failure. A disk that cannot bind says so in its own events.
const unboundPVCsMessage = "unbound immediate PersistentVolumeClaims"

// diagnose explains a VM that is not running from the signals KubeVirt and Harvester give only when
// something is wrong: a disk that is missing, whose image failed to import or that has Warning
// events, KubeVirt's Failure condition on the VM, the VMI failing to create its pod (a quota
// refusing it, for example), and a scheduler that cannot place the VM for want of resources. It
// returns nil while the VM is simply starting: KubeVirt's conditions while it starts
// (Ready=False PodNotExists or GuestNotRunning, PodScheduled=False while its disk is cloned) are
// not failures, and a start that takes too long is the caller's to judge (see Observation.Starting).
// Errors while reading are ignored: a diagnosis is a hint, never a reason to fail.
// pending are the VM's disks that are not bound yet (pendingDisks).
func (m *machines) diagnose(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, pending []*corev1.PersistentVolumeClaim) *Diagnosis {
	what := describe("VirtualMachine", vm.Namespace, vm.Name)
	if d := m.diagnoseDisks(ctx, vm); d != nil {
		return d
	}
	if msg := vm.Annotations[annotationInsufficientResourceQuota]; msg != "" && vm.Spec.RunStrategy != nil && *vm.Spec.RunStrategy == kubevirtv1.RunStrategyHalted {
		return &Diagnosis{reasons.QuotaExceeded, fmt.Sprintf(
			"Harvester stopped %s (runStrategy Halted) because a ResourceQuota of namespace %s has no room for it: %s. Raise ResourceQuota %s or free resources, then start the VM again (Harvester's UI, or virtctl start)",
			what, vm.Namespace, msg, orNone(quotaIn(msg)))}
	}
	for _, c := range vm.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineFailure && c.Status == corev1.ConditionTrue {
			return &Diagnosis{reasons.VMNotStarting, fmt.Sprintf("%s cannot start: KubeVirt reports %s: %s", what, c.Reason, strings.TrimSpace(c.Message))}
		}
	}
	if vmi == nil {
		return nil
	}
	if c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceSynchronized); c != nil && c.Reason == failedPVCNotFoundReason {
		// KubeVirt waits for a PVC to appear, and says so in PodScheduled=False too: the disk
		// diagnosis above has found nothing wrong (CDI creates a DataVolume's PVC in a moment).
		return nil
	}
	for _, c := range vmi.Status.Conditions {
		switch {
		case c.Type == kubevirtv1.VirtualMachineInstanceSynchronized && c.Status == corev1.ConditionFalse && quotaIn(c.Message) != "":
			return &Diagnosis{reasons.QuotaExceeded, fmt.Sprintf(
				"%s cannot start: Harvester refused its virt-launcher pod, which would exceed ResourceQuota %s (%s); raise the quota or free resources in namespace %s, the VM starts once the quota allows",
				what, quotaIn(c.Message), c.Message, vm.Namespace)}
		case c.Type == kubevirtv1.VirtualMachineInstanceSynchronized && c.Status == corev1.ConditionFalse && c.Reason != failedPVCNotFoundReason:
			return &Diagnosis{reasons.VMNotStarting, fmt.Sprintf("%s cannot start: KubeVirt reports %s: %s", what, c.Reason, strings.TrimSpace(c.Message))}
		case string(c.Type) == string(corev1.PodScheduled) && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable:
			why := c.Message
			if strings.Contains(why, unboundPVCsMessage) {
				if len(pending) > 0 {
					m.staleUnschedulable.forget(client.ObjectKeyFromObject(vmi))
					continue // the disks are still being provisioned: part of every start
				}
				// KubeVirt copies the pod's PodScheduled condition once and keeps it: with the
				// disks bound, the scheduler's current reason is in the pod's latest event,
				// worth reading only once the scheduler has had time to place the pod.
				if !m.unscheduledPastGrace(vmi) {
					continue
				}
				if why = m.launcherWarning(ctx, vmi, "FailedScheduling"); why == "" || strings.Contains(why, unboundPVCsMessage) {
					continue
				}
			}
			return &Diagnosis{reasons.VMUnschedulable, fmt.Sprintf("%s cannot be scheduled: %s %s", what, strings.TrimSpace(why), schedulingAdvice(vm, why))}
		}
	}
	return nil
}

// nodeSelectionMismatch is how the scheduler counts the nodes that lack the labels a pod requires
// (kube-scheduler's NodeAffinity filter, ErrReasonPod), whether by nodeSelector or node affinity.
const nodeSelectionMismatch = "didn't match Pod's node affinity/selector"

// schedulingAdvice says what to do about the scheduler's reason why: label nodes when nodes lack
// the labels the VM requires, free resources when they lack room (or for any other reason).
func schedulingAdvice(vm *kubevirtv1.VirtualMachine, why string) string {
	var advice []string
	mismatch := strings.Contains(why, nodeSelectionMismatch)
	if mismatch {
		advice = append(advice, fmt.Sprintf(
			"No Harvester node that runs VMs carries the labels the VM requires (%s): label the nodes that should run it (the VM keeps the node selection it was created with)",
			describeNodeSelection(vm)))
		if dedicatedCPUs(vm) {
			// Harvester's mutator requires the CPU manager label of pinned CPUs; virt-handler
			// sets it, on nodes whose kubelet runs the static CPU manager policy.
			advice = append(advice, "The VM has dedicated CPUs (spec.dedicatedCpuPlacement): it runs only on a node whose CPU manager is on; turn it on for a node in Harvester (Hosts, Enable CPU Manager), or make the machine without dedicated CPUs")
		}
	}
	short := devicesShort(vm, why)
	advice = append(advice, short...)
	if strings.Contains(why, insufficient+string(corev1.ResourceCPU)) || strings.Contains(why, insufficient+string(corev1.ResourceMemory)) || (!mismatch && len(short) == 0) {
		advice = append(advice, "Free CPU or memory on Harvester, or give the machine fewer CPUs or less memory")
	}
	return strings.Join(advice, ". ")
}

// insufficient starts kube-scheduler's reason for a node that lacks room for a resource the pod
// requests (noderesources' "Insufficient <resource name>"), extended resources included.
const insufficient = "Insufficient "

// devicesShort says, for each passthrough device resource of the VM that the scheduler finds no
// room for, which field asked for it and what to enable or free on Harvester. KubeVirt's
// virt-controller asks the launcher pod for one of the resource per device, and only nodes whose
// device plugin advertises one free fit: the resource is short when Harvester offers no device of
// it (passthrough enabled for none, no vGPU of the type), or every one is in use by another VM.
func devicesShort(vm *kubevirtv1.VirtualMachine, why string) []string {
	var out []string
	filtered := schedulerReasons(why)
	seen := map[string]bool{}
	for _, d := range vmDevices(vm) {
		if seen[d.resource] || !filtered[insufficient+d.resource] {
			continue
		}
		seen[d.resource] = true
		enable := "enable passthrough for another device of that model in Harvester (Advanced > PCI Devices, Enable Passthrough)"
		if d.vGPU {
			enable = "enable another vGPU of that type in Harvester (Advanced > vGPU Devices, Enable, with that type)"
		}
		out = append(out, fmt.Sprintf(
			"The VM asks for device %s (%s) and no Harvester node has one free: Harvester offers none of it, or every one it offers is in use by another VM. To run it, %s, or free one (stop or delete the VM that holds it); the VM starts once a node has one free",
			d.resource, d.field, enable))
	}
	return out
}

// schedulerReasons are the reasons of a FailedScheduling message (kube-scheduler's FitError:
// "0/3 nodes are available: 1 Insufficient memory, 2 Insufficient nvidia.com/GA102GL_A10.
// preemption: ..."), without their node counts: whole reasons, so that a resource whose name
// starts another's is not taken for it.
func schedulerReasons(why string) map[string]bool {
	head, _, _ := strings.Cut(why, " preemption:")
	_, list, ok := strings.Cut(head, " nodes are available: ")
	if !ok {
		return nil
	}
	out := map[string]bool{}
	for _, r := range strings.Split(strings.TrimSuffix(strings.TrimSpace(list), "."), ", ") {
		if count, reason, ok := strings.Cut(r, " "); ok && strings.Trim(count, "0123456789") == "" {
			r = reason
		}
		out[r] = true
	}
	return out
}

// vmDevice is a passthrough device of a VM as its spec names it.
type vmDevice struct {
	resource string
	// field is the machine's field that asked for it.
	field string
	vGPU  bool
}

// vmDevices lists the VM's passthrough devices and vGPUs. Harvester v1.8's pcidevices mutator
// moves vGPUs to hostDevices, keeping their names (gpuName), and Harvester renames a stopped
// VM's devices after those it was given (its VM controller's OnVMIDeletion): a device is told
// apart by its name where it can be.
func vmDevices(vm *kubevirtv1.VirtualMachine) []vmDevice {
	if vm.Spec.Template == nil {
		return nil
	}
	d := vm.Spec.Template.Spec.Domain.Devices
	var out []vmDevice
	for i, g := range d.GPUs {
		field, vGPU := deviceField(g.Name)
		if field == "" {
			field, vGPU = fmt.Sprintf("spec.gpus; the VM's gpus[%d]", i), true
		}
		out = append(out, vmDevice{resource: g.DeviceName, field: field, vGPU: vGPU})
	}
	for i, h := range d.HostDevices {
		field, vGPU := deviceField(h.Name)
		if field == "" {
			field = fmt.Sprintf("spec.hostDevices or spec.gpus; the VM's hostDevices[%d]", i)
		}
		out = append(out, vmDevice{resource: h.DeviceName, field: field, vGPU: vGPU})
	}
	return out
}

// deviceField is the machine's field a device of the VM was made from, by the name the provider
// gave it (hostDeviceName, gpuName); "" for a name it did not give.
func deviceField(name string) (field string, vGPU bool) {
	var n int
	switch {
	case scanIndex(name, "gpu-%d", &n):
		return fmt.Sprintf("spec.gpus[%d]", n-1), true
	case scanIndex(name, "hostdevice-%d", &n):
		return fmt.Sprintf("spec.hostDevices[%d]", n-1), false
	}
	return "", false
}

// scanIndex reads the index of a device name of the form format (hostDeviceName, gpuName).
func scanIndex(name, format string, n *int) bool {
	_, err := fmt.Sscanf(name, format, n)
	return err == nil && *n >= 1 && fmt.Sprintf(format, *n) == name
}

// dedicatedCPUs reports whether the VM pins its vCPUs (KubeVirt's dedicatedCpuPlacement).
func dedicatedCPUs(vm *kubevirtv1.VirtualMachine) bool {
	return vm.Spec.Template != nil && vm.Spec.Template.Spec.Domain.CPU != nil && vm.Spec.Template.Spec.Domain.CPU.DedicatedCPUPlacement
}

// describeNodeSelection names the node labels the VM's spec requires: its nodeSelector and its
// required node affinity, as "key=value" where a requirement is one value, else "key Op [values]".
func describeNodeSelection(vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.Template == nil {
		return "none"
	}
	spec := vm.Spec.Template.Spec
	var parts []string
	for _, key := range slices.Sorted(maps.Keys(spec.NodeSelector)) {
		parts = append(parts, key+"="+spec.NodeSelector[key])
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var terms []string
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			var reqs []string
			for _, r := range term.MatchExpressions {
				if r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
					reqs = append(reqs, r.Key+"="+r.Values[0])
				} else {
					reqs = append(reqs, fmt.Sprintf("%s %s %v", r.Key, r.Operator, r.Values))
				}
			}
			terms = append(terms, strings.Join(reqs, ", "))
		}
		parts = append(parts, strings.Join(terms, " or "))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// schedulingGrace is how long a VMI may go on showing the scheduler's "unbound PVCs" reason once
// its disks are bound before the launcher pod's events are read for the scheduler's current one.
// The scheduler retries a pod as soon as its volumes bind, so a healthy start has moved on long
// before: listing events (a scan of every event in the namespace on the API server) on every
// start would cost 1000 such scans for 1000 machines, to find nothing.
const schedulingGrace = 10 * time.Second

// unscheduledPastGrace reports whether the VMI has shown the stale reason, with its disks bound,
// for schedulingGrace (counted from the first time it is asked).
func (m *machines) unscheduledPastGrace(vmi *kubevirtv1.VirtualMachineInstance) bool {
	first, seen := m.staleUnschedulable.loadOrStore(vmi, time.Now())
	return seen && time.Since(first) >= schedulingGrace
}

// forgetDiagnosis forgets what the diagnosis remembers of a VM's VMI and disks, when it is deleted.
func (m *machines) forgetDiagnosis(vm *kubevirtv1.VirtualMachine) {
	m.staleUnschedulable.forget(client.ObjectKeyFromObject(vm)) // the VMI has the VM's name
	for _, claim := range mountedClaims(vm) {
		m.claimEventsRead.forget(types.NamespacedName{Namespace: vm.Namespace, Name: claim})
	}
}

// launcherWarning returns the message of the newest Warning event of that reason about the VMI's
// virt-launcher pod (named in status.activePods by UID; "" if none).
func (m *machines) launcherWarning(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance, reason string) string {
	var newest *corev1.Event
	for uid := range vmi.Status.ActivePods {
		warnings, err := m.warnings(ctx, vmi.Namespace, uid)
		if err != nil {
			return ""
		}
		for i, e := range warnings {
			if e.Reason == reason && (newest == nil || newerEvent(e, *newest)) {
				newest = &warnings[i]
			}
		}
	}
	if newest == nil {
		return ""
	}
	return newest.Message
}

// annotationInsufficientResourceQuota is where Harvester's VM controllers say why they stopped a
// VM whose virt-launcher pod a ResourceQuota refused (StopVMIfExceededQuota,
// SetHaltIfInsufficientResourceQuota): they set its runStrategy to Halted.
const annotationInsufficientResourceQuota = "harvesterhci.io/insufficient-resource-quota"

// failedPVCNotFoundReason is KubeVirt's reason while a VMI's PVC does not exist (yet); the disk
// diagnosis covers it.
const failedPVCNotFoundReason = "FailedPvcNotFound"

// quotaIn returns the ResourceQuota an "exceeded quota" message names ("" if none).
func quotaIn(message string) string {
	_, rest, ok := strings.Cut(message, quotaExceededPrefix)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ",")
	return strings.TrimSpace(name)
}

// starting describes where a VM that is not running yet stands, for a start that takes longer
// than it should: KubeVirt's status, the VMI's phase and the condition holding it up, the disks
// not bound yet. It reads nothing: the caller decides when to say it.
func starting(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, pending []string) string {
	parts := []string{"KubeVirt reports status " + orNone(string(vm.Status.PrintableStatus))}
	if vmi == nil {
		parts = append(parts, "no VirtualMachineInstance yet")
	} else {
		vmiPart := "VirtualMachineInstance " + orNone(string(vmi.Status.Phase))
		for _, t := range []kubevirtv1.VirtualMachineInstanceConditionType{kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), kubevirtv1.VirtualMachineInstanceSynchronized, kubevirtv1.VirtualMachineInstanceReady} {
			if c := vmiCondition(vmi, t); c != nil && c.Status == corev1.ConditionFalse {
				vmiPart += fmt.Sprintf(", %s=False %s: %s", c.Type, c.Reason, strings.TrimSpace(c.Message))
				break
			}
		}
		parts = append(parts, vmiPart)
	}
	if len(pending) > 0 {
		parts = append(parts, "disks not bound yet: "+strings.Join(pending, ", "))
	}
	return strings.Join(parts, "; ")
}

func orNone(s string) string {
	if s == "" {
		return "(none yet)"
	}
	return s
}

func vmiCondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) *kubevirtv1.VirtualMachineInstanceCondition {
	for i := range vmi.Status.Conditions {
		if vmi.Status.Conditions[i].Type == t {
			return &vmi.Status.Conditions[i]
		}
	}
	return nil
}

// diagnoseDisks reports a disk that is missing, or Pending for a reason that is not the normal
// wait for its volume (cloning an image takes a while): its image failed to import, its
// DataVolume failed, or it has a Warning event (a missing storage class, a provisioner error).
func (m *machines) diagnoseDisks(ctx context.Context, vm *kubevirtv1.VirtualMachine) *Diagnosis {
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
			if m.dataVolumeExists(ctx, vm.Namespace, name) {
				continue // CDI creates the PVC of a DataVolume in a moment
			}
			return &Diagnosis{reasons.VolumeMissing, fmt.Sprintf(
				"PersistentVolumeClaim %s/%s (disk %s) was deleted outside the provider: the VM cannot start", vm.Namespace, name, v.Name)}
		case err != nil:
			continue
		case pvc.Status.Phase != corev1.ClaimPending:
			m.claimEventsRead.forget(client.ObjectKeyFromObject(pvc))
			continue
		}
		if d := m.diagnosePendingClaim(ctx, vm, v.Name, pvc); d != nil {
			return d
		}
	}
	return nil
}

// diagnosePendingClaim explains a Pending disk if something is wrong with it.
func (m *machines) diagnosePendingClaim(ctx context.Context, vm *kubevirtv1.VirtualMachine, disk string, pvc *corev1.PersistentVolumeClaim) *Diagnosis {
	what := fmt.Sprintf("PersistentVolumeClaim %s/%s (disk %s)", pvc.Namespace, pvc.Name, disk)
	if id := pvc.Annotations[AnnotationImageID]; id != "" {
		if ref, err := ParseObjectRef(id, vm.Namespace); err == nil {
			if info, err := getImage(ctx, m.read, ref); err == nil && info.ImportFailure != "" && !info.Imported {
				return &Diagnosis{reasons.ImageImportFailed, fmt.Sprintf(
					"%s waits for VirtualMachineImage %s, whose import failed (%s): fix or re-upload the image", what, ref, info.ImportFailure)}
			}
		}
	}
	if owner := metav1.GetControllerOf(pvc); owner != nil && owner.Kind == dataVolumeKind {
		dv := &cdiv1.DataVolume{}
		if m.c.Get(ctx, client.ObjectKey{Namespace: pvc.Namespace, Name: owner.Name}, dv) == nil && dv.Status.Phase == cdiv1.Failed {
			return &Diagnosis{reasons.VolumeNotBound, fmt.Sprintf("%s is Pending: DataVolume %s/%s failed: %s", what, dv.Namespace, dv.Name, dataVolumeFailure(dv))}
		}
	}
	if !m.claimEventsWorthReading(pvc) {
		return nil
	}
	if why := m.latestWarning(ctx, pvc); why != "" {
		return &Diagnosis{reasons.VolumeNotBound, fmt.Sprintf("%s is Pending: %s", what, why)}
	}
	return nil
}

// claimEventsGrace is how long a disk may be Pending before its events are read for a warning,
// and claimEventsInterval how often they are read again while it stays Pending. Every root disk
// is Pending while Longhorn or CDI clones the image, and listing events is a scan of every event
// in the namespace on the API server: reading them on every look at every new disk would cost
// 1000 scans for 1000 machines, to find nothing. A disk that cannot bind says so within seconds
// and keeps saying it; the diagnosis comes at most claimEventsGrace later.
const (
	claimEventsGrace    = 10 * time.Second
	claimEventsInterval = 30 * time.Second
)

// claimsWorthDiagnosingAt returns when the first of the Pending disks (pendingDisks) becomes
// worth a look at its events (zero if none is waiting for that): no change on Harvester announces
// it.
func claimsWorthDiagnosingAt(pending []*corev1.PersistentVolumeClaim) time.Time {
	var at time.Time
	for _, pvc := range pending {
		if pvc.Status.Phase != corev1.ClaimPending {
			continue
		}
		if due := pvc.CreationTimestamp.Add(claimEventsGrace); due.After(time.Now()) {
			at = earliest(at, due)
		}
	}
	return at
}

// earliest returns the earlier of two times, a zero time counting as none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// claimEventsWorthReading reports whether the Pending disk's events are due a read (and records
// the read).
func (m *machines) claimEventsWorthReading(pvc *corev1.PersistentVolumeClaim) bool {
	now := time.Now()
	if now.Sub(pvc.CreationTimestamp.Time) < claimEventsGrace {
		return false
	}
	if last, read := m.claimEventsRead.load(pvc); read && now.Sub(last) < claimEventsInterval {
		return false
	}
	m.claimEventsRead.store(pvc, now)
	return true
}

// dataVolumeKind is CDI's kind, the controller of the PVCs it fills.
const dataVolumeKind = "DataVolume"

// dataVolumeExists reports whether a DataVolume of that name exists (read live; false where
// Harvester has no DataVolumes or the credentials may not read them).
func (m *machines) dataVolumeExists(ctx context.Context, namespace, name string) bool {
	return m.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &cdiv1.DataVolume{}) == nil
}

// dataVolumeFailure is the message of the condition that says why a DataVolume failed.
func dataVolumeFailure(dv *cdiv1.DataVolume) string {
	for _, c := range dv.Status.Conditions {
		if c.Message != "" && c.Status != corev1.ConditionTrue {
			return c.Reason + ": " + c.Message
		}
	}
	return "no condition says why"
}

// pendingDisks returns the VM's disks that are not bound yet (read from the cache, as diagnose
// did).
func (m *machines) pendingDisks(ctx context.Context, vm *kubevirtv1.VirtualMachine) []*corev1.PersistentVolumeClaim {
	var pending []*corev1.PersistentVolumeClaim
	for _, name := range mountedClaims(vm) {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := m.read(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: name}, pvc); err == nil && pvc.Status.Phase != corev1.ClaimBound {
			pending = append(pending, pvc)
		}
	}
	return pending
}

// diskNames names disks for messages.
func diskNames(disks []*corev1.PersistentVolumeClaim) []string {
	names := make([]string, 0, len(disks))
	for _, pvc := range disks {
		names = append(names, describe("PersistentVolumeClaim", pvc.Namespace, pvc.Name))
	}
	return names
}

// latestWarning returns the message of the newest Warning event about obj ("" if none).
func (m *machines) latestWarning(ctx context.Context, obj client.Object) string {
	warnings, err := m.warnings(ctx, obj.GetNamespace(), obj.GetUID())
	if err != nil || len(warnings) == 0 {
		return ""
	}
	sort.Slice(warnings, func(i, j int) bool { return newerEvent(warnings[j], warnings[i]) })
	return warnings[len(warnings)-1].Message
}

// newerEvent reports whether a was recorded after b. Event times have a resolution of one second:
// of two in the same second, the one whose name sorts last is the newer, as recorders name events
// after their object and the time they were created in nanoseconds, in hex ("<object>.<hex>").
func newerEvent(a, b corev1.Event) bool {
	ta, tb := eventTime(a), eventTime(b)
	if !ta.Equal(tb) {
		return ta.After(tb)
	}
	return a.Name > b.Name
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

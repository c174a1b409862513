package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

const (
	// recheck is how often a VM that waits on something outside the simulator is looked at.
	recheck = 500 * time.Millisecond
	// conflictRetry is how soon a write that lost a race with another controller is retried.
	conflictRetry = 50 * time.Millisecond
)

// Messages KubeVirt (pkg/virt-controller/watch/vmi/lifecycle.go) and the scheduler write.
const (
	msgPodNotExists         = "virt-launcher pod has not yet been scheduled"
	msgGuestNotRunning      = "Guest VM is not reported as running"
	reasonFailedPVCNotFound = "FailedPvcNotFound"
)

type vmReconciler struct{ sim *Simulator }

func (r *vmReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-virtualmachine").
		For(&kubevirtv1.VirtualMachine{}).
		Owns(&kubevirtv1.VirtualMachineInstance{}).
		// The scheduler places a pod as soon as its PVCs bind; the kubelet starts it as soon as
		// its cloud-init Secret exists.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.vmsUsing)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.vmsUsing)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		Complete(r)
}

// vmsUsing names the VMs of obj's namespace that mount it (a PVC) or read cloud-init from it (a
// Secret).
func (r *vmReconciler) vmsUsing(ctx context.Context, obj client.Object) []ctrl.Request {
	field := indexVMByClaim
	if _, isSecret := obj.(*corev1.Secret); isSecret {
		field = indexVMBySecret
	}
	vms, err := vmsByIndex(ctx, r.sim.c, obj.GetNamespace(), field, obj.GetName())
	if err != nil {
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(vms))
	for i := range vms {
		reqs = append(reqs, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&vms[i])})
	}
	return reqs
}

// Reconcile plays KubeVirt's VM controller and Harvester's VM controllers for one VM, and
// virt-controller, the scheduler and the kubelet for its VMI.
func (r *vmReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := r.sim.c
	vm := &kubevirtv1.VirtualMachine{}
	if err := c.Get(ctx, req.NamespacedName, vm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vm.DeletionTimestamp != nil {
		return retryConflict(r.remove(ctx, vm))
	}
	// The writes KubeVirt and Harvester make to a VM of their own accord, each an update that
	// carries the resourceVersion it read: one per pass, as each controller writes separately.
	if changed := r.churnVM(vm); changed {
		return retryConflict(c.Update(ctx, vm))
	}
	vmi, err := r.getVMI(ctx, vm)
	if err != nil {
		return ctrl.Result{}, err
	}
	var syncErr *syncError
	switch {
	case !wantsRunning(vm):
		if vmi != nil {
			r.sim.pools.release(vm.UID)
			r.sim.launchers.Delete(vmi.UID)
			if err := client.IgnoreNotFound(c.Delete(ctx, vmi)); err != nil {
				return ctrl.Result{}, err
			}
			vmi = nil
		}
	case vmi == nil:
		if vmi, err = r.createVMI(ctx, vm); err != nil {
			syncErr = &syncError{reason: "FailedCreate", err: err}
			vmi = nil
		}
	}
	next := time.Duration(0)
	if vmi != nil {
		if next, err = r.syncVMI(ctx, vm, vmi); err != nil {
			return retryConflict(err)
		}
		if changed := r.recordMACs(vm, vmi); changed {
			return retryConflict(c.Update(ctx, vm))
		}
	}
	if err := r.setVMStatus(ctx, vm, vmi, syncErr); err != nil {
		return retryConflict(err)
	}
	if syncErr != nil {
		return ctrl.Result{RequeueAfter: recheck}, nil
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// retryConflict turns a lost race with another writer into a quick retry, as the controllers it
// plays do (their queues requeue a conflict), rather than an error with backoff.
func retryConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

// syncError is what KubeVirt's VM controller records in the VM's Failure condition.
type syncError struct {
	reason string
	err    error
}

// churnVM applies the next of the metadata writes KubeVirt and Harvester make to every VM, and
// reports whether it changed vm:
//   - KubeVirt records the API version it observed (vm.go execute, "must be first step");
//   - KubeVirt's and Harvester's controllers add their finalizers;
//   - Harvester stores the run strategy (StoreRunStrategy, a workaround for kubevirt#7295).
func (r *vmReconciler) churnVM(vm *kubevirtv1.VirtualMachine) bool {
	version := kubevirtv1.SchemeGroupVersion.Version
	if vm.Annotations[kubevirtv1.ControllerAPILatestVersionObservedAnnotation] != version ||
		vm.Annotations[kubevirtv1.ControllerAPIStorageVersionObservedAnnotation] != version {
		vm.Annotations = mergeAnnotations(vm.Annotations, map[string]string{
			kubevirtv1.ControllerAPILatestVersionObservedAnnotation:  version,
			kubevirtv1.ControllerAPIStorageVersionObservedAnnotation: version,
		})
		return true
	}
	if !controllerutil.ContainsFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer) || !controllerutil.ContainsFinalizer(vm, harvesterVMFinalizer) {
		controllerutil.AddFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer)
		controllerutil.AddFinalizer(vm, harvesterVMFinalizer)
		return true
	}
	if strategy := runStrategy(vm); strategy != kubevirtv1.RunStrategyHalted && vm.Annotations[annotationRunStrategy] != string(strategy) {
		vm.Annotations = mergeAnnotations(vm.Annotations, map[string]string{annotationRunStrategy: string(strategy)})
		return true
	}
	return false
}

// recordMACs is Harvester's VMNetworkController.SetDefaultNetworkMacAddress: once the VMI runs,
// the MAC address of each interface is kept in the VM's annotation, so that a restart keeps it.
func (r *vmReconciler) recordMACs(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) bool {
	if vmi.Status.Phase != kubevirtv1.Running || len(vmi.Status.Interfaces) == 0 {
		return false
	}
	macs := map[string]string{}
	for _, iface := range vmi.Status.Interfaces {
		if iface.MAC != "" && iface.Name != "" {
			macs[iface.Name] = iface.MAC
		}
	}
	raw, _ := json.Marshal(macs)
	if vm.Annotations[annotationMACAddress] == string(raw) {
		return false
	}
	vm.Annotations = mergeAnnotations(vm.Annotations, map[string]string{annotationMACAddress: string(raw)})
	return true
}

func mergeAnnotations(have, add map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, add)
	return out
}

func runStrategy(vm *kubevirtv1.VirtualMachine) kubevirtv1.VirtualMachineRunStrategy {
	if vm.Spec.RunStrategy != nil {
		return *vm.Spec.RunStrategy
	}
	// spec.running is deprecated in favour of spec.runStrategy, but KubeVirt still honours it.
	if ptr.Deref(vm.Spec.Running, false) {
		return kubevirtv1.RunStrategyAlways
	}
	return kubevirtv1.RunStrategyHalted
}

func wantsRunning(vm *kubevirtv1.VirtualMachine) bool {
	switch runStrategy(vm) {
	case kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyRerunOnFailure, kubevirtv1.RunStrategyOnce:
		return true
	}
	return false
}

func (r *vmReconciler) getVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := r.sim.c.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return vmi, nil
}

// createVMI starts the VM as KubeVirt's SetupVMIFromVM does: the template's metadata and spec, the
// VM as controller, and an event on the VM.
func (r *vmReconciler) createVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Namespace: vm.Namespace}}
	if vm.Spec.Template != nil {
		vmi.Labels = maps.Clone(vm.Spec.Template.ObjectMeta.Labels)
		vmi.Annotations = maps.Clone(vm.Spec.Template.ObjectMeta.Annotations)
		vmi.Spec = *vm.Spec.Template.Spec.DeepCopy()
	}
	vmi.Annotations = mergeAnnotations(vmi.Annotations, map[string]string{annotationVMGeneration: fmt.Sprint(vm.Generation)})
	if err := controllerutil.SetControllerReference(vm, vmi, r.sim.c.Scheme()); err != nil {
		return nil, err
	}
	if err := r.sim.c.Create(ctx, vmi); err != nil {
		r.sim.event(componentKubeVirt, vm, corev1.EventTypeWarning, "FailedCreate", "Error creating virtual machine instance: "+err.Error())
		return nil, err
	}
	r.sim.event(componentKubeVirt, vm, corev1.EventTypeNormal, "SuccessfulCreate", "Started the virtual machine by creating the new virtual machine instance "+vmi.Name)
	return vmi, nil
}

// syncVMI brings the VMI's metadata and status to what its launcher pod's progress makes them,
// and says when to look again.
func (r *vmReconciler) syncVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) (time.Duration, error) {
	st, next := r.lifecycle(ctx, vm, vmi)
	if labels := r.vmiLabels(vm, vmi, st); !equality.Semantic.DeepEqual(labels, vmi.Labels) {
		vmi.Labels = labels
		if err := r.sim.c.Update(ctx, vmi); err != nil {
			return 0, err
		}
	}
	if !equality.Semantic.DeepEqual(vmi.Status, *st) {
		vmi.Status = *st
		if err := r.sim.c.Status().Update(ctx, vmi); err != nil {
			return 0, err
		}
		if hasIPv4(st.Interfaces) {
			r.sim.ipReported.LoadOrStore(vmi.Namespace+"/"+vmi.Name, time.Now())
		}
	}
	return next, nil
}

// vmiLabels are the VMI's labels as KubeVirt and Harvester keep them: Harvester's SyncLabelsToVmi
// copies the VM template's labels (kubevirt.io/ ones excepted, which KubeVirt guards), and
// KubeVirt labels a scheduled VMI with its node.
func (r *vmReconciler) vmiLabels(vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, st *kubevirtv1.VirtualMachineInstanceStatus) map[string]string {
	out := maps.Clone(vmi.Labels)
	if out == nil {
		out = map[string]string{}
	}
	var template map[string]string
	if vm.Spec.Template != nil {
		template = vm.Spec.Template.ObjectMeta.Labels
	}
	for k := range out {
		if _, keep := template[k]; !keep && !strings.HasPrefix(k, "kubevirt.io") {
			delete(out, k)
		}
	}
	for k, v := range template {
		if !strings.HasPrefix(k, "kubevirt.io") {
			out[k] = v
		}
	}
	if st.NodeName != "" {
		out[kubevirtv1.NodeNameLabel] = st.NodeName
	}
	if len(out) == 0 && vmi.Labels == nil {
		return nil
	}
	return out
}

func hasIPv4(ifaces []kubevirtv1.VirtualMachineInstanceNetworkInterface) bool {
	for _, i := range ifaces {
		if a, err := netip.ParseAddr(i.IP); err == nil && a.Is4() && !a.IsLoopback() {
			return true
		}
	}
	return false
}

// setVMStatus writes the VM's status as KubeVirt's VM controller computes it (vm.go updateStatus):
// created and ready from the VMI, the run strategy once it started, the VMI's conditions, the
// Failure condition of a sync error, and the printable status.
func (r *vmReconciler) setVMStatus(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, syncErr *syncError) error {
	want := vm.Status.DeepCopy()
	want.Created = vmi != nil
	want.Ready = vmi != nil && vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceReady).Status == corev1.ConditionTrue
	if want.RunStrategy != "" || want.Created {
		want.RunStrategy = runStrategy(vm)
	}
	syncVMConditions(want, vmi, syncErr)
	want.PrintableStatus = r.printableStatus(ctx, vm, vmi)
	if equality.Semantic.DeepEqual(&vm.Status, want) {
		return nil
	}
	vm.Status = *want
	return r.sim.c.Status().Update(ctx, vm)
}

// printableStatus is KubeVirt's setPrintableStatus: the first status whose predicate holds, in
// KubeVirt's order of precedence (those the simulator cannot reach are left out: Stopping,
// Migrating, Paused, DataVolumeError, image pull errors, CrashLoopBackOff, WaitingForReceiver).
func (r *vmReconciler) printableStatus(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) kubevirtv1.VirtualMachinePrintableStatus {
	has := func(t kubevirtv1.VirtualMachineInstanceConditionType, reason string) bool {
		c := vmiCondition(vmi, t)
		return c.Status == corev1.ConditionFalse && c.Reason == reason
	}
	startExpected := vmi == nil && wantsRunning(vm)
	switch {
	case vm.DeletionTimestamp != nil:
		return kubevirtv1.VirtualMachineStatusTerminating
	case vmi != nil && vmi.Status.Phase == kubevirtv1.Running:
		return kubevirtv1.VirtualMachineStatusRunning
	case has(kubevirtv1.VirtualMachineInstanceSynchronized, reasonFailedPVCNotFound):
		return kubevirtv1.VirtualMachineStatusPvcNotFound
	case has(kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), corev1.PodReasonUnschedulable):
		return kubevirtv1.VirtualMachineStatusUnschedulable
	case (startExpected || (vmi != nil && !isFinal(vmi))) && r.hasUnboundPVC(ctx, vm):
		return kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding
	case startExpected || (vmi != nil && !isFinal(vmi)):
		return kubevirtv1.VirtualMachineStatusStarting
	}
	return kubevirtv1.VirtualMachineStatusStopped
}

func isFinal(vmi *kubevirtv1.VirtualMachineInstance) bool {
	return vmi.Status.Phase == kubevirtv1.Succeeded || vmi.Status.Phase == kubevirtv1.Failed
}

// hasUnboundPVC is KubeVirt's HasUnboundPVC: a PVC of the VM exists and is not Bound.
func (r *vmReconciler) hasUnboundPVC(ctx context.Context, vm *kubevirtv1.VirtualMachine) bool {
	for _, name := range claimsOf(vm) {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: vm.Namespace, Name: name}, pvc); err == nil && pvc.Status.Phase != corev1.ClaimBound {
			return true
		}
	}
	return false
}

// syncVMConditions is KubeVirt's syncConditions: Ready mirrors the VMI's Ready condition (or says
// there is no VMI), the VMI's other conditions are copied, and a sync error is the Failure
// condition.
func syncVMConditions(status *kubevirtv1.VirtualMachineStatus, vmi *kubevirtv1.VirtualMachineInstance, syncErr *syncError) {
	ready := kubevirtv1.VirtualMachineCondition{Type: kubevirtv1.VirtualMachineReady, Status: corev1.ConditionFalse, Reason: "VMINotExists", Message: "VMI does not exist"}
	if vmi != nil {
		c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceReady)
		ready = kubevirtv1.VirtualMachineCondition{Type: kubevirtv1.VirtualMachineReady, Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime}
		if c.Status == "" {
			ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "VMIConditionMissing", "VMI is missing the Ready condition"
		}
	}
	updateVMCondition(status, ready)
	if syncErr != nil {
		updateVMCondition(status, kubevirtv1.VirtualMachineCondition{Type: kubevirtv1.VirtualMachineFailure, Status: corev1.ConditionTrue, Reason: syncErr.reason, Message: syncErr.err.Error()})
	} else {
		removeVMCondition(status, kubevirtv1.VirtualMachineFailure)
	}
	if vmi == nil {
		return // KubeVirt leaves the other conditions as they were
	}
	fromVMI := map[kubevirtv1.VirtualMachineConditionType]bool{}
	for _, c := range vmi.Status.Conditions {
		if c.Type == kubevirtv1.VirtualMachineInstanceReady {
			continue
		}
		t := kubevirtv1.VirtualMachineConditionType(c.Type)
		fromVMI[t] = true
		updateVMCondition(status, kubevirtv1.VirtualMachineCondition{Type: t, Status: c.Status, Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime})
	}
	for _, c := range status.Conditions {
		if c.Type != kubevirtv1.VirtualMachineReady && c.Type != kubevirtv1.VirtualMachineFailure && !fromVMI[c.Type] {
			removeVMCondition(status, c.Type)
		}
	}
}

// updateVMCondition is KubeVirt's UpdateCondition: a condition changes only when its status or
// reason does, so that an unchanged state costs no write.
func updateVMCondition(status *kubevirtv1.VirtualMachineStatus, c kubevirtv1.VirtualMachineCondition) {
	for i, have := range status.Conditions {
		if have.Type == c.Type {
			if have.Status != c.Status || have.Reason != c.Reason {
				if c.LastTransitionTime.IsZero() {
					c.LastTransitionTime = metav1.Now()
				}
				status.Conditions[i] = c
			}
			return
		}
	}
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = metav1.Now()
	}
	status.Conditions = append(status.Conditions, c)
}

func removeVMCondition(status *kubevirtv1.VirtualMachineStatus, t kubevirtv1.VirtualMachineConditionType) {
	out := status.Conditions[:0]
	for _, c := range status.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	status.Conditions = out
}

// remove does what Harvester and KubeVirt do when a VM is deleted: Harvester deletes the PVCs
// named in the removedPersistentVolumeClaims annotation (its webhook refuses one another VM still
// uses, and the VM then waits), KubeVirt deletes the VMI; each then drops its finalizer. Secrets
// the VM owns are the garbage collector's (gc.go).
func (r *vmReconciler) remove(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	c := r.sim.c
	if controllerutil.ContainsFinalizer(vm, harvesterVMFinalizer) {
		for _, name := range strings.Split(vm.Annotations[annotationRemovedPVCs], ",") {
			if name = strings.TrimSpace(name); name == "" {
				continue
			}
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: name}}
			if err := client.IgnoreNotFound(c.Delete(ctx, pvc)); err != nil {
				return fmt.Errorf("can't delete PVC %s/%s, err: %w", vm.Namespace, name, err)
			}
		}
		controllerutil.RemoveFinalizer(vm, harvesterVMFinalizer)
		return c.Update(ctx, vm)
	}
	if controllerutil.ContainsFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer) {
		vmi, err := r.getVMI(ctx, vm)
		if err != nil {
			return err
		}
		if vmi != nil {
			r.sim.launchers.Delete(vmi.UID)
			return client.IgnoreNotFound(c.Delete(ctx, vmi))
		}
		r.sim.pools.release(vm.UID)
		r.sim.ipReported.Delete(vm.Namespace + "/" + vm.Name)
		controllerutil.RemoveFinalizer(vm, kubevirtv1.VirtualMachineControllerFinalizer)
		return c.Update(ctx, vm)
	}
	return nil
}

// claimsOf lists the PVCs a VM's template mounts.
func claimsOf(vm *kubevirtv1.VirtualMachine) []string {
	if vm.Spec.Template == nil {
		return nil
	}
	return claimsOfSpec(&vm.Spec.Template.Spec)
}

func claimsOfSpec(spec *kubevirtv1.VirtualMachineInstanceSpec) []string {
	var names []string
	for _, v := range spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			names = append(names, v.PersistentVolumeClaim.ClaimName)
		case v.DataVolume != nil:
			names = append(names, v.DataVolume.Name)
		}
	}
	return names
}

// cloudInitSecrets lists the Secrets a VM reads cloud-init from.
func cloudInitSecrets(vm *kubevirtv1.VirtualMachine) []string {
	if vm.Spec.Template == nil {
		return nil
	}
	var names []string
	for _, v := range vm.Spec.Template.Spec.Volumes {
		if ci := v.CloudInitNoCloud; ci != nil {
			for _, ref := range []*corev1.LocalObjectReference{ci.UserDataSecretRef, ci.NetworkDataSecretRef} {
				if ref != nil && ref.Name != "" {
					names = append(names, ref.Name)
				}
			}
		}
	}
	return names
}

var errNoTemplate = errors.New("VM has no template")

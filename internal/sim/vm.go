package sim

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

const (
	// vmFinalizer is the finalizer Harvester's VM controller puts on VMs to clean up after them.
	vmFinalizer = "harvesterhci.io/VMController.UnsetOwnerOfPVCs"
	// annotationStarted records when a VMI started, to the nanosecond, for the boot timeline.
	annotationStarted = "sim.butler.butlerlabs.dev/started-at"
	// recheck is how often a VM that waits on something outside the simulator is looked at.
	recheck = 500 * time.Millisecond
)

type vmReconciler struct {
	sim      *Simulator
	recorder record.EventRecorder
}

func (r *vmReconciler) setup(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-virtualmachine").
		For(&kubevirtv1.VirtualMachine{}).
		Owns(&kubevirtv1.VirtualMachineInstance{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		Complete(r)
}

func (r *vmReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := r.sim.c
	vm := &kubevirtv1.VirtualMachine{}
	if err := c.Get(ctx, req.NamespacedName, vm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vm.DeletionTimestamp != nil {
		return ctrl.Result{}, r.remove(ctx, vm)
	}
	if !controllerutil.ContainsFinalizer(vm, vmFinalizer) {
		patch := client.MergeFrom(vm.DeepCopy())
		controllerutil.AddFinalizer(vm, vmFinalizer)
		if err := c.Patch(ctx, vm, patch); err != nil {
			return ctrl.Result{}, err
		}
	}
	vmi, err := r.getVMI(ctx, vm)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !wantsRunning(vm) {
		if vmi != nil {
			r.sim.pools.release(vm.UID)
			if err := client.IgnoreNotFound(c.Delete(ctx, vmi)); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, r.setVMStatus(ctx, vm, kubevirtv1.VirtualMachineStatusStopped, false)
	}
	if vmi == nil {
		if vmi, err = r.createVMI(ctx, vm); err != nil {
			return ctrl.Result{}, err
		}
	}
	st, printable, next := r.timeline(ctx, vm, vmi)
	if !equality.Semantic.DeepEqual(vmi.Status, st) {
		patch := client.MergeFrom(vmi.DeepCopy())
		vmi.Status = st
		if err := c.Status().Patch(ctx, vmi, patch); err != nil {
			return ctrl.Result{}, err
		}
		if hasIPv4(st.Interfaces) {
			r.sim.ipReported.LoadOrStore(vmi.Namespace+"/"+vmi.Name, time.Now())
		}
	}
	if err := r.setVMStatus(ctx, vm, printable, st.Phase == kubevirtv1.Running); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

func wantsRunning(vm *kubevirtv1.VirtualMachine) bool {
	if vm.Spec.RunStrategy != nil {
		switch *vm.Spec.RunStrategy {
		case kubevirtv1.RunStrategyAlways, kubevirtv1.RunStrategyRerunOnFailure, kubevirtv1.RunStrategyOnce:
			return true
		}
		return false
	}
	// spec.running is deprecated in favour of spec.runStrategy, but KubeVirt still honours it.
	return ptr.Deref(vm.Spec.Running, false)
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

func (r *vmReconciler) createVMI(ctx context.Context, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name: vm.Name, Namespace: vm.Namespace,
			Annotations: map[string]string{annotationStarted: time.Now().UTC().Format(time.RFC3339Nano)},
		},
	}
	if vm.Spec.Template != nil { // KubeVirt copies the template's labels and annotations
		vmi.Labels = vm.Spec.Template.ObjectMeta.Labels
		for k, v := range vm.Spec.Template.ObjectMeta.Annotations {
			vmi.Annotations[k] = v
		}
		vmi.Spec = vm.Spec.Template.Spec
	}
	if err := controllerutil.SetControllerReference(vm, vmi, r.sim.c.Scheme()); err != nil {
		return nil, err
	}
	if err := r.sim.c.Create(ctx, vmi); err != nil {
		return nil, err
	}
	return vmi, nil
}

// timeline computes the VMI's status from how long it has existed and what it depends on, and
// when to look again.
func (r *vmReconciler) timeline(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) (kubevirtv1.VirtualMachineInstanceStatus, kubevirtv1.VirtualMachinePrintableStatus, time.Duration) {
	st := kubevirtv1.VirtualMachineInstanceStatus{Phase: kubevirtv1.Pending}
	if printable, msg := r.volumesReady(ctx, vmi); msg != "" {
		st.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, string(printable), msg)}
		return st, printable, recheck
	}
	if r.sim.hasFault(vm, FaultUnschedulable) {
		st.Phase = kubevirtv1.Scheduling
		st.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{condition(kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), corev1.ConditionFalse, corev1.PodReasonUnschedulable,
			"0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.")}
		return st, kubevirtv1.VirtualMachineStatusUnschedulable, recheck
	}
	network, prefix, err := r.network(ctx, vm)
	if err != nil {
		st.Phase = kubevirtv1.Scheduled
		st.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, "FailedCreatePodSandBox",
			"Failed to create pod sandbox: plugin type=\"multus\" failed: "+err.Error())}
		return st, kubevirtv1.VirtualMachineStatusStarting, recheck
	}

	boot := r.sim.cfg.BootDelay
	if r.sim.hasFault(vm, FaultSlowBoot) {
		boot = r.sim.cfg.SlowBootDelay
	}
	elapsed := time.Since(startedAt(vmi))
	switch {
	case elapsed < boot/2:
		st.Phase = kubevirtv1.Scheduling
		return st, kubevirtv1.VirtualMachineStatusStarting, boot/2 - elapsed
	case elapsed < boot:
		st.Phase = kubevirtv1.Scheduled
		st.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{condition(kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled), corev1.ConditionTrue, "", "")}
		return st, kubevirtv1.VirtualMachineStatusStarting, boot - elapsed
	}
	st.Phase = kubevirtv1.Running
	st.NodeName = "harvester-node-1"
	st.PhaseTransitionTimestamps = []kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
		{Phase: kubevirtv1.Running, PhaseTransitionTimestamp: metav1.NewTime(startedAt(vmi).Add(boot).Truncate(time.Second))},
	}
	st.Conditions = []kubevirtv1.VirtualMachineInstanceCondition{condition(kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "")}
	mac := macFor(vm.UID)
	// Before the guest agent connects, KubeVirt knows the NIC from the domain only.
	st.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{{Name: "nic-1", MAC: mac, InfoSource: "domain"}}
	if wait := boot + r.sim.cfg.IPDelay - elapsed; wait > 0 {
		return st, kubevirtv1.VirtualMachineStatusRunning, wait
	}
	st.Conditions = append(st.Conditions, condition(kubevirtv1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue, "", ""))
	linkLocal := "fe80::5054:ff:fe" + strings.ReplaceAll(mac[9:], ":", "")[:2] + ":" + strings.ReplaceAll(mac[9:], ":", "")[2:]
	nic := kubevirtv1.VirtualMachineInstanceNetworkInterface{
		Name: "nic-1", InterfaceName: "eth0", MAC: mac, InfoSource: "domain, guest-agent", QueueCount: 1,
		IP: linkLocal, IPs: []string{linkLocal},
	}
	if !r.sim.hasFault(vm, FaultNoDHCP) {
		if ip, err := r.sim.pools.allocate(network, prefix, vm.UID); err == nil {
			nic.IP = ip.String()
			nic.IPs = []string{ip.String(), "2001:db8:" + fmt.Sprintf("%x", ip.As4()[2]) + "::" + fmt.Sprintf("%x", ip.As4()[3]), linkLocal}
		} else {
			r.recorder.Event(vm, corev1.EventTypeWarning, "DHCPExhausted", err.Error())
		}
	}
	st.Interfaces = []kubevirtv1.VirtualMachineInstanceNetworkInterface{
		{InterfaceName: "lo", IP: "127.0.0.1", IPs: []string{"127.0.0.1", "::1"}, InfoSource: "guest-agent"},
		nic,
	}
	return st, kubevirtv1.VirtualMachineStatusRunning, 0
}

func hasIPv4(ifaces []kubevirtv1.VirtualMachineInstanceNetworkInterface) bool {
	for _, i := range ifaces {
		if a, err := netip.ParseAddr(i.IP); err == nil && a.Is4() && !a.IsLoopback() {
			return true
		}
	}
	return false
}

func condition(t kubevirtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason, message string) kubevirtv1.VirtualMachineInstanceCondition {
	return kubevirtv1.VirtualMachineInstanceCondition{Type: t, Status: status, Reason: reason, Message: message}
}

func startedAt(vmi *kubevirtv1.VirtualMachineInstance) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, vmi.Annotations[annotationStarted]); err == nil {
		return t
	}
	return vmi.CreationTimestamp.Time
}

// volumesReady reports why the VMI cannot start yet because of its PVCs, if it cannot.
func (r *vmReconciler) volumesReady(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) (kubevirtv1.VirtualMachinePrintableStatus, string) {
	for _, v := range vmi.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
		switch {
		case apierrors.IsNotFound(err):
			return kubevirtv1.VirtualMachineStatusPvcNotFound, fmt.Sprintf("PVC %s/%s does not exist", vmi.Namespace, v.PersistentVolumeClaim.ClaimName)
		case err != nil:
			return kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding, err.Error()
		case pvc.Status.Phase != corev1.ClaimBound:
			return kubevirtv1.VirtualMachineStatusWaitingForVolumeBinding, fmt.Sprintf("PVC %s/%s is not bound", pvc.Namespace, pvc.Name)
		}
	}
	return "", ""
}

// network returns the VM's first multus network and its address range.
func (r *vmReconciler) network(ctx context.Context, vm *kubevirtv1.VirtualMachine) (string, netip.Prefix, error) {
	if vm.Spec.Template == nil {
		return "", netip.Prefix{}, errors.New("VM has no template")
	}
	for _, n := range vm.Spec.Template.Spec.Networks {
		if n.Multus == nil {
			continue
		}
		ns, name, ok := strings.Cut(n.Multus.NetworkName, "/")
		if !ok {
			ns, name = vm.Namespace, n.Multus.NetworkName
		}
		prefix, err := r.sim.networkCIDR(ctx, ns, name)
		return ns + "/" + name, prefix, err
	}
	// Pod network only: KubeVirt's masquerade range.
	return "pod", netip.MustParsePrefix("10.0.2.0/24"), nil
}

func (r *vmReconciler) setVMStatus(ctx context.Context, vm *kubevirtv1.VirtualMachine, printable kubevirtv1.VirtualMachinePrintableStatus, ready bool) error {
	want := vm.Status.DeepCopy()
	want.PrintableStatus = printable
	want.Ready = ready
	want.Created = printable != kubevirtv1.VirtualMachineStatusStopped
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	want.Conditions = []kubevirtv1.VirtualMachineCondition{{Type: kubevirtv1.VirtualMachineReady, Status: readyStatus}}
	if equality.Semantic.DeepEqual(&vm.Status, want) {
		return nil
	}
	patch := client.MergeFrom(vm.DeepCopy())
	vm.Status = *want
	return client.IgnoreNotFound(r.sim.c.Status().Patch(ctx, vm, patch))
}

// remove does what Harvester does when a VM is deleted: the VMI goes, the PVCs named in the
// removedPersistentVolumeClaims annotation go, and Secrets owned by the VM are collected.
func (r *vmReconciler) remove(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	c := r.sim.c
	if !controllerutil.ContainsFinalizer(vm, vmFinalizer) {
		return nil
	}
	r.sim.pools.release(vm.UID)
	r.sim.ipReported.Delete(vm.Namespace + "/" + vm.Name)
	vmi := &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: vm.Name}}
	if err := client.IgnoreNotFound(c.Delete(ctx, vmi)); err != nil {
		return err
	}
	for _, name := range strings.Split(vm.Annotations[harvester.AnnotationRemovedPVCs], ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: name}}
		if err := client.IgnoreNotFound(c.Delete(ctx, pvc)); err != nil {
			return err
		}
	}
	if err := collectOwned(ctx, c, vm); err != nil {
		return err
	}
	patch := client.MergeFrom(vm.DeepCopy())
	controllerutil.RemoveFinalizer(vm, vmFinalizer)
	return client.IgnoreNotFound(c.Patch(ctx, vm, patch))
}

// collectOwned deletes the Secrets whose owner is the VM, as the garbage collector would (no
// kube-controller-manager runs next to the simulated Harvester).
func collectOwned(ctx context.Context, c client.Client, vm *kubevirtv1.VirtualMachine) error {
	secrets := &corev1.SecretList{}
	if err := c.List(ctx, secrets, client.InNamespace(vm.Namespace)); err != nil {
		return err
	}
	for i := range secrets.Items {
		for _, ref := range secrets.Items[i].OwnerReferences {
			if ref.UID == vm.UID {
				if err := client.IgnoreNotFound(c.Delete(ctx, &secrets.Items[i])); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

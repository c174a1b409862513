package sim

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/uuid"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// launcher is a VMI's virt-launcher pod, played rather than created: no kubelet runs next to the
// simulated Harvester. virt-controller creates it once the VMI's volumes are ready to attach, the
// scheduler places it once its PVCs are bound on a node that fits it, the kubelet starts it once it
// can mount its cloud-init Secret and attach it to its network; the guest boots from then on.
type launcher struct {
	pod types.NamespacedName
	uid types.UID
	// node is where the scheduler has placed the pod ("" until it has).
	node string
	// started is when the kubelet started the pod's containers (zero until it could).
	started time.Time
	// reported is the last Warning given about the pod, so that each new one is one event.
	reported string
	// devices are the device resources the pod requests (deviceRequests), which it takes on its
	// node once bound.
	devices map[string]int64
}

// launcherOf returns the VMI's launcher pod, nil until virt-controller has created it.
func (s *Simulator) launcherOf(vmi *kubevirtv1.VirtualMachineInstance) *launcher {
	if l, ok := s.launchers.Load(vmi.UID); ok {
		return l.(*launcher)
	}
	return nil
}

// object is the pod as events refer to it.
func (l *launcher) object() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: l.pod.Namespace, Name: l.pod.Name, UID: l.uid}}
}

// warn records a Warning event about the pod as component would, once per distinct problem.
func (l *launcher) warn(s *Simulator, component, reason, message string) {
	if key := reason + ": " + message; l.reported != key {
		l.reported = key
		s.event(component, l.object(), corev1.EventTypeWarning, reason, message)
	}
}

// lifecycle computes the VMI's status as virt-controller's updateStatus would from the launcher
// pod's progress (pkg/virt-controller/watch/vmi/lifecycle.go), and when to look again.
func (r *vmReconciler) lifecycle(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) (*kubevirtv1.VirtualMachineInstanceStatus, time.Duration) {
	st := vmi.Status.DeepCopy()
	now := time.Now()
	podScheduled := kubevirtv1.VirtualMachineInstanceConditionType(corev1.PodScheduled)
	l := r.sim.launcherOf(vmi)
	if l == nil {
		// The pod is created only once every volume is ready to attach (areDataVolumesReady).
		if missing := r.missingClaim(ctx, vmi); missing != "" {
			msg := fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", vmi.Namespace, missing)
			if c := vmiCondition(vmi, kubevirtv1.VirtualMachineInstanceSynchronized); c.Message != msg {
				r.sim.event(componentKubeVirt, vmi, corev1.EventTypeNormal, reasonFailedPVCNotFound, msg)
			}
			setPhase(st, kubevirtv1.Pending, now)
			updateVMICondition(st, kubevirtv1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse, reasonFailedPVCNotFound, msg)
			// A Pending VMI whose PVC is missing gets PodScheduled=False with the sync error.
			removeVMICondition(st, podScheduled)
			updateVMICondition(st, podScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable, msg)
			updateVMICondition(st, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, kubevirtv1.PodNotExistsReason, msgPodNotExists)
			return st, recheck
		}
		setPhase(st, kubevirtv1.Pending, now)
		removeVMICondition(st, kubevirtv1.VirtualMachineInstanceSynchronized)
		removeVMICondition(st, podScheduled)
		updateVMICondition(st, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, kubevirtv1.PodNotExistsReason, msgPodNotExists)
		if !r.volumesPopulated(ctx, vmi) {
			// "Delaying pod creation while DataVolume populates"
			return st, recheck
		}
		state, ready, err := r.stateClaim(ctx, vmi)
		if state != nil {
			withStateVolume(st, state)
		}
		if err != nil || !ready {
			// "Delaying pod creation while backend storage populates"
			return st, recheck
		}
		l = &launcher{pod: types.NamespacedName{Namespace: vmi.Namespace, Name: "virt-launcher-" + vmi.Name + "-" + rand.String(5)}, uid: uuid.NewUUID(), devices: deviceRequests(&vmi.Spec)}
		r.sim.launchers.Store(vmi.UID, l)
		r.sim.event(componentKubeVirt, vmi, corev1.EventTypeNormal, "SuccessfulCreate", "Created virtual machine pod "+l.pod.Name)
		// The pod informer sees it a moment later: the VMI moves on at the next pass.
		return st, 10 * time.Millisecond
	}

	if st.Phase == kubevirtv1.Pending || st.Phase == "" {
		setPhase(st, kubevirtv1.Scheduling, now)
		st.ActivePods = map[types.UID]string{l.uid: ""}
	}
	if l.node == "" {
		why, err := r.placeLauncher(ctx, vm, vmi, l)
		if err != nil {
			return st, recheck // the scheduler tries again
		}
		if why != "" {
			l.warn(r.sim, componentScheduler, "FailedScheduling", why)
			// KubeVirt copies the pod's PodScheduled=False condition once and keeps it.
			if vmiCondition(vmi, podScheduled).Status == "" {
				updateVMICondition(st, podScheduled, corev1.ConditionFalse, corev1.PodReasonUnschedulable, why)
			}
			updateVMICondition(st, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, kubevirtv1.GuestNotRunningReason, msgGuestNotRunning)
			return st, recheck
		}
		l.reported = ""
		r.sim.event(componentScheduler, l.object(), corev1.EventTypeNormal, "Scheduled", fmt.Sprintf("Successfully assigned %s to %s", l.pod, l.node))
	}
	removeVMICondition(st, podScheduled)
	st.ActivePods = map[types.UID]string{l.uid: l.node}
	if l.started.IsZero() {
		if component, reason, msg := r.cannotStart(ctx, vm, vmi); reason != "" {
			l.warn(r.sim, component, reason, msg)
			updateVMICondition(st, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, kubevirtv1.GuestNotRunningReason, msgGuestNotRunning)
			return st, recheck
		}
		l.started = now
	}

	boot := r.sim.cfg.BootDelay
	if r.sim.hasFault(vm, FaultSlowBoot) {
		boot = r.sim.cfg.SlowBootDelay
	}
	elapsed := now.Sub(l.started)
	switch {
	case elapsed < boot/2:
		// The pod's containers are starting.
		updateVMICondition(st, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, kubevirtv1.GuestNotRunningReason, msgGuestNotRunning)
		return st, boot/2 - elapsed
	case elapsed < boot:
		// The pod is ready: virt-controller hands the VMI to virt-handler on the node.
		setPhase(st, kubevirtv1.Scheduled, now)
		st.NodeName = l.node
		updateVMICondition(st, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionFalse, kubevirtv1.GuestNotRunningReason, msgGuestNotRunning)
		return st, boot - elapsed
	}
	setPhase(st, kubevirtv1.Running, now)
	st.NodeName = l.node
	// Running: Ready mirrors the pod's Ready condition, which has no reason or message.
	updateVMICondition(st, kubevirtv1.VirtualMachineInstanceReady, corev1.ConditionTrue, "", "")
	updateVMICondition(st, kubevirtv1.VirtualMachineInstanceIsMigratable, corev1.ConditionTrue, "", "")
	next := r.guestAgent(ctx, vm, st, boot+r.sim.cfg.IPDelay-elapsed)
	return st, next
}

// guestAgent fills the interfaces as KubeVirt reports them, one entry per NIC: from the domain at
// first, and with the guest agent's addresses after the IP delay. The guest configures its NICs as
// cloud-init does (guestNetworkConfig): by the network configuration it was given, NICs matched by
// MAC (or by the name the guest gives them), DHCP where it says so and the static addresses it
// lists; with none, DHCP on its first NIC only. It returns when to look again (0: nothing to wait
// for).
func (r *vmReconciler) guestAgent(ctx context.Context, vm *kubevirtv1.VirtualMachine, st *kubevirtv1.VirtualMachineInstanceStatus, wait time.Duration) time.Duration {
	nics := vmNICs(vm)
	if wait > 0 {
		// Before the guest agent connects, KubeVirt knows the NICs from the domain only.
		st.Interfaces = nil
		for _, nic := range nics {
			st.Interfaces = append(st.Interfaces, kubevirtv1.VirtualMachineInstanceNetworkInterface{Name: nic.name, MAC: nic.mac, InfoSource: "domain"})
		}
		return wait
	}
	updateVMICondition(st, kubevirtv1.VirtualMachineInstanceAgentConnected, corev1.ConditionTrue, "", "")
	if hasIPv4(st.Interfaces) {
		return 0 // the leases and addresses are kept
	}
	config, err := r.guestNetworkConfig(ctx, vm)
	if err != nil {
		r.sim.event(componentKubeVirt, vm, corev1.EventTypeWarning, "GuestNetworkConfig", err.Error())
	}
	if r.sim.hasFault(vm, FaultIgnoreNetworkConfig) {
		config = guestNetwork{} // as if none were given: DHCP on the first NIC
	}
	var out []kubevirtv1.VirtualMachineInstanceNetworkInterface
	for i, nic := range nics {
		guestName := fmt.Sprintf("eth%d", i)
		hex := strings.ReplaceAll(nic.mac[9:], ":", "")
		linkLocal := "fe80::5054:ff:fe" + hex[:2] + ":" + hex[2:]
		entry := kubevirtv1.VirtualMachineInstanceNetworkInterface{
			Name: nic.name, InterfaceName: guestName, MAC: nic.mac, InfoSource: "domain, guest-agent", QueueCount: 1,
		}
		conf, configured := config.forNIC(i, nic.mac, guestName)
		var ips []string
		for _, a := range conf.addresses {
			ips = append(ips, a.Addr().String())
		}
		if conf.dhcp4 && !r.sim.hasFault(vm, FaultNoDHCP) {
			network, prefix, err := r.nicNetwork(ctx, vm, nic.network)
			if err != nil {
				return recheck
			}
			if ip, err := r.sim.pools.allocate(network, prefix, vm.UID); err == nil {
				ips = append(ips, ip.String(), "2001:db8:"+fmt.Sprintf("%x", ip.As4()[2])+"::"+fmt.Sprintf("%x", ip.As4()[3]))
			} else {
				r.sim.event(componentKubeVirt, vm, corev1.EventTypeWarning, "DHCPExhausted", err.Error())
			}
		}
		if configured || i == 0 {
			// A link the guest brings up has its link-local address; one it leaves down has none.
			ips = append(ips, linkLocal)
		}
		if len(ips) > 0 {
			entry.IP, entry.IPs = ips[0], ips
		}
		out = append(out, entry)
	}
	// The guest agent also reports the guest's loopback, which KubeVirt leaves out of the VMI
	// (virt-launcher's agent poller, convertToInterfaces, skips "lo"; so since v0.12.0).
	st.Interfaces = out
	return 0
}

// simNIC is one NIC of a VM as KubeVirt reports it in the VMI's status.interfaces: under the name
// the VM's spec gives the interface and its network (kubevirt.io/api core/v1
// VirtualMachineInstanceNetworkInterface.Name), with the MAC address the spec gives (Harvester's
// mutator, or the provider, fills it in), else one KubeVirt would generate.
type simNIC struct {
	name, mac string
	// network is the Multus network's name ("" for the pod network).
	network string
}

// vmNICs are the VM's NICs, in the order of its spec's interfaces (an interface and its network
// share their name; a spec that lists networks only gets an interface for each, and one that lists
// neither KubeVirt's default pod network).
func vmNICs(vm *kubevirtv1.VirtualMachine) []simNIC {
	if vm.Spec.Template == nil {
		return []simNIC{{name: defaultNICName, mac: macFor(vm.UID)}}
	}
	spec := vm.Spec.Template.Spec
	networks := map[string]string{}
	var names, macs []string
	for _, n := range spec.Networks {
		if n.Multus != nil {
			networks[n.Name] = n.Multus.NetworkName
		}
		names, macs = append(names, n.Name), append(macs, "")
	}
	if ifaces := spec.Domain.Devices.Interfaces; len(ifaces) > 0 {
		names, macs = nil, nil
		for _, iface := range ifaces {
			names, macs = append(names, iface.Name), append(macs, iface.MacAddress)
		}
	}
	if len(names) == 0 {
		return []simNIC{{name: defaultNICName, mac: macFor(vm.UID)}}
	}
	var out []simNIC
	for i, name := range names {
		mac := macs[i]
		if mac == "" {
			mac = macFor(types.UID(fmt.Sprintf("%s/%d", vm.UID, i)))
			if i == 0 {
				mac = macFor(vm.UID)
			}
		}
		out = append(out, simNIC{name: name, mac: strings.ToLower(mac), network: networks[name]})
	}
	return out
}

// missingClaim names a PVC the VMI mounts that does not exist ("" if none).
func (r *vmReconciler) missingClaim(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) string {
	for _, name := range claimsOfSpec(&vmi.Spec) {
		err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: name}, &corev1.PersistentVolumeClaim{})
		if apierrors.IsNotFound(err) {
			return name
		}
	}
	return ""
}

// volumesPopulated is CDI's IsSucceededOrPendingPopulation for each PVC the VMI mounts: a PVC a
// DataVolume owns is ready once the DataVolume has succeeded; any other PVC is taken as populated,
// bound or not (the scheduler waits for it to bind).
func (r *vmReconciler) volumesPopulated(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) bool {
	for _, name := range claimsOfSpec(&vmi.Spec) {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: name}, pvc); err != nil {
			return false
		}
		owner := metav1.GetControllerOf(pvc)
		if owner == nil || owner.Kind != DataVolumeGVK.Kind {
			continue
		}
		dv, err := r.sim.getDataVolume(ctx, pvc.Namespace, owner.Name)
		if err != nil || dataVolumePhase(dv) != dataVolumeSucceeded {
			return false
		}
	}
	return true
}

// claimsBound reports whether every PVC the VMI mounts is bound.
func (r *vmReconciler) claimsBound(ctx context.Context, vmi *kubevirtv1.VirtualMachineInstance) bool {
	for _, name := range claimsOfSpec(&vmi.Spec) {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: name}, pvc); err != nil || pvc.Status.Phase != corev1.ClaimBound {
			return false
		}
	}
	return true
}

// cannotStart says why the kubelet cannot start the scheduled pod, as it reports it: the
// cloud-init Secret cannot be mounted (KubeVirt mounts it as volume <volume>-udata or -ndata), or
// multus cannot attach the pod to its network.
func (r *vmReconciler) cannotStart(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) (component, reason, message string) {
	for _, v := range vmi.Spec.Volumes {
		ci := v.CloudInitNoCloud
		if ci == nil {
			continue
		}
		for suffix, ref := range map[string]*corev1.LocalObjectReference{"-udata": ci.UserDataSecretRef, "-ndata": ci.NetworkDataSecretRef} {
			if ref == nil || ref.Name == "" {
				continue
			}
			if err := r.sim.c.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: ref.Name}, &corev1.Secret{}); apierrors.IsNotFound(err) {
				return componentKubelet, "FailedMount", fmt.Sprintf("MountVolume.SetUp failed for volume %q : secret %q not found", v.Name+suffix, ref.Name)
			}
		}
	}
	// Multus attaches every network of the pod, and fails the sandbox on the first it cannot.
	for _, nic := range vmNICs(vm) {
		if _, _, err := r.nicNetwork(ctx, vm, nic.network); err != nil {
			return componentKubelet, "FailedCreatePodSandBox", fmt.Sprintf(
				"Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox %q: plugin type=\"multus-shim\" name=\"multus-cni-network\" failed (add): %v",
				strings.ReplaceAll(string(uuid.NewUUID()), "-", ""), err)
		}
	}
	return "", "", ""
}

// nicNetwork is the name and address range of a NIC's Multus network ("" for the pod network:
// KubeVirt's masquerade range).
func (r *vmReconciler) nicNetwork(ctx context.Context, vm *kubevirtv1.VirtualMachine, multus string) (string, netip.Prefix, error) {
	if vm.Spec.Template == nil {
		return "", netip.Prefix{}, errNoTemplate
	}
	if multus == "" {
		return "pod", netip.MustParsePrefix("10.0.2.0/24"), nil
	}
	ns, name, ok := strings.Cut(multus, "/")
	if !ok {
		ns, name = vm.Namespace, multus
	}
	prefix, err := r.sim.networkCIDR(ctx, ns, name)
	return ns + "/" + name, prefix, err
}

// setPhase changes the VMI's phase and records the transition, as KubeVirt does.
func setPhase(st *kubevirtv1.VirtualMachineInstanceStatus, phase kubevirtv1.VirtualMachineInstancePhase, now time.Time) {
	if st.Phase == phase {
		return
	}
	st.Phase = phase
	st.PhaseTransitionTimestamps = append(st.PhaseTransitionTimestamps, kubevirtv1.VirtualMachineInstancePhaseTransitionTimestamp{
		Phase: phase, PhaseTransitionTimestamp: metav1.NewTime(now.Truncate(time.Second)),
	})
}

// vmiCondition returns the VMI's condition of type t (the zero condition if it has none).
func vmiCondition(vmi *kubevirtv1.VirtualMachineInstance, t kubevirtv1.VirtualMachineInstanceConditionType) kubevirtv1.VirtualMachineInstanceCondition {
	if vmi != nil {
		for _, c := range vmi.Status.Conditions {
			if c.Type == t {
				return c
			}
		}
	}
	return kubevirtv1.VirtualMachineInstanceCondition{}
}

// updateVMICondition is KubeVirt's UpdateCondition: a condition is replaced only when its status
// or reason changes, so that an unchanged state costs no write.
func updateVMICondition(st *kubevirtv1.VirtualMachineInstanceStatus, t kubevirtv1.VirtualMachineInstanceConditionType, status corev1.ConditionStatus, reason, message string) {
	c := kubevirtv1.VirtualMachineInstanceCondition{Type: t, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}
	for i, have := range st.Conditions {
		if have.Type == t {
			if have.Status != status || have.Reason != reason {
				st.Conditions[i] = c
			}
			return
		}
	}
	st.Conditions = append(st.Conditions, c)
}

func removeVMICondition(st *kubevirtv1.VirtualMachineInstanceStatus, t kubevirtv1.VirtualMachineInstanceConditionType) {
	var out []kubevirtv1.VirtualMachineInstanceCondition
	for _, c := range st.Conditions {
		if c.Type != t {
			out = append(out, c)
		}
	}
	st.Conditions = out
}

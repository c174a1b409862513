package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// Harvester's nodes are Node objects on the API server, registered when the simulator starts as
// kubelets register theirs and labelled as the kubelet and KubeVirt's virt-handler label them.
// Tests and users label them further (a zone, a rack) as an administrator would, and the
// scheduler places each virt-launcher pod by its node selection. What else the scheduler weighs
// (resources, taints, cordons, spreading) is not played: the first node that fits, by name,
// takes the pod, and the unschedulable fault stands for nodes without room.

// defaultNodes is how many nodes a simulated Harvester has unless Config.Nodes says otherwise: the
// smallest highly available Harvester cluster.
const defaultNodes = 3

// nodeName is the name of the i-th node (from 1).
func nodeName(i int) string { return fmt.Sprintf("harvester-node-%d", i) }

// registerNodes creates the cluster's nodes that do not exist yet, with the labels the kubelet
// (kubernetes.io/hostname, os, arch) and virt-handler (kubevirt.io/schedulable, once it runs on
// the node) give them. Labels added since are left alone.
func (s *Simulator) registerNodes(ctx context.Context) error {
	for i := 1; i <= s.cfg.Nodes; i++ {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{
			corev1.LabelHostname:       nodeName(i),
			corev1.LabelOSStable:       "linux",
			corev1.LabelArchStable:     "amd64",
			kubevirtv1.NodeSchedulable: "true",
		}}}
		if err := s.c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("register node %s: %w", node.Name, err)
		}
	}
	return nil
}

// Reasons kube-scheduler gives per node, and what its preemption then says of such a node
// (kubernetes pkg/scheduler/framework/plugins: nodeaffinity ErrReasonPod, noderesources'
// "Insufficient <resource>"; preemption's "Preemption is not helpful for scheduling" for a node
// no eviction can make fit, "No preemption victims found for incoming pod" otherwise).
const (
	reasonNodeSelection = "node(s) didn't match Pod's node affinity/selector"
	reasonNoMemory      = "Insufficient memory"
	preemptionUseless   = "Preemption is not helpful for scheduling"
	preemptionNoVictims = "No preemption victims found for incoming pod"
)

// placeLauncher is the scheduler's decision for the VMI's virt-launcher pod: the node it binds the
// pod to, or ("", why) in the scheduler's words when it cannot. Its immediate-binding PVCs must
// be bound first (volume binding runs before the node filters); then the pod requires what
// virt-controller's template gives it: the VMI's nodeSelector plus kubevirt.io/schedulable=true,
// and the VMI's affinity (kubevirt pkg/virt-controller/services/template.go,
// nodeselectorrenderer.go); kube-scheduler's NodeAffinity filter judges both.
func (r *vmReconciler) placeLauncher(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance) (node, why string, err error) {
	nodes := &corev1.NodeList{}
	if err := r.sim.c.List(ctx, nodes); err != nil {
		return "", "", err
	}
	if !r.claimsBound(ctx, vmi) {
		return "", unboundClaimsMessage(len(nodes.Items)), nil
	}
	selector := map[string]string{kubevirtv1.NodeSchedulable: "true"}
	maps.Copy(selector, vmi.Spec.NodeSelector)
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: selector, Affinity: vmi.Spec.Affinity}}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	reasons := map[string]int{}
	for i := range nodes.Items {
		fits, err := required.Match(&nodes.Items[i])
		switch {
		case err != nil:
			return "", "", err
		case !fits:
			reasons[reasonNodeSelection]++
		case r.sim.hasFault(vm, FaultUnschedulable):
			reasons[reasonNoMemory]++
		default:
			return nodes.Items[i].Name, "", nil
		}
	}
	return "", fitError(len(nodes.Items), reasons), nil
}

// fitError is kube-scheduler's FailedScheduling message (FitError.Error, framework/types.go): the
// reasons counted per node, sorted, then what preemption found.
func fitError(total int, reasons map[string]int) string {
	var filtered, preemption []string
	preempt := map[string]int{}
	for reason, n := range reasons {
		filtered = append(filtered, fmt.Sprintf("%d %s", n, reason))
		if reason == reasonNodeSelection {
			preempt[preemptionUseless] += n
		} else {
			preempt[preemptionNoVictims] += n
		}
	}
	for reason, n := range preempt {
		preemption = append(preemption, fmt.Sprintf("%d %s", n, reason))
	}
	slices.Sort(filtered)
	slices.Sort(preemption)
	return fmt.Sprintf("0/%d nodes are available: %s. preemption: 0/%d nodes are available: %s.",
		total, strings.Join(filtered, ", "), total, strings.Join(preemption, ", "))
}

// unboundClaimsMessage is the scheduler's message while a pod's immediate-binding PVC is unbound:
// the volume binding plugin's PreFilter stops the pod before any node is looked at, and preemption
// cannot help on any.
func unboundClaimsMessage(total int) string {
	return fmt.Sprintf("0/%d nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/%d nodes are available: %d %s.",
		total, total, total, preemptionUseless)
}

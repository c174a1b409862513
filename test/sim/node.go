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
	reasonInsufficient  = "Insufficient "
	reasonNoMemory      = reasonInsufficient + "memory"
	preemptionUseless   = "Preemption is not helpful for scheduling"
	preemptionNoVictims = "No preemption victims found for incoming pod"
)

// placeLauncher is the scheduler's decision for the VMI's virt-launcher pod l: it binds the pod to
// a node (l.node), or says why it cannot in the scheduler's words. Its immediate-binding PVCs must
// be bound first (volume binding runs before the node filters); then the pod requires what
// virt-controller's template gives it: the VMI's nodeSelector plus kubevirt.io/schedulable=true,
// and the VMI's affinity (kubevirt pkg/virt-controller/services/template.go,
// nodeselectorrenderer.go), which kube-scheduler's NodeAffinity filter judges; and its requests,
// of which the simulator weighs the device resources (one per hostDevices and gpus entry) against
// what the node advertises less what the pods already bound there take (the NodeResourcesFit
// filter). Placements are made one at a time, as the scheduler binds one pod after another, so
// that two pods never take the same free device.
func (r *vmReconciler) placeLauncher(ctx context.Context, vm *kubevirtv1.VirtualMachine, vmi *kubevirtv1.VirtualMachineInstance, l *launcher) (why string, err error) {
	nodes := &corev1.NodeList{}
	if err := r.sim.c.List(ctx, nodes); err != nil {
		return "", err
	}
	if !r.claimsBound(ctx, vmi) {
		return unboundClaimsMessage(len(nodes.Items)), nil
	}
	selector := map[string]string{kubevirtv1.NodeSchedulable: "true"}
	maps.Copy(selector, vmi.Spec.NodeSelector)
	pod := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: selector, Affinity: vmi.Spec.Affinity}}
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	slices.SortFunc(nodes.Items, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	r.sim.placing.Lock()
	defer r.sim.placing.Unlock()
	var reasons [][]string // per node that does not fit
	for i := range nodes.Items {
		node := &nodes.Items[i]
		fits, err := required.Match(node)
		switch {
		case err != nil:
			return "", err
		case !fits:
			reasons = append(reasons, []string{reasonNodeSelection})
			continue
		}
		var insufficient []string
		if r.sim.hasFault(vm, FaultUnschedulable) {
			insufficient = append(insufficient, reasonNoMemory)
		}
		used := r.sim.devicesBoundTo(node.Name)
		for _, name := range slices.Sorted(maps.Keys(l.devices)) {
			free := node.Status.Allocatable[corev1.ResourceName(name)]
			if free.Value()-used[name] < l.devices[name] {
				insufficient = append(insufficient, reasonInsufficient+name)
			}
		}
		if len(insufficient) > 0 {
			reasons = append(reasons, insufficient)
			continue
		}
		l.node = node.Name
		return "", nil
	}
	return fitError(len(nodes.Items), reasons), nil
}

// devicesBoundTo counts the device resources the launcher pods bound to node take. The caller
// holds s.placing, under which every launcher's node is set.
func (s *Simulator) devicesBoundTo(node string) map[string]int64 {
	used := map[string]int64{}
	s.launchers.Range(func(_, v any) bool {
		if l := v.(*launcher); l.node == node {
			for name, n := range l.devices {
				used[name] += n
			}
		}
		return true
	})
	return used
}

// fitError is kube-scheduler's FailedScheduling message (FitError.Error, framework/types.go): the
// reasons of the nodes that do not fit, counted and sorted, then what preemption found per node:
// nothing helps a node whose node selection does not match, and no victims are found on one that
// lacks room (the simulator's pods are all of one priority).
func fitError(total int, perNode [][]string) string {
	reasons, preempt := map[string]int{}, map[string]int{}
	for _, node := range perNode {
		for _, reason := range node {
			reasons[reason]++
		}
		if slices.Contains(node, reasonNodeSelection) {
			preempt[preemptionUseless]++
		} else {
			preempt[preemptionNoVictims]++
		}
	}
	var filtered, preemption []string
	for reason, n := range reasons {
		filtered = append(filtered, fmt.Sprintf("%d %s", n, reason))
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

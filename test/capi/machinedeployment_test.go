package capi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

var (
	machineDeploymentGVK  = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"}
	machineHealthCheckGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineHealthCheck"}
)

// TestClusterAPIMachineDeployment runs a MachineDeployment of 3 (beside one control plane Machine)
// through the real Cluster API core manager, with a second API server as the tenant cluster, where the test plays the kubelet and
// Harvester's cloud provider: it registers a Node named after each running VM, with the VM's
// providerID, and deletes the Node of a VM that is gone. The Machines reach Running with their
// nodeRef and addresses; scaling to 1 deletes exactly two VMs with their disks and Secrets; a VM
// deleted on Harvester behind Cluster API's back is reported and, with a MachineHealthCheck,
// replaced; deleting the Cluster leaves Harvester empty.
func TestClusterAPIMachineDeployment(t *testing.T) {
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	tenantEnv := &envtest.Environment{}
	tenantCfg, err := tenantEnv.Start()
	if err != nil {
		t.Fatalf("start the tenant API server: %v", err)
	}
	t.Cleanup(func() { _ = tenantEnv.Stop() })
	tenant, err := client.New(tenantCfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.must(c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-kubeconfig", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": "tenant"}},
		Type:       "cluster.x-k8s.io/secret",
		Data:       map[string][]byte{"value": sim.KubeconfigFor(tenantCfg)},
	}))
	kubeletCtx, stopKubelet := context.WithCancel(ctx)
	defer stopKubelet()
	go playKubelet(kubeletCtx, hv.Client, tenant)

	cluster := w.tenantCluster()
	// One control plane machine: Cluster API counts the control plane initialized once it has a
	// Node (this Cluster has no control plane provider), and remediates only then.
	w.must(c.Create(ctx, &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-cp-0"},
		Spec: infrav1.HarvesterMachineSpec{CPU: 2, Memory: resource.MustParse("2Gi"), RootDisk: infrav1.RootDisk{Size: resource.MustParse("10Gi")}}}))
	cp := capiObject(machineGVK, ns, "tenant-cp-0", map[string]any{
		"clusterName":       "tenant",
		"bootstrap":         map[string]any{"dataSecretName": "tenant-bootstrap"},
		"infrastructureRef": map[string]any{"apiGroup": infrav1.GroupVersion.Group, "kind": "HarvesterMachine", "name": "tenant-cp-0"},
	})
	cp.SetLabels(map[string]string{"cluster.x-k8s.io/cluster-name": "tenant", "cluster.x-k8s.io/control-plane": ""})
	w.must(c.Create(ctx, cp))
	w.must(c.Create(ctx, &infrav1.HarvesterMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-md-0"},
		Spec: infrav1.HarvesterMachineTemplateSpec{Template: infrav1.HarvesterMachineTemplateResource{Spec: infrav1.HarvesterMachineSpec{
			CPU: 2, Memory: resource.MustParse("2Gi"), RootDisk: infrav1.RootDisk{Size: resource.MustParse("10Gi")}}}}}))
	// Written as Cluster API's webhooks would default it (they are not called in these tests).
	labels := map[string]any{"cluster.x-k8s.io/cluster-name": "tenant", "cluster.x-k8s.io/deployment-name": "tenant-md-0"}
	md := capiObject(machineDeploymentGVK, ns, "tenant-md-0", map[string]any{
		"clusterName": "tenant",
		"replicas":    int64(3),
		"selector":    map[string]any{"matchLabels": labels},
		"rollout": map[string]any{"strategy": map[string]any{"type": "RollingUpdate",
			"rollingUpdate": map[string]any{"maxSurge": int64(1), "maxUnavailable": int64(0)}}},
		"template": map[string]any{
			"metadata": map[string]any{"labels": labels},
			"spec": map[string]any{
				"clusterName":       "tenant",
				"bootstrap":         map[string]any{"dataSecretName": "tenant-bootstrap"},
				"infrastructureRef": map[string]any{"apiGroup": infrav1.GroupVersion.Group, "kind": "HarvesterMachineTemplate", "name": "tenant-md-0"},
			},
		},
	})
	w.must(c.Create(ctx, md))

	running := func(want int) map[string]string {
		t.Helper()
		var nodes map[string]string
		waitFor(ctx, t, w.capi, fmt.Sprintf("%d Machines Running with their Node", want), func() error {
			machines := &unstructured.UnstructuredList{}
			machines.SetGroupVersionKind(machineGVK.GroupVersion().WithKind("MachineList"))
			w.must(c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{"cluster.x-k8s.io/deployment-name": "tenant-md-0"}))
			nodes = map[string]string{}
			for _, m := range machines.Items {
				phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
				node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
				addresses, _, _ := unstructured.NestedSlice(m.Object, "status", "addresses")
				if phase != "Running" || node == "" || len(addresses) == 0 || m.GetDeletionTimestamp() != nil {
					return fmt.Errorf("Machine %s: phase %q, nodeRef %q, %d addresses", m.GetName(), phase, node, len(addresses))
				}
				nodes[m.GetName()] = node
			}
			if len(nodes) != want {
				return fmt.Errorf("%d Machines, want %d", len(nodes), want)
			}
			// The control plane machine's, and the MachineDeployment's.
			if vms, disks, secrets := w.harvesterLeft(); vms != want+1 || disks != want+1 || secrets != want+1 {
				return fmt.Errorf("%d VMs, %d disks and %d cloud-init Secrets on Harvester, want %d of each", vms, disks, secrets, want+1)
			}
			return nil
		})
		return nodes
	}
	three := running(3)
	for machine, node := range three {
		if node != machine {
			t.Errorf("Machine %s has Node %s: the VM (and so the Node) must be named after the machine", machine, node)
		}
	}

	waitFor(ctx, t, w.capi, "Cluster API to count the control plane initialized", func() error {
		w.must(c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster))
		conditions, _, _ := unstructured.NestedSlice(cluster.Object, "status", "conditions")
		for _, cond := range conditions {
			if m, _ := cond.(map[string]any); m["type"] == "ControlPlaneInitialized" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("Cluster conditions %v", conditions)
	})

	// Scaling to 1 deletes exactly two VMs, with their disks and Secrets.
	w.must(c.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))))
	one := running(1)
	for machine := range one {
		if _, kept := three[machine]; !kept {
			t.Fatalf("scaling down replaced the machines: %v is new (had %v)", one, three)
		}
	}

	// A VM deleted behind Cluster API's back: the HarvesterMachine says so, and a
	// MachineHealthCheck has the machine replaced.
	mhc := capiObject(machineHealthCheckGVK, ns, "tenant-md-0", map[string]any{
		"clusterName": "tenant",
		"selector":    map[string]any{"matchLabels": map[string]any{"cluster.x-k8s.io/deployment-name": "tenant-md-0"}},
		"checks": map[string]any{
			"unhealthyNodeConditions": []any{map[string]any{"type": "Ready", "status": "Unknown", "timeoutSeconds": int64(5)}},
		},
	})
	w.must(c.Create(ctx, mhc))
	var lost string
	for machine := range one {
		lost = machine
	}
	w.must(hv.Client.Delete(ctx, &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: lost}}))
	waitFor(ctx, t, w.capi, "the HarvesterMachine to report its VM deleted", func() error {
		hm := &infrav1.HarvesterMachine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: lost}, hm); err != nil {
			if apierrors.IsNotFound(err) {
				return nil // already remediated
			}
			return err
		}
		if cond := findCondition(hm.Status.Conditions, infrav1.ConditionReady); cond == nil || cond.Reason != infrav1.ReasonVMDeleted {
			return fmt.Errorf("Ready condition %+v", cond)
		}
		return nil
	})
	replaced := running(1)
	if _, same := replaced[lost]; same {
		t.Fatalf("the machine whose VM was deleted was not replaced: %v", replaced)
	}

	// Deleting the Cluster leaves Harvester empty.
	w.must(c.Delete(ctx, cluster))
	waitFor(ctx, t, w.capi, "the Cluster and everything on Harvester to go", func() error {
		return w.clusterAndMachinesGone(cluster)
	})
}

// playKubelet plays the tenant's kubelets and Harvester's cloud provider until ctx ends: each
// running VM gets a Ready Node of its name with spec.providerID harvester://<VM UID> (what the
// cloud provider sets), and the Node of a VM that is gone turns Ready Unknown, as a node whose
// kubelet stopped posting does.
func playKubelet(ctx context.Context, hv, tenant client.Client) {
	for ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		vmis := &kubevirtv1.VirtualMachineInstanceList{}
		vms := &kubevirtv1.VirtualMachineList{}
		nodes := &corev1.NodeList{}
		if hv.List(ctx, vmis, client.InNamespace("vms")) != nil || hv.List(ctx, vms, client.InNamespace("vms")) != nil || tenant.List(ctx, nodes) != nil {
			continue
		}
		running := map[string]types.UID{}
		for _, vm := range vms.Items {
			for _, vmi := range vmis.Items {
				if vmi.Name == vm.Name && vmi.Status.Phase == kubevirtv1.Running && vm.DeletionTimestamp == nil {
					running[vm.Name] = vm.UID
				}
			}
		}
		have := map[string]corev1.Node{}
		for _, n := range nodes.Items {
			have[n.Name] = n
		}
		for name, uid := range running {
			if _, ok := have[name]; ok {
				continue
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: harvester.ProviderIDPrefix + string(uid)}}
			if tenant.Create(ctx, node) != nil {
				continue
			}
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
			_ = tenant.Status().Update(ctx, node)
		}
		for name, node := range have {
			if _, ok := running[name]; ok || strings.HasPrefix(string(readyStatus(node)), string(corev1.ConditionUnknown)) {
				continue
			}
			node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
			_ = tenant.Status().Update(ctx, &node)
		}
	}
}

func readyStatus(n corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

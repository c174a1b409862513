package capi

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

var machineHealthCheckGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineHealthCheck"}

// TestClusterAPIMachineDeployment runs a MachineDeployment of 3 (beside one control plane Machine)
// through the real Cluster API core manager and its kubeadm bootstrap provider, with a second API
// server as the tenant cluster. The workers' bootstrap data comes from a KubeadmConfigTemplate:
// the bootstrap provider writes it once the control plane is initialized, with a bootstrap token
// it creates in the tenant and the pin of the cluster CA (Secret tenant-ca, written as a control
// plane provider does), and each VM gets exactly that data as its cloud-init user data. In the
// tenant, testbed.PlayKubelets plays the kubelets (a Node named after each running VM, without
// providerID; the Node of a VM that is gone turns Ready Unknown) and testbed.PlayCloudProvider
// plays the ClusterResourceSet and Harvester's cloud provider with only the credentials the
// provider delivered (Secret tenant-harvester-cloud-config), which set each Node's providerID. The
// Machines reach Running with their nodeRef and addresses; scaling to 1 deletes exactly two VMs with their disks and Secrets; a VM
// deleted on Harvester behind Cluster API's back is reported and, with a MachineHealthCheck,
// replaced; deleting the Cluster leaves Harvester empty.
func TestClusterAPIMachineDeployment(t *testing.T) {
	kubeadmCRDs, err := testbed.KubeadmCRDs(requireAssets(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := startCAPIWorld(t, kubeadmCRDs)
	ctx, c, hv := w.ctx, w.c, w.hv
	bootstrap, err := testbed.StartKubeadmBootstrap(ctx, testbed.ClusterAPIOptions{Assets: requireAssets(t), Config: w.cfg, WorkDir: t.TempDir()})
	t.Cleanup(bootstrap.Stop)
	w.must(err)
	tenantAPI, _ := w.playTenant()
	w.must(tenantAPI.WriteClusterCA(ctx, c, ns, tenant.Name))

	cluster := w.tenantCluster()
	// One control plane machine: Cluster API counts the control plane initialized once it has a
	// Node (this Cluster has no control plane provider), and remediates only then.
	cpInfra, cp := tenant.ControlPlaneMachine("tenant-cp-0")
	w.must(testbed.CreateAll(ctx, c, cpInfra, cp))
	template, md := tenant.MachineDeployment("tenant-md-0", 3)
	config := kubeadmWorkers(md)
	w.must(testbed.CreateAll(ctx, c, config, template, md))

	running := func(want int) map[string]string {
		t.Helper()
		var nodes map[string]string
		waitFor(ctx, t, w.capi, fmt.Sprintf("%d Machines Running with their Node", want), func() error {
			machines := &unstructured.UnstructuredList{}
			machines.SetGroupVersionKind(testbed.MachineGVK.GroupVersion().WithKind("MachineList"))
			w.must(c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{testbed.DeploymentNameLabel: md.GetName()}))
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
		w.joinsTenant(tenantAPI, machine)
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
	mhc := testbed.ClusterAPIObject(machineHealthCheckGVK, ns, md.GetName(), map[string]any{
		"clusterName": tenant.Name,
		"selector":    map[string]any{"matchLabels": map[string]any{testbed.DeploymentNameLabel: md.GetName()}},
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

// kubeadmWorkers makes the MachineDeployment's machines take their bootstrap data from a
// KubeadmConfigTemplate of its name, as a flavour's workers do, and returns that template:
// joining nodes with Harvester's cloud provider (kubelet --cloud-provider=external). The kubeadm
// bootstrap provider needs the Kubernetes version of the machines (it picks the JoinConfiguration's
// API version by it).
func kubeadmWorkers(md *unstructured.Unstructured) *unstructured.Unstructured {
	config := testbed.ClusterAPIObject(kubeadmConfigTemplateGVK, md.GetNamespace(), md.GetName(), map[string]any{"template": map[string]any{"spec": map[string]any{
		"joinConfiguration": map[string]any{"nodeRegistration": map[string]any{
			"kubeletExtraArgs": []any{map[string]any{"name": "cloud-provider", "value": "external"}},
		}},
	}}})
	spec, _, _ := unstructured.NestedMap(md.Object, "spec", "template", "spec")
	spec["bootstrap"] = map[string]any{"configRef": map[string]any{"apiGroup": kubeadmConfigTemplateGVK.Group, "kind": kubeadmConfigTemplateGVK.Kind, "name": config.GetName()}}
	spec["version"] = "v1.33.1"
	_ = unstructured.SetNestedMap(md.Object, spec, "spec", "template", "spec")
	return config
}

var kubeadmConfigTemplateGVK = schema.GroupVersionKind{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfigTemplate"}

// joinsTenant checks that the Machine's bootstrap data would join the tenant cluster, at its
// control plane endpoint, with a token the tenant holds and the tenant CA's pin, and that the
// machine's VM has exactly that data as its cloud-init user data.
func (w *capiWorld) joinsTenant(tenantAPI *testbed.Tenant, machine string) {
	w.t.Helper()
	m := &unstructured.Unstructured{}
	m.SetGroupVersionKind(testbed.MachineGVK)
	w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: machine}, m))
	name, _, _ := unstructured.NestedString(m.Object, "spec", "bootstrap", "dataSecretName")
	data := &corev1.Secret{}
	w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: name}, data))
	endpoint := net.JoinHostPort(tenant.Endpoint.Host, strconv.Itoa(int(tenant.Endpoint.Port)))
	if _, err := tenantAPI.CheckKubeadmJoin(w.ctx, data.Data["value"], endpoint); err != nil {
		w.t.Errorf("Machine %s: its bootstrap data %s would not join the tenant: %v", machine, name, err)
	}
	userData := &corev1.Secret{}
	w.must(w.hv.Client.Get(w.ctx, client.ObjectKey{Namespace: "vms", Name: machine + "-cloudinit"}, userData))
	if !bytes.Equal(userData.Data["userdata"], data.Data["value"]) {
		w.t.Errorf("Machine %s: its VM's cloud-init user data (%d bytes) is not its bootstrap data %s (%d bytes)", machine, len(userData.Data["userdata"]), name, len(data.Data["value"]))
	}
}

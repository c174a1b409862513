package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// playHarvester does, crudely, what KubeVirt and Harvester's controllers do for the objects the
// provider creates, until the simulated Harvester (internal/sim) replaces it: a VMI per VM with an
// IP reported on nic-1, VMIs removed with their VM, and terminating PVCs released (no
// kube-controller-manager runs here to do that).
func playHarvester(ctx context.Context, c client.Client) {
	var nextIP atomic.Int32
	for ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		vms := &kubevirtv1.VirtualMachineList{}
		if err := c.List(ctx, vms); err != nil {
			continue
		}
		exists := map[string]bool{}
		for i := range vms.Items {
			vm := &vms.Items[i]
			exists[vm.Namespace+"/"+vm.Name] = true
			if vm.DeletionTimestamp == nil && vm.Annotations["test.butler/no-ip"] == "" {
				startVMI(ctx, c, vm, fmt.Sprintf("10.40.0.%d", 10+nextIP.Add(1)))
			}
		}
		vmis := &kubevirtv1.VirtualMachineInstanceList{}
		if err := c.List(ctx, vmis); err == nil {
			for i := range vmis.Items {
				if !exists[vmis.Items[i].Namespace+"/"+vmis.Items[i].Name] {
					_ = c.Delete(ctx, &vmis.Items[i])
				}
			}
		}
		pvcs := &corev1.PersistentVolumeClaimList{}
		if err := c.List(ctx, pvcs); err == nil {
			for i := range pvcs.Items {
				if p := &pvcs.Items[i]; p.DeletionTimestamp != nil && len(p.Finalizers) > 0 {
					p.Finalizers = nil
					_ = c.Update(ctx, p)
				}
			}
		}
	}
}

func startVMI(ctx context.Context, c client.Client, vm *kubevirtv1.VirtualMachine, ip string) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vm), vmi); !apierrors.IsNotFound(err) {
		return
	}
	vmi = &kubevirtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{
		Name: vm.Name, Namespace: vm.Namespace, Labels: vm.Spec.Template.ObjectMeta.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: vm.Name, UID: vm.UID}},
	}, Spec: vm.Spec.Template.Spec}
	if err := c.Create(ctx, vmi); err != nil {
		return
	}
	vmi.Status = kubevirtv1.VirtualMachineInstanceStatus{
		Phase: kubevirtv1.Running,
		Interfaces: []kubevirtv1.VirtualMachineInstanceNetworkInterface{
			{Name: "", InterfaceName: "lo", IP: "127.0.0.1"},
			{Name: harvester.NICName, InterfaceName: "eth0", MAC: "52:54:00:00:00:01", IP: "fe80::1", IPs: []string{"fe80::1", ip}},
		},
	}
	_ = c.Status().Update(ctx, vmi)
	vm.Status.PrintableStatus = kubevirtv1.VirtualMachineStatusRunning
	vm.Status.Ready = true
	_ = c.Status().Update(ctx, vm)
}

// newImage creates a VirtualMachineImage, imported or not.
func newImage(ctx context.Context, c client.Client, namespace, name string, imported bool) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(harvester.VirtualMachineImageGVK)
	u.SetNamespace(namespace)
	u.SetName(name)
	_ = unstructured.SetNestedField(u.Object, "talos.raw", "spec", "displayName")
	if err := c.Create(ctx, u); err != nil {
		return nil, err
	}
	return u, setImported(ctx, c, u, imported)
}

func setImported(ctx context.Context, c client.Client, u *unstructured.Unstructured, imported bool) error {
	status := "False"
	if imported {
		status = "True"
	}
	_ = unstructured.SetNestedField(u.Object, map[string]any{
		"storageClassName": "longhorn-" + u.GetName(),
		"virtualSize":      int64(2 << 30),
		"conditions":       []any{map[string]any{"type": "Imported", "status": status}},
	}, "status")
	return c.Status().Update(ctx, u)
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

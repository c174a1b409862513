package clusterapi

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
)

// +kubebuilder:rbac:groups=infrastructure.butlerlabs.dev,resources=harvestermachinetemplates,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.butlerlabs.dev,resources=harvestermachinetemplates/status,verbs=get;update;patch

// nodeOperatingSystem is the operating system of every Node the provider makes: the flavours boot
// Linux images, and Harvester's cloud provider and CSI driver run on Linux Nodes only.
const nodeOperatingSystem = "linux"

// HarvesterMachineTemplateReconciler reports on each HarvesterMachineTemplate what a machine made
// from it will have (status.capacity and status.nodeInfo), for the cluster autoscaler to scale a
// MachineDeployment up from zero machines. It reads nothing but the template: templates are
// immutable and name no ProviderConfig, so what they report cannot depend on a Harvester.
type HarvesterMachineTemplateReconciler struct {
	client.Client
}

// Reconcile writes the template's status where it differs from what its spec gives.
func (r *HarvesterMachineTemplateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	t := &infrav1.HarvesterMachineTemplate{}
	if err := r.Get(ctx, req.NamespacedName, t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	want := templateStatus(t.Spec.Template.Spec)
	if equality.Semantic.DeepEqual(t.Status, want) {
		return ctrl.Result{}, nil
	}
	// The status is the spec's alone: an optimistic lock would only make a template whose spec
	// cannot change wait for a cache that lags. The merge patch names every key it removes.
	patch := client.MergeFrom(t.DeepCopy())
	t.Status = want
	if err := r.Status().Patch(ctx, t, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("write status.capacity of HarvesterMachineTemplate %s/%s: %w", t.Namespace, t.Name, client.IgnoreNotFound(err))
	}
	return ctrl.Result{}, nil
}

// templateStatus is what a machine made from spec will have: its vCPUs, its memory as the VM
// is given it (harvesterMachineSpec rounds it up to a whole MiB) and the guest sees it (Harvester's
// VM mutator reserves none of it for QEMU under its default settings), and one of each device's
// Node resource per device that names one.
func templateStatus(spec infrav1.HarvesterMachineSpec) infrav1.HarvesterMachineTemplateStatus {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(spec.CPU), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(ceilUnits(spec.Memory, 1<<20)<<20, resource.BinarySI),
	}
	// A device's resource on Harvester is not what the guest's device plugin advertises (the
	// NVIDIA one says nvidia.com/gpu for any model): only a name the template gives is counted.
	for _, d := range slices.Concat(spec.HostDevices, spec.GPUs) {
		if d.NodeResourceName == "" {
			continue
		}
		name := corev1.ResourceName(d.NodeResourceName)
		n := capacity[name]
		n.Add(*resource.NewQuantity(1, resource.DecimalSI))
		capacity[name] = n
	}
	return infrav1.HarvesterMachineTemplateStatus{
		Capacity: capacity,
		NodeInfo: &infrav1.NodeInfo{OperatingSystem: nodeOperatingSystem},
	}
}

// SetupWithManager registers the reconciler. Its own status patch wakes it once more, and finds
// nothing to do.
func (r *HarvesterMachineTemplateReconciler) SetupWithManager(mgr ctrl.Manager, options controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).Named("harvestermachinetemplate").
		For(&infrav1.HarvesterMachineTemplate{}).
		WithOptions(requeue.WithReconcileTimeout(options)).
		Complete(r)
}

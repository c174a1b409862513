package clusterapi

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
)

// A template reports the vCPUs and the memory the VM is given (rounded up to a whole MiB, as
// harvesterMachineSpec gives it), and linux.
func TestTemplateStatus(t *testing.T) {
	for name, tc := range map[string]struct {
		cpu        int32
		memory     string
		wantCPU    string
		wantMemory string
	}{
		"whole GiB":         {cpu: 4, memory: "8Gi", wantCPU: "4", wantMemory: "8Gi"},
		"decimal units":     {cpu: 2, memory: "4G", wantCPU: "2", wantMemory: "3815Mi"}, // 4e9 bytes, 3814.7 MiB rounded up
		"a part of a MiB":   {cpu: 1, memory: "1536Ki", wantCPU: "1", wantMemory: "2Mi"},
		"MiB":               {cpu: 128, memory: "1500Mi", wantCPU: "128", wantMemory: "1500Mi"},
		"bytes above a GiB": {cpu: 1, memory: "1073741825", wantCPU: "1", wantMemory: "1025Mi"},
		"GiB read as MiB":   {cpu: 3, memory: "2Gi", wantCPU: "3", wantMemory: "2048Mi"},
	} {
		t.Run(name, func(t *testing.T) {
			got := templateStatus(infrav1.HarvesterMachineSpec{CPU: tc.cpu, Memory: resource.MustParse(tc.memory)})
			if cpu := got.Capacity[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse(tc.wantCPU)) != 0 {
				t.Errorf("cpu %s, want %s", cpu.String(), tc.wantCPU)
			}
			if mem := got.Capacity[corev1.ResourceMemory]; mem.Cmp(resource.MustParse(tc.wantMemory)) != 0 {
				t.Errorf("memory %s, want %s", mem.String(), tc.wantMemory)
			}
			if len(got.Capacity) != 2 {
				t.Errorf("capacity %v, want cpu and memory alone", got.Capacity)
			}
			if got.NodeInfo == nil || got.NodeInfo.OperatingSystem != "linux" || got.NodeInfo.Architecture != "" {
				t.Errorf("nodeInfo %+v, want linux and no architecture", got.NodeInfo)
			}
		})
	}
}

// Each device that names the resource its Node advertises adds one of it, summed per name; one
// that names none adds nothing, and neither does the resource it has on Harvester.
func TestTemplateStatusDevices(t *testing.T) {
	for name, tc := range map[string]struct {
		hostDevices, gpus []infrav1.PassthroughDevice
		want              corev1.ResourceList // beside cpu and memory
	}{
		"none": {},
		"a GPU passed through": {
			hostDevices: []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/GA102GL_A10", NodeResourceName: "nvidia.com/gpu"}},
			want:        corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
		},
		"GPUs and vGPUs of one Node resource, summed": {
			hostDevices: []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/GA102GL_A10", NodeResourceName: "nvidia.com/gpu"}, {DeviceName: "nvidia.com/GA102GL_A10", NodeResourceName: "nvidia.com/gpu"}},
			gpus:        []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/NVIDIA_A2-4Q", NodeResourceName: "nvidia.com/gpu"}},
			want:        corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("3")},
		},
		"two Node resources": {
			hostDevices: []infrav1.PassthroughDevice{{DeviceName: "intel.com/1533", NodeResourceName: "intel.com/sriov_netdevice"}},
			gpus:        []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/NVIDIA_A2-4Q", NodeResourceName: "nvidia.com/gpu.shared"}},
			want:        corev1.ResourceList{"intel.com/sriov_netdevice": resource.MustParse("1"), "nvidia.com/gpu.shared": resource.MustParse("1")},
		},
		"devices without a Node resource": {
			hostDevices: []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/GA102GL_A10"}},
			gpus:        []infrav1.PassthroughDevice{{DeviceName: "nvidia.com/NVIDIA_A2-4Q"}, {DeviceName: "nvidia.com/NVIDIA_A2-4Q", NodeResourceName: "nvidia.com/gpu"}},
			want:        corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := templateStatus(infrav1.HarvesterMachineSpec{CPU: 2, Memory: resource.MustParse("4Gi"), HostDevices: tc.hostDevices, GPUs: tc.gpus})
			if len(got.Capacity) != 2+len(tc.want) {
				t.Errorf("capacity %v, want cpu, memory and %v", got.Capacity, tc.want)
			}
			for name, want := range tc.want {
				if have := got.Capacity[name]; have.Cmp(want) != 0 {
					t.Errorf("capacity %s = %s, want %s", name, have.String(), want.String())
				}
			}
			if cpu := got.Capacity[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("2")) != 0 {
				t.Errorf("cpu %s, want 2", cpu.String())
			}
		})
	}
}

// The reconciler writes the status its spec gives, over a wrong one, and writes nothing when it
// is right.
func TestHarvesterMachineTemplateReconcile(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	tmpl := &infrav1.HarvesterMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workers"},
		Spec: infrav1.HarvesterMachineTemplateSpec{Template: infrav1.HarvesterMachineTemplateResource{
			Spec: infrav1.HarvesterMachineSpec{CPU: 2, Memory: resource.MustParse("4Gi")},
		}},
		Status: infrav1.HarvesterMachineTemplateStatus{Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("16"), "nvidia.com/gpu": resource.MustParse("1"),
		}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tmpl).WithStatusSubresource(tmpl).Build()
	r := &HarvesterMachineTemplateReconciler{Client: c}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tmpl)}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := &infrav1.HarvesterMachineTemplate{}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	want := templateStatus(tmpl.Spec.Template.Spec)
	if cpu, mem := got.Status.Capacity[corev1.ResourceCPU], got.Status.Capacity[corev1.ResourceMemory]; len(got.Status.Capacity) != 2 ||
		cpu.Cmp(want.Capacity[corev1.ResourceCPU]) != 0 || mem.Cmp(want.Capacity[corev1.ResourceMemory]) != 0 {
		t.Fatalf("status.capacity %v, want %v (the stale gpu removed)", got.Status.Capacity, want.Capacity)
	}
	if got.Status.NodeInfo == nil || got.Status.NodeInfo.OperatingSystem != "linux" {
		t.Fatalf("status.nodeInfo %+v, want linux", got.Status.NodeInfo)
	}
	written := got.ResourceVersion
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != written {
		t.Fatalf("a template whose status is right was written again (resourceVersion %s, was %s)", got.ResourceVersion, written)
	}
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: "gone"}}); err != nil {
		t.Fatalf("a template gone: %v, want nothing to do", err)
	}
}

package clusterapi

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

func TestCAPIChangesThatMatter(t *testing.T) {
	object := func(gvk schema.GroupVersionKind, name string, spec map[string]any) func(rv string, f func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		return func(rv string, f func(u *unstructured.Unstructured)) *unstructured.Unstructured {
			u := &unstructured.Unstructured{Object: map[string]any{"spec": runtime.DeepCopyJSON(spec)}}
			u.SetGroupVersionKind(gvk)
			u.SetNamespace("ns")
			u.SetName(name)
			u.SetResourceVersion(rv)
			if f != nil {
				f(u)
			}
			return u
		}
	}
	cluster := object(capiClusterGVK, "c", map[string]any{
		"infrastructureRef": map[string]any{"kind": "HarvesterCluster", "name": "hc"}, "controlPlaneEndpoint": map[string]any{"host": "10.0.0.1"},
	})
	machine := object(capiMachineGVK, "m", map[string]any{"infrastructureRef": map[string]any{"kind": "HarvesterMachine", "name": "hm-0"}})
	set := func(value any, path ...string) func(u *unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) { _ = unstructured.SetNestedField(u.Object, value, path...) }
	}
	now := metav1.Now()
	clusters := capiChangesThatMatter(capiClusterOf, nil)
	machines := capiChangesThatMatter(capiMachineOf, infrastructureMachineOf)
	for name, tc := range map[string]struct {
		pred     predicate.Predicate
		old, new *unstructured.Unstructured
		want     bool
	}{
		"cluster resync":                     {clusters, cluster("1", nil), cluster("1", nil), true},
		"cluster status of Cluster API":      {clusters, cluster("1", nil), cluster("2", set(int64(3), "status", "workers", "readyReplicas")), false},
		"cluster paused":                     {clusters, cluster("1", nil), cluster("2", set(true, "spec", "paused")), true},
		"cluster infrastructure provisioned": {clusters, cluster("1", nil), cluster("2", set(true, "status", "initialization", "infrastructureProvisioned")), true},
		"cluster endpoint moved":             {clusters, cluster("1", nil), cluster("2", set("10.0.0.2", "spec", "controlPlaneEndpoint", "host")), true},
		"cluster deleted":                    {clusters, cluster("1", nil), cluster("2", func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&now) }), true},
		"machine status of Cluster API":      {machines, machine("1", nil), machine("2", set("10.0.0.5", "status", "addresses")), false},
		"machine bootstrap data written":     {machines, machine("1", nil), machine("2", set("m-bootstrap", "spec", "bootstrap", "dataSecretName")), true},
		"machine failure domain":             {machines, machine("1", nil), machine("2", set("rack-1", "spec", "failureDomain")), true},
		"machine control plane label":        {machines, machine("1", nil), machine("2", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{capiControlPlaneLabel: ""}) }), true},
		"machine infrastructure ref":         {machines, machine("1", nil), machine("2", set("hm-1", "spec", "infrastructureRef", "name")), true},
		"machine deleted":                    {machines, machine("1", nil), machine("2", func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&now) }), true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.pred.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
				t.Fatalf("passes = %v, want %v", got, tc.want)
			}
		})
	}
}

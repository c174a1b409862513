package testbed

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestStewardStatus(t *testing.T) {
	scp := &unstructured.Unstructured{Object: map[string]any{}}
	_ = unstructured.SetNestedField(scp.Object, int64(2), "spec", "replicas")
	_ = unstructured.SetNestedField(scp.Object, "v1.33.1", "spec", "version")
	got := StewardStatus(scp, "demo")
	want := map[string]any{
		"initialized": true, "ready": true, "externalManagedControlPlane": true, "version": "v1.33.1",
		"replicas": int64(2), "readyReplicas": int64(2), "updatedReplicas": int64(2), "unavailableReplicas": int64(0),
		"selector": "cluster.x-k8s.io/cluster-name=demo",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("StewardStatus = %v, want %v", got, want)
	}
}

func TestHostPort(t *testing.T) {
	host, port, err := hostPort("https://127.0.0.1:40013")
	if err != nil || host != "127.0.0.1" || port != 40013 {
		t.Errorf("hostPort = %s, %d, %v", host, port, err)
	}
	if _, _, err := hostPort("https://127.0.0.1"); err == nil {
		t.Error("hostPort without a port: no error")
	}
}

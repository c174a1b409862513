package clustercache

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// countingMapper knows only VirtualMachines and counts the questions it is asked.
type countingMapper struct {
	meta.RESTMapper
	asked int
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.asked++
	if gk.Kind != "VirtualMachine" {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return &meta.RESTMapping{Resource: schema.GroupVersionResource{Group: gk.Group, Version: "v1", Resource: "virtualmachines"}, Scope: meta.RESTScopeNamespace}, nil
}

func TestRememberingMapperAsksOncePerKindButNeverRemembersAMiss(t *testing.T) {
	delegate := &countingMapper{}
	m := &rememberingMapper{RESTMapper: delegate}
	vm := schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachine"}
	for range 3 {
		mapping, err := m.RESTMapping(vm, "v1")
		if err != nil || mapping.Resource.Resource != "virtualmachines" || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
			t.Fatalf("RESTMapping(VirtualMachine) = %+v, %v", mapping, err)
		}
	}
	if delegate.asked != 1 {
		t.Errorf("the delegate was asked %d times for the same kind, want 1", delegate.asked)
	}
	if _, err := m.RESTMapping(vm, "v1alpha3"); err != nil || delegate.asked != 2 {
		t.Errorf("another version must be asked of the delegate: asked %d times, err %v", delegate.asked, err)
	}
	dv := schema.GroupKind{Group: "cdi.kubevirt.io", Kind: "DataVolume"}
	for range 2 {
		if _, err := m.RESTMapping(dv, "v1beta1"); !meta.IsNoMatchError(err) {
			t.Fatalf("RESTMapping(DataVolume) error = %v, want no match", err)
		}
	}
	if delegate.asked != 4 {
		t.Errorf("a kind that is missing must be asked again (a CRD installed later is found): asked %d times, want 4", delegate.asked)
	}
}

// A discovery request that never gets an answer fails after discoveryTimeout: without a timeout
// it held the client being built, and every reconcile waiting for it, for good.
func TestMapperDiscoveryGivesUpOnAServerThatNeverAnswers(t *testing.T) {
	hung := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hung:
		}
	}))
	defer server.Close()
	defer close(hung)
	saved := discoveryTimeout
	discoveryTimeout = 200 * time.Millisecond
	defer func() { discoveryTimeout = saved }()
	mapper, err := newRESTMapper(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := mapper.RESTMapping(schema.GroupKind{Group: "kubevirt.io", Kind: "VirtualMachine"}, "v1")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a mapping from a server that never answers")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("discovery still waiting after 10s on a server that never answers")
	}
}

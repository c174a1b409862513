package clustercache

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A delete sends what controller-runtime's would (the path, the preconditions, the propagation
// policy) and never reads a successful answer: here one that decodes into nothing. An error
// answer comes back as the API's error, message and all, as the deletion's callers read it.
func TestDeletesDoNotReadTheAnswer(t *testing.T) {
	var answer struct {
		code int
		body string
	}
	var got struct {
		method, path string
		options      metav1.DeleteOptions
	}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.method, got.path = r.Method, r.URL.Path
		body, _ := io.ReadAll(r.Body)
		got.options = metav1.DeleteOptions{}
		_ = json.Unmarshal(body, &got.options)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(answer.code)
		_, _ = io.WriteString(w, answer.body)
	}))
	defer server.Close()

	cfg := &rest.Config{Host: server.URL}
	scheme := runtime.NewScheme()
	if err := kubevirtv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(kubevirtv1.SchemeGroupVersion.WithKind("VirtualMachine"), meta.RESTScopeNamespace)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	typed, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper, HTTPClient: httpClient})
	if err != nil {
		t.Fatal(err)
	}
	c, err := withUnreadDeletes(typed, cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "cp-0", UID: "uid-1", ResourceVersion: "7"}}
	deleteVM := func(c client.Client) error {
		return c.Delete(context.Background(), vm, client.Preconditions{UID: ptr.To(vm.UID), ResourceVersion: ptr.To(vm.ResourceVersion)},
			client.PropagationPolicy(metav1.DeletePropagationBackground))
	}

	answer.code, answer.body = http.StatusOK, "not an object anyone could decode"
	if err := deleteVM(typed); err == nil {
		t.Fatal("controller-runtime's Delete read the answer without an error: the test no longer tells the two apart")
	}
	if err := deleteVM(c); err != nil {
		t.Fatalf("Delete read the answer: %v", err)
	}
	if got.method != http.MethodDelete || got.path != "/apis/kubevirt.io/v1/namespaces/vms/virtualmachines/cp-0" {
		t.Fatalf("sent %s %s", got.method, got.path)
	}
	if p := got.options.Preconditions; p == nil || ptr.Deref(p.UID, "") != vm.UID || ptr.Deref(p.ResourceVersion, "") != "7" ||
		ptr.Deref(got.options.PropagationPolicy, "") != metav1.DeletePropagationBackground {
		t.Fatalf("sent options %+v", got.options)
	}

	gr := schema.GroupResource{Group: kubevirtv1.SchemeGroupVersion.Group, Resource: "virtualmachines"}
	for name, tc := range map[string]struct {
		status *apierrors.StatusError
		is     func(error) bool
	}{
		"changed since it was read": {apierrors.NewConflict(gr, "cp-0", nil), apierrors.IsConflict},
		"gone":                      {apierrors.NewNotFound(gr, "cp-0"), apierrors.IsNotFound},
		"refused by a webhook":      {apierrors.NewBadRequest("admission webhook denied the request: the volume is in use"), apierrors.IsBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			status := tc.status.Status()
			status.APIVersion, status.Kind = "v1", "Status"
			body, _ := json.Marshal(status)
			answer.code, answer.body = int(status.Code), string(body)
			err := deleteVM(c)
			if !tc.is(err) || !strings.Contains(err.Error(), status.Message) {
				t.Fatalf("Delete = %v, want the API's error %q", err, status.Message)
			}
		})
	}
}

// The Harvester clients the Cache builds delete that way.
func TestHarvesterClientsDeleteWithoutReadingTheAnswer(t *testing.T) {
	x := newFactoryFixture(t)
	if c := x.cluster(t).Client(); !isUnreadDeletes(c) {
		t.Fatalf("the Harvester client is a %T, whose deletes read the answer", c)
	}
}

func isUnreadDeletes(c client.Client) bool {
	_, ok := c.(unreadDeletes)
	return ok
}

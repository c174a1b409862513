package clusterapi

import (
	"context"
	"testing"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// A HarvesterMachine gets its cluster-name label from Cluster API after it is created, and may
// have no owner Machine yet: neither is an error, and neither is read with an empty name (which
// client-go refuses, so the reconcile would fail and back off until the label comes).
func TestCAPIObjectsNotNamedYetAreAbsent(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Name == "" {
				t.Errorf("%T read with an empty name (client-go refuses: resource name may not be empty)", obj)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	cluster, err := readCAPICluster(context.Background(), c, "tenants", "")
	if cluster != nil || err != nil {
		t.Errorf("Cluster with no name: %v, %v; want nil, nil", cluster, err)
	}
	machine, err := readCAPIMachine(context.Background(), c, "tenants", "")
	if machine != nil || err != nil {
		t.Errorf("Machine with no name: %v, %v; want nil, nil", machine, err)
	}
}

package clusterapi

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/objstatus"
)

// What the Cluster API front door reads of Cluster API's own objects (contract v1beta2). They are
// read as unstructured: Cluster API's modules pin another controller-runtime than this project.
// infrastructureConditions are the conditions HarvesterClusters and HarvesterMachines report
// besides Paused, as api/infrastructure/v1alpha1/conditions.go declares them.
var infrastructureConditions = objstatus.Conditions{
	Ready: infrav1.ConditionReady, Progressing: infrav1.ConditionProgressing,
	Degraded: infrav1.ConditionDegraded, AsExpected: infrav1.ReasonAsExpected,
}

var (
	capiClusterGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Cluster"}
	capiMachineGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "Machine"}
)

// Labels and annotations of Cluster API.
const (
	capiClusterNameLabel    = "cluster.x-k8s.io/cluster-name"
	capiControlPlaneLabel   = "cluster.x-k8s.io/control-plane"
	capiPausedAnnotation    = "cluster.x-k8s.io/paused"
	capiWaitingRetry        = requeue.ProviderConfigRetry
	capiOwnerRetryReasonMsg = "no %s of Cluster API owns it yet: Cluster API sets the owner reference when it takes the object on"
)

// capiCluster is what the front door reads of a Cluster API Cluster.
type capiCluster struct {
	Name, Namespace string
	Paused          bool
	// InfrastructureName is spec.infrastructureRef.name when it names a HarvesterCluster.
	InfrastructureName string
	// InfrastructureProvisioned is status.initialization.infrastructureProvisioned.
	InfrastructureProvisioned bool
	// EndpointHost is spec.controlPlaneEndpoint.host.
	EndpointHost string
}

// ownerOfKind returns the name of obj's owner of a Cluster API kind, "" if none.
func ownerOfKind(obj metav1.Object, gvk schema.GroupVersionKind) string {
	for _, ref := range obj.GetOwnerReferences() {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil && gv.Group == gvk.Group && ref.Kind == gvk.Kind {
			return ref.Name
		}
	}
	return ""
}

// getCAPI reads a Cluster API object; found is false when it does not exist, or is not named yet
// (an infrastructure machine gets its cluster-name label from Cluster API after it is created).
func getCAPI(ctx context.Context, c client.Reader, gvk schema.GroupVersionKind, namespace, name string, opts ...client.GetOption) (*unstructured.Unstructured, bool, error) {
	if name == "" {
		return nil, false, nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, u, opts...)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	return u, err == nil, err
}

// readCAPICluster reads the Cluster of the given name, nil if it does not exist.
func readCAPICluster(ctx context.Context, c client.Reader, namespace, name string) (*capiCluster, error) {
	// Read-only here (readCAPIClusterFrom): the cache's own copy, not a deep copy per read.
	u, found, err := getCAPI(ctx, c, capiClusterGVK, namespace, name, client.UnsafeDisableDeepCopy)
	if !found {
		return nil, err
	}
	return readCAPIClusterFrom(u), nil
}

// readCAPIClusterFrom reads what the front door needs of a Cluster.
func readCAPIClusterFrom(u *unstructured.Unstructured) *capiCluster {
	cl := &capiCluster{Name: u.GetName(), Namespace: u.GetNamespace()}
	cl.Paused, _, _ = unstructured.NestedBool(u.Object, "spec", "paused")
	if kind, _, _ := unstructured.NestedString(u.Object, "spec", "infrastructureRef", "kind"); kind == "HarvesterCluster" {
		cl.InfrastructureName, _, _ = unstructured.NestedString(u.Object, "spec", "infrastructureRef", "name")
	}
	cl.InfrastructureProvisioned, _, _ = unstructured.NestedBool(u.Object, "status", "initialization", "infrastructureProvisioned")
	cl.EndpointHost, _, _ = unstructured.NestedString(u.Object, "spec", "controlPlaneEndpoint", "host")
	return cl
}

// capiClusterOf is what the front door reads of a Cluster, as a value (see capiChangesThatMatter).
func capiClusterOf(u *unstructured.Unstructured) capiCluster { return *readCAPIClusterFrom(u) }

// readCAPIMachine reads the Machine of the given name as the cache holds it, by its metadata
// alone (its name and whether it is a control plane machine), nil if it does not exist. Its spec
// (readCAPIMachineSpec) matters only when the machine is made.
func readCAPIMachine(ctx context.Context, c client.Reader, namespace, name string) (*capiMachine, error) {
	if name == "" {
		return nil, nil
	}
	m := capiMachineMetadata()
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m, client.UnsafeDisableDeepCopy) // read-only here
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	_, controlPlane := m.GetLabels()[capiControlPlaneLabel]
	return &capiMachine{Name: name, ControlPlane: controlPlane}, nil
}

// capiMachineMetadata is an empty Machine read, cached and watched by its metadata alone: Cluster
// API writes a Machine's status many times in its life, and the provider needs none of it.
func capiMachineMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(capiMachineGVK)
	return m
}

// readCAPIMachineSpec fills in machine what the front door reads of its spec, read by r (live).
func readCAPIMachineSpec(ctx context.Context, r client.Reader, namespace string, machine *capiMachine) error {
	u, found, err := getCAPI(ctx, r, capiMachineGVK, namespace, machine.Name)
	if err != nil {
		return err
	}
	if !found {
		return waitingForOwner("Machine")
	}
	machine.DataSecretName, _, _ = unstructured.NestedString(u.Object, "spec", "bootstrap", "dataSecretName")
	machine.FailureDomain, _, _ = unstructured.NestedString(u.Object, "spec", "failureDomain")
	return nil
}

// capiPaused reports whether Cluster API asks the provider to leave obj alone: its Cluster is
// paused, or obj carries the paused annotation.
func capiPaused(cl *capiCluster, obj metav1.Object) bool {
	_, annotated := obj.GetAnnotations()[capiPausedAnnotation]
	return annotated || (cl != nil && cl.Paused)
}

// waitingForOwner is the wait of an object Cluster API has not taken on yet.
func waitingForOwner(ownerKind string) error {
	return errkind.Waiting(infrav1.ReasonWaitingForOwner, capiWaitingRetry, capiOwnerRetryReasonMsg, ownerKind)
}

// capiMachine is what the HarvesterMachine front door reads of the Cluster API Machine that owns
// a HarvesterMachine (read as unstructured: the project does not import Cluster API's modules).
type capiMachine struct {
	Name string
	// DataSecretName and FailureDomain are read from the spec when the machine is made
	// (readCAPIMachineSpec); empty until then.
	//
	// DataSecretName is spec.bootstrap.dataSecretName: empty until the bootstrap provider has
	// written the machine's bootstrap data.
	DataSecretName string
	// ControlPlane is set for control plane machines (label cluster.x-k8s.io/control-plane).
	ControlPlane bool
	// FailureDomain is spec.failureDomain: where Cluster API (or the user) places the machine,
	// one of the HarvesterCluster's failure domains; empty for anywhere.
	FailureDomain string
}

// soonest is the result that looks again first (a zero RequeueAfter never).
func soonest(a, b reconcile.Result) reconcile.Result {
	switch {
	case a.RequeueAfter == 0:
		return b
	case b.RequeueAfter == 0 || a.RequeueAfter < b.RequeueAfter:
		return a
	}
	return b
}

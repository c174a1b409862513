package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StewardControlPlaneGVK is the kind of Butler's Steward control plane provider
// (butlerdotdev/cluster-api-control-plane-provider-steward), as its release serves it.
var StewardControlPlaneGVK = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1alpha1", Kind: "StewardControlPlane"}

// stewardTick is how often the played Steward looks at the management cluster.
const stewardTick = 200 * time.Millisecond

// Steward plays, on the management cluster, Butler's Steward control plane provider for one
// Cluster, acting only on what Steward has. Once its hosted API server answers (here: the tenant
// API server, whose kubeconfig Secret <cluster>-kubeconfig StartTenant writes as Steward does),
// it reads the Cluster's spec.infrastructureRef and, if that infrastructure cluster has no
// endpoint, sets it to that server's address with the patch its patchGenericCluster sends (one
// JSON merge patch of spec.controlPlaneEndpoint {host, port}; see test/capi/hosted_test.go), and
// gives the Cluster's StewardControlPlane the status Steward writes. Its CRD (Steward's release,
// test/testdata/steward/crd) declares contract v1beta1, so Cluster API reads status.initialized
// (internal/contract/controlplane.go, Initialized); Steward also writes ready,
// externalManagedControlPlane, version and the replica counts, which the CRD requires. Steward
// also writes <cluster>-ca, the hosted control plane's CA (Tenant.WriteClusterCA plays it), from
// which the kubeadm bootstrap provider pins the CA in the workers' bootstrap data.
//
// The Cluster may be a ClusterClass's: the topology controller names its infrastructure cluster
// and control plane, and Steward finds them by the Cluster's references, as this player does.
type Steward struct {
	c                      client.Client
	namespace, clusterName string
	// host and port are the tenant API server's address: the endpoint Steward sets.
	host string
	port int64
	// say tells what the player did.
	say  func(format string, args ...any)
	stop context.CancelFunc
	done chan struct{}

	mu  sync.Mutex
	err error
}

// PlaySteward plays Steward for Cluster clusterName of namespace, whose hosted API server is at
// server (a URL), until Stop or until ctx ends. say, if set, is told what it did.
func PlaySteward(ctx context.Context, c client.Client, namespace, clusterName, server string, say func(format string, args ...any)) *Steward {
	ctx, cancel := context.WithCancel(ctx)
	if say == nil {
		say = func(string, ...any) {}
	}
	p := &Steward{c: c, namespace: namespace, clusterName: clusterName, say: say, stop: cancel, done: make(chan struct{})}
	host, port, err := hostPort(server)
	p.host, p.port, p.err = host, port, err
	go func() {
		defer close(p.done)
		if err != nil {
			return
		}
		PlayEvery(ctx, stewardTick, p.sync, p.record)
	}()
	return p
}

func (p *Steward) record(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

// Stop stops the player and waits for it.
func (p *Steward) Stop() { p.stop(); <-p.done }

// Err is what held the player up in its last pass.
func (p *Steward) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// hostPort splits an API server URL into host and port.
func hostPort(server string) (string, int64, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", 0, err
	}
	host, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", 0, fmt.Errorf("the tenant API server's address %q: %w", server, err)
	}
	port, err := strconv.ParseInt(portText, 10, 32)
	return host, port, err
}

// sync sets the endpoint of the Cluster's infrastructure cluster, then the status of its
// StewardControlPlane.
func (p *Steward) sync(ctx context.Context) error {
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(ClusterGVK)
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: p.clusterName}, cluster); err != nil {
		return client.IgnoreNotFound(err)
	}
	if cluster.GetDeletionTimestamp() != nil {
		return nil
	}
	infraRef, _, _ := unstructured.NestedStringMap(cluster.Object, "spec", "infrastructureRef")
	cpRef, _, _ := unstructured.NestedStringMap(cluster.Object, "spec", "controlPlaneRef")
	if infraRef["name"] == "" || cpRef["name"] == "" {
		return fmt.Errorf("Cluster %s has no infrastructureRef or controlPlaneRef yet", p.clusterName)
	}
	done, err := p.patchEndpoint(ctx, infraRef)
	if err != nil || !done {
		return err
	}
	return p.writeStatus(ctx, cpRef["name"])
}

// patchEndpoint sets the endpoint of the infrastructure cluster ref names if it has none, and says
// whether it has one.
func (p *Steward) patchEndpoint(ctx context.Context, ref map[string]string) (bool, error) {
	infra := &unstructured.Unstructured{}
	infra.SetGroupVersionKind(schema.GroupVersionKind{Group: ref["apiGroup"], Version: "v1alpha1", Kind: ref["kind"]})
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: ref["name"]}, infra); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if infra.GetDeletionTimestamp() != nil {
		return false, nil
	}
	if host, _, _ := unstructured.NestedString(infra.Object, "spec", "controlPlaneEndpoint", "host"); host != "" {
		return true, nil
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"controlPlaneEndpoint": map[string]any{"host": p.host, "port": p.port}}})
	if err != nil {
		return false, err
	}
	if err := p.c.Patch(ctx, infra, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return false, fmt.Errorf("%s %s endpoint: %w", infra.GetKind(), infra.GetName(), err)
	}
	p.say("  Steward (played): patched %s %s with %s (its hosted API server's address)", infra.GetKind(), infra.GetName(), patch)
	return false, nil
}

// writeStatus gives StewardControlPlane name the status of a hosted control plane that is up,
// unless it has it.
func (p *Steward) writeStatus(ctx context.Context, name string) error {
	scp := &unstructured.Unstructured{}
	scp.SetGroupVersionKind(StewardControlPlaneGVK)
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: name}, scp); err != nil {
		return client.IgnoreNotFound(err)
	}
	if initialized, _, _ := unstructured.NestedBool(scp.Object, "status", "initialized"); initialized || scp.GetDeletionTimestamp() != nil {
		return nil
	}
	status, err := json.Marshal(map[string]any{"status": StewardStatus(scp, p.clusterName)})
	if err != nil {
		return err
	}
	if err := p.c.Status().Patch(ctx, scp, client.RawPatch(types.MergePatchType, status)); err != nil {
		return fmt.Errorf("StewardControlPlane %s status: %w", scp.GetName(), err)
	}
	p.say("  Steward (played): StewardControlPlane %s status initialized, ready, externalManagedControlPlane", scp.GetName())
	return nil
}

// StewardStatus is the status Steward gives a StewardControlPlane whose hosted control plane is
// up: initialized and ready, externally managed (no Machines), its version, and all of its
// spec.replicas API server pods ready.
func StewardStatus(scp *unstructured.Unstructured, clusterName string) map[string]any {
	replicas, found, _ := unstructured.NestedInt64(scp.Object, "spec", "replicas")
	if !found {
		replicas = 1
	}
	version, _, _ := unstructured.NestedString(scp.Object, "spec", "version")
	return map[string]any{
		"initialized": true, "ready": true, "externalManagedControlPlane": true, "version": version,
		"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas, "unavailableReplicas": int64(0),
		"selector": ClusterNameLabel + "=" + clusterName,
	}
}

package main

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
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// playTick is how often the played providers look at the management cluster.
const playTick = 200 * time.Millisecond

// played plays, on the management cluster, the provider of the hosted flavour that the demo does
// not run (Cluster API core and its kubeadm bootstrap provider do), acting only on what it has:
// Steward, the control plane provider (butlerdotdev/cluster-api-control-plane-provider-steward).
// Once its hosted API server answers (here: the tenant API server, whose kubeconfig Secret
// <cluster>-kubeconfig testbed.StartTenant writes as Steward does), it sets the
// HarvesterCluster's endpoint to that server's address with the patch its patchGenericCluster
// sends (one JSON merge patch of spec.controlPlaneEndpoint {host, port}; see
// test/capi/hosted_test.go), and gives the StewardControlPlane the status Steward writes. Its
// CRD (Steward's release, test/testdata/steward/crd) declares contract v1beta1, so Cluster API
// reads status.initialized (internal/contract/controlplane.go, Initialized); Steward also
// writes ready, externalManagedControlPlane, version and the replica counts, which the CRD
// requires. Steward also writes <cluster>-ca, the hosted control plane's CA (runCAPI does, by
// testbed.Tenant.WriteClusterCA), from which the kubeadm bootstrap provider pins the CA in
// the workers' bootstrap data.
type played struct {
	c                      client.Client
	namespace, clusterName string
	// host and port are the tenant API server's address: the endpoint Steward sets.
	host string
	port int64
	// say tells what the players did.
	say  func(format string, args ...any)
	stop context.CancelFunc
	done chan struct{}

	mu  sync.Mutex
	err error
}

// startPlayers plays Steward for Cluster clusterName of
// namespace, whose hosted API server is at tenantURL, until Stop or until ctx ends.
func startPlayers(ctx context.Context, c client.Client, namespace, clusterName, tenantURL string, say func(format string, args ...any)) *played {
	ctx, cancel := context.WithCancel(ctx)
	p := &played{c: c, namespace: namespace, clusterName: clusterName, say: say, stop: cancel, done: make(chan struct{})}
	host, port, err := hostPort(tenantURL)
	p.host, p.port, p.err = host, port, err
	go func() {
		defer close(p.done)
		if err != nil {
			return
		}
		testbed.PlayEvery(ctx, playTick, func(ctx context.Context) error {
			return p.steward(ctx)
		}, p.record)
	}()
	return p
}

func (p *played) record(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

// Stop stops the players and waits for them.
func (p *played) Stop() { p.stop(); <-p.done }

// Err is what held the players up in their last pass.
func (p *played) Err() error {
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

// steward plays Steward's endpoint patch and its StewardControlPlane status.
func (p *played) steward(ctx context.Context) error {
	hc := &unstructured.Unstructured{}
	hc.SetGroupVersionKind(harvesterClusterGVK)
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: p.clusterName}, hc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if hc.GetDeletionTimestamp() != nil {
		return nil
	}
	if host, _, _ := unstructured.NestedString(hc.Object, "spec", "controlPlaneEndpoint", "host"); host == "" {
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"controlPlaneEndpoint": map[string]any{"host": p.host, "port": p.port}}})
		if err != nil {
			return err
		}
		if err := p.c.Patch(ctx, hc, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("HarvesterCluster %s endpoint: %w", hc.GetName(), err)
		}
		p.say("  Steward (played): patched HarvesterCluster %s with %s (its hosted API server's address)", hc.GetName(), patch)
		return nil
	}
	scps := &unstructured.UnstructuredList{}
	scps.SetGroupVersionKind(stewardControlPlaneGVK.GroupVersion().WithKind("StewardControlPlaneList"))
	if err := p.c.List(ctx, scps, client.InNamespace(p.namespace)); err != nil {
		return err
	}
	for i := range scps.Items {
		scp := &scps.Items[i]
		if initialized, _, _ := unstructured.NestedBool(scp.Object, "status", "initialized"); initialized || scp.GetDeletionTimestamp() != nil {
			continue
		}
		status, err := json.Marshal(map[string]any{"status": stewardStatus(scp, p.clusterName)})
		if err != nil {
			return err
		}
		if err := p.c.Status().Patch(ctx, scp, client.RawPatch(types.MergePatchType, status)); err != nil {
			return fmt.Errorf("StewardControlPlane %s status: %w", scp.GetName(), err)
		}
		p.say("  Steward (played): StewardControlPlane %s status initialized, ready, externalManagedControlPlane", scp.GetName())
	}
	return nil
}

// stewardStatus is the status Steward gives a StewardControlPlane whose hosted control plane is
// up: initialized and ready, externally managed (no Machines), its version, and all of its
// spec.replicas API server pods ready.
func stewardStatus(scp *unstructured.Unstructured, clusterName string) map[string]any {
	replicas, found, _ := unstructured.NestedInt64(scp.Object, "spec", "replicas")
	if !found {
		replicas = 1
	}
	version, _, _ := unstructured.NestedString(scp.Object, "spec", "version")
	return map[string]any{
		"initialized": true, "ready": true, "externalManagedControlPlane": true, "version": version,
		"replicas": replicas, "readyReplicas": replicas, "updatedReplicas": replicas, "unavailableReplicas": int64(0),
		"selector": testbed.ClusterNameLabel + "=" + clusterName,
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// playTick is how often the played providers look at the management cluster.
const playTick = 200 * time.Millisecond

// played plays, on the management cluster, the two providers of the hosted flavour that the demo
// does not run (only Cluster API core does), each acting only on what that provider has:
//
//   - Steward, the control plane provider (butlerdotdev/cluster-api-control-plane-provider-steward):
//     once its hosted API server answers (here: the tenant API server, whose kubeconfig Secret
//     <cluster>-kubeconfig testbed.StartTenant writes as Steward does), it sets the
//     HarvesterCluster's endpoint to that server's address with the patch its patchGenericCluster
//     sends (one JSON merge patch of spec.controlPlaneEndpoint {host, port}; see
//     test/capi/hosted_test.go), and gives the StewardControlPlane the status Steward writes. Its
//     CRD (Steward's release, test/testdata/steward/crd) declares contract v1beta1, so Cluster API
//     reads status.initialized (internal/contract/controlplane.go, Initialized); Steward also
//     writes ready, externalManagedControlPlane, version and the replica counts, which the CRD
//     requires.
//   - the kubeadm bootstrap provider: for each KubeadmConfig owned by a Machine, once the Cluster's
//     infrastructure is provisioned and its control plane initialized (a joining node waits for
//     both, as kubeadm's KubeadmConfig controller does), a bootstrap data Secret named after the
//     KubeadmConfig (key value, format cloud-config; type cluster.x-k8s.io/secret, labelled with
//     the cluster's name, owned by the KubeadmConfig), then the status of the bootstrap contract
//     v1beta2 (internal/contract/bootstrap.go): status.initialization.dataSecretCreated and
//     status.dataSecretName. The data is a cloud-config with the kubeadm JoinConfiguration of the
//     KubeadmConfig's spec and the cluster's endpoint (bootstrapData); no bootstrap token is
//     issued and no kubeadm runs: the kubelet player registers the Nodes.
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

// startPlayers plays Steward and the kubeadm bootstrap provider for Cluster clusterName of
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
			return errors.Join(p.steward(ctx), p.kubeadmBootstrap(ctx))
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

// kubeadmBootstrap plays the kubeadm bootstrap provider for the cluster's KubeadmConfigs.
func (p *played) kubeadmBootstrap(ctx context.Context) error {
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(testbed.ClusterGVK)
	if err := p.c.Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: p.clusterName}, cluster); err != nil {
		return client.IgnoreNotFound(err)
	}
	infra, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "infrastructureProvisioned")
	cp, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "controlPlaneInitialized")
	if !infra || !cp {
		return nil // a joining node waits for both
	}
	host, _, _ := unstructured.NestedString(cluster.Object, "spec", "controlPlaneEndpoint", "host")
	port, _, _ := unstructured.NestedInt64(cluster.Object, "spec", "controlPlaneEndpoint", "port")
	configs := &unstructured.UnstructuredList{}
	configs.SetGroupVersionKind(kubeadmConfigGVK.GroupVersion().WithKind("KubeadmConfigList"))
	if err := p.c.List(ctx, configs, client.InNamespace(p.namespace), client.MatchingLabels{testbed.ClusterNameLabel: p.clusterName}); err != nil {
		return err
	}
	var errs []error
	for i := range configs.Items {
		kc := &configs.Items[i]
		if created, _, _ := unstructured.NestedBool(kc.Object, "status", "initialization", "dataSecretCreated"); created || kc.GetDeletionTimestamp() != nil || !ownedByMachine(kc) {
			continue
		}
		errs = append(errs, p.writeBootstrapData(ctx, kc, net.JoinHostPort(host, strconv.FormatInt(port, 10))))
	}
	return errors.Join(errs...)
}

func ownedByMachine(o metav1.Object) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == testbed.MachineGVK.Kind {
			return true
		}
	}
	return false
}

// writeBootstrapData writes the KubeadmConfig's bootstrap data Secret and its status.
func (p *played) writeBootstrapData(ctx context.Context, kc *unstructured.Unstructured, endpoint string) error {
	data, err := bootstrapData(kc, endpoint)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: kc.GetNamespace(), Name: kc.GetName(),
			Labels: map[string]string{testbed.ClusterNameLabel: p.clusterName},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: kc.GetAPIVersion(), Kind: kc.GetKind(), Name: kc.GetName(), UID: kc.GetUID(),
				Controller: ptr.To(true)}}},
		Type: "cluster.x-k8s.io/secret",
		Data: map[string][]byte{"value": data, "format": []byte("cloud-config")},
	}
	if err := p.c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("KubeadmConfig %s: bootstrap data Secret: %w", kc.GetName(), err)
	}
	status, err := json.Marshal(map[string]any{"status": map[string]any{
		"initialization": map[string]any{"dataSecretCreated": true}, "dataSecretName": secret.Name,
	}})
	if err != nil {
		return err
	}
	if err := p.c.Status().Patch(ctx, kc, client.RawPatch(types.MergePatchType, status)); err != nil {
		return fmt.Errorf("KubeadmConfig %s status: %w", kc.GetName(), err)
	}
	p.say("  kubeadm bootstrap (played): bootstrap data Secret %s (format cloud-config, %d bytes) for KubeadmConfig %s; status.dataSecretName set", secret.Name, len(data), kc.GetName())
	return nil
}

// bootstrapData is the played kubeadm bootstrap data of a joining node: a cloud-config that writes
// the KubeadmConfig's spec.joinConfiguration as kubeadm's JoinConfiguration, discovering the
// control plane at endpoint, and runs kubeadm join with it. It holds no bootstrap token and no
// CA: the played provider issues none (nothing here runs kubeadm).
func bootstrapData(kc *unstructured.Unstructured, endpoint string) ([]byte, error) {
	join, _, _ := unstructured.NestedMap(kc.Object, "spec", "joinConfiguration")
	if join == nil {
		join = map[string]any{}
	}
	join["apiVersion"], join["kind"] = "kubeadm.k8s.io/v1beta4", "JoinConfiguration"
	join["discovery"] = map[string]any{"bootstrapToken": map[string]any{"apiServerEndpoint": endpoint}}
	nodeRegistration, _ := join["nodeRegistration"].(map[string]any)
	if nodeRegistration == nil {
		nodeRegistration = map[string]any{}
	}
	nodeRegistration["name"] = "{{ ds.meta_data.local_hostname }}" // as kubeadm's bootstrap writes it
	join["nodeRegistration"] = nodeRegistration
	joinYAML, err := yaml.Marshal(join)
	if err != nil {
		return nil, err
	}
	cloudConfig, err := yaml.Marshal(map[string]any{
		"write_files": []any{map[string]any{
			"path": "/run/kubeadm/kubeadm-join-config.yaml", "owner": "root:root", "permissions": "0640", "content": string(joinYAML),
		}},
		"runcmd": []any{"kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml"},
	})
	if err != nil {
		return nil, err
	}
	header := fmt.Sprintf("## template: jinja\n#cloud-config\n# Bootstrap data of KubeadmConfig %s/%s, played by test/demo (make demo-capi) as Cluster API's kubeadm\n# bootstrap provider would write it, but with no bootstrap token (none is issued: no kubeadm runs in the demo).\n",
		kc.GetNamespace(), kc.GetName())
	return append([]byte(header), cloudConfig...), nil
}

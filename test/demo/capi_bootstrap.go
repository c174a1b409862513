package main

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// checkJoinData checks the bootstrap data Cluster API's kubeadm bootstrap provider wrote for each
// Machine (the Secret its spec.bootstrap.dataSecretName names, which this provider hands the VM as
// cloud-init user data) against the tenant cluster, as kubeadm join would rely on it: the tenant
// API server's endpoint (the hosted control plane's), a bootstrap token the tenant holds, and the hash of the cluster CA
// Steward handed over. It prints what it found without the token's secret half.
func (c *capiDemo) checkJoinData(ctx context.Context) error {
	machines := &unstructured.UnstructuredList{}
	machines.SetGroupVersionKind(testbed.MachineGVK.GroupVersion().WithKind("MachineList"))
	if err := c.tb.Mgmt.List(ctx, machines, client.InNamespace(testbed.Namespace), client.MatchingLabels{testbed.ClusterNameLabel: capiCluster}); err != nil {
		return err
	}
	endpoint, err := c.tenant.Endpoint()
	if err != nil {
		return err
	}
	for _, m := range machines.Items {
		name, _, _ := unstructured.NestedString(m.Object, "spec", "bootstrap", "dataSecretName")
		if name == "" {
			return fmt.Errorf("the Machine %s has no spec.bootstrap.dataSecretName", m.GetName())
		}
		secret := &corev1.Secret{}
		if err := c.tb.Mgmt.Get(ctx, client.ObjectKey{Namespace: m.GetNamespace(), Name: name}, secret); err != nil {
			return err
		}
		join, err := c.tenant.CheckKubeadmJoin(ctx, secret.Data["value"], endpoint)
		if err != nil {
			return fmt.Errorf("the bootstrap data %s of the Machine %s would not join the tenant: %w", name, m.GetName(), err)
		}
		id, _, _ := strings.Cut(join.Token, ".")
		c.say("  %s: bootstrap data %s (kubeadm bootstrap provider) joins %s with bootstrap token %s.<secret> (held by the tenant) and CA pin %s", m.GetName(), name, join.APIServerEndpoint, id, join.CACertHashes[0])
	}
	return nil
}

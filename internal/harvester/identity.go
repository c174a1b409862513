package harvester

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// identityNamespace is the namespace whose UID identifies a cluster: every Kubernetes cluster has
// one, it is never deleted, and its UID is the same however the cluster is reached.
const identityNamespace = metav1.NamespaceSystem

// ClusterIdentity names a Harvester cluster.
type ClusterIdentity struct {
	// ID is the UID of the cluster's kube-system namespace. It stays the same whichever URL or
	// credentials reach the cluster (its VIP, a DNS name, Rancher's proxy), so a machine recorded
	// with it is recognised after credentials are rotated or the endpoint changes, and never
	// looked for on another cluster.
	ID string
	// Server is the API server URL the client talks to, for messages.
	Server string
}

// identity reads a cluster's identity once per client; a failed read is tried again next time.
type identity struct {
	c      client.Reader
	server string

	mu sync.Mutex
	id string
}

func (i *identity) Identity(ctx context.Context) (ClusterIdentity, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.id == "" {
		ns := &corev1.Namespace{}
		if err := i.c.Get(ctx, client.ObjectKey{Name: identityNamespace}, ns); err != nil {
			return ClusterIdentity{}, classify(err, "get Namespace "+identityNamespace+" (which identifies the cluster)")
		}
		i.id = string(ns.UID)
	}
	return ClusterIdentity{ID: i.id, Server: i.server}, nil
}

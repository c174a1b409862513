package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// deletionProgress samples, every second while everything is deleted, how many machines of the
// front door (MachineRequests, Machines; none in the direct runs), VMs, disks (PVCs) and Secrets
// are left, so that a slow deletion shows which step it waits on. It lists metadata only, to cost
// the API servers little.
type deletionProgress struct {
	what    string
	mu      sync.Mutex
	samples []string
	stop    func()
}

// managementCount is what deletion progress counts on the management cluster: what (plural), as
// a list kind and list options select them.
type managementCount struct {
	what string
	list schema.GroupVersionKind
	opts []client.ListOption
}

// sampleDeletion starts sampling; mgmt is nil when there is nothing to count on the management
// cluster.
func sampleDeletion(ctx context.Context, tb *testbed.Testbed, mgmt *managementCount) *deletionProgress {
	p := &deletionProgress{what: "VMs/disks/Secrets"}
	if mgmt != nil {
		p.what = mgmt.what + "/" + p.what
	}
	p.stop = everySecond(ctx, func(ctx context.Context) {
		counts := []string{}
		if mgmt != nil {
			counts = append(counts, count(ctx, tb.Mgmt, mgmt.list, mgmt.opts...))
		}
		for _, gvk := range []schema.GroupVersionKind{
			kubevirtv1.GroupVersion.WithKind("VirtualMachineList"),
			corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList"),
			corev1.SchemeGroupVersion.WithKind("SecretList"),
		} {
			counts = append(counts, count(ctx, tb.Harvester.Client, gvk, client.InNamespace(testbed.HarvesterNamespace)))
		}
		p.mu.Lock()
		p.samples = append(p.samples, strings.Join(counts, "/"))
		p.mu.Unlock()
	})
	return p
}

// count is how many objects of a list kind the options select ("?" if they cannot be listed).
func count(ctx context.Context, c client.Reader, listGVK schema.GroupVersionKind, opts ...client.ListOption) string {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(listGVK)
	if err := c.List(ctx, list, opts...); err != nil {
		return "?"
	}
	return fmt.Sprint(len(list.Items))
}

// finish stops sampling and says what was left every second.
func (p *deletionProgress) finish() string {
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.what + " left every second: " + strings.Join(p.samples, " ")
}

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

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// deletionProgress samples, every second while everything is deleted, how many MachineRequests,
// VMs, disks (PVCs) and Secrets are left, so that a slow deletion shows which step it waits on.
// It lists metadata only, to cost the API servers little.
type deletionProgress struct {
	mu      sync.Mutex
	samples []string
	stop    func()
}

func sampleDeletion(ctx context.Context, tb *testbed.Testbed, withManagement bool) *deletionProgress {
	p := &deletionProgress{}
	p.stop = everySecond(ctx, func(ctx context.Context) {
		counts := []string{}
		if withManagement {
			counts = append(counts, count(ctx, tb.Mgmt, v1alpha1.GroupVersion.WithKind("MachineRequestList"), testbed.Namespace))
		}
		for _, gvk := range []schema.GroupVersionKind{
			kubevirtv1.GroupVersion.WithKind("VirtualMachineList"),
			corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaimList"),
			corev1.SchemeGroupVersion.WithKind("SecretList"),
		} {
			counts = append(counts, count(ctx, tb.Harvester.Client, gvk, testbed.HarvesterNamespace))
		}
		p.mu.Lock()
		p.samples = append(p.samples, strings.Join(counts, "/"))
		p.mu.Unlock()
	})
	return p
}

// count is how many objects of a list kind are in a namespace ("?" if they cannot be listed).
func count(ctx context.Context, c client.Reader, listGVK schema.GroupVersionKind, namespace string) string {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(listGVK)
	if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return "?"
	}
	return fmt.Sprint(len(list.Items))
}

// finish stops sampling and says what was left every second.
func (p *deletionProgress) finish(withManagement bool) string {
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	what := "VMs/disks/Secrets"
	if withManagement {
		what = "MachineRequests/" + what
	}
	return what + " left every second: " + strings.Join(p.samples, " ")
}

package integration

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// Invalid field values are rejected by the CRD schema on the real API server, with a message
// naming the field; nothing reaches the provider.
func TestSchemaRejectsBadInput(t *testing.T) {
	w := newWorld(t)
	mr := func(mutate func(*v1alpha1.MachineRequest)) client.Object {
		m := w.machineRequest("bad-input")
		mutate(m)
		return m
	}
	pc := func(mutate func(*v1alpha1.ProviderConfig)) client.Object {
		p := w.pc.DeepCopy()
		p.ObjectMeta = metav1.ObjectMeta{Name: "bad-input", Namespace: w.ns}
		mutate(p)
		return p
	}
	for name, tc := range map[string]struct {
		obj   client.Object
		field string
	}{
		"machineName upper case":        {mr(func(m *v1alpha1.MachineRequest) { m.Spec.MachineName = "CP-0" }), "spec.machineName"},
		"machineName too long":          {mr(func(m *v1alpha1.MachineRequest) { m.Spec.MachineName = strings.Repeat("a", 64) }), "spec.machineName"},
		"machineName empty":             {mr(func(m *v1alpha1.MachineRequest) { m.Spec.MachineName = "" }), "spec.machineName"},
		"role unknown":                  {mr(func(m *v1alpha1.MachineRequest) { m.Spec.Role = "controlplane" }), "spec.role"},
		"cpu zero":                      {mr(func(m *v1alpha1.MachineRequest) { m.Spec.CPU = 0 }), "spec.cpu"},
		"cpu above 128":                 {mr(func(m *v1alpha1.MachineRequest) { m.Spec.CPU = 129 }), "spec.cpu"},
		"memory below 1024 MB":          {mr(func(m *v1alpha1.MachineRequest) { m.Spec.MemoryMB = 512 }), "spec.memoryMB"},
		"disk below 10 GB":              {mr(func(m *v1alpha1.MachineRequest) { m.Spec.DiskGB = 5 }), "spec.diskGB"},
		"extra disk of 0 GB":            {mr(func(m *v1alpha1.MachineRequest) { m.Spec.ExtraDisks = []v1alpha1.DiskSpec{{SizeGB: 0}} }), "spec.extraDisks[0].sizeGB"},
		"providerRef without name":      {mr(func(m *v1alpha1.MachineRequest) { m.Spec.ProviderRef.Name = "" }), "spec.providerRef.name"},
		"provider unknown":              {pc(func(p *v1alpha1.ProviderConfig) { p.Spec.Provider = "vsphere" }), "spec.provider"},
		"harvester without credentials": {pc(func(p *v1alpha1.ProviderConfig) { p.Spec.CredentialsRef = nil }), "credentialsRef"},
		"networkName not ns/name":       {pc(func(p *v1alpha1.ProviderConfig) { p.Spec.Harvester.NetworkName = "vlan40" }), "spec.harvester.networkName"},
	} {
		t.Run(name, func(t *testing.T) {
			err := mgmt.Create(w.ctx, tc.obj)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("want Invalid naming %s, got %v", tc.field, err)
			}
		})
	}
	w.requireHarvesterEmpty("created on Harvester")
}

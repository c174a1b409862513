package integration

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// The first control plane node of a management cluster on a VLAN without DHCP, as a bootstrap
// sends it: a MachineRequest with Talos's machine configuration as userData and the node's static
// address as networkData (cloud-init network configuration, version 2, the NIC by the name the
// guest gives it). networkData reaches the VM's NoCloud disk unchanged; the guest configures the
// address; status.ipAddress is the node's own address, as the guest agent reports it, and nothing
// the provider read from networkData.
func TestStaticAddressWithoutDHCP(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("mgmt-cp-0")
	mr.Spec.UserData = "version: v1alpha1\nmachine:\n  type: controlplane\n"
	mr.Spec.NetworkData = `version: 2
ethernets:
  eth0:
    dhcp4: false
    addresses: [10.40.0.50/24]
    gateway4: 10.40.0.1
    nameservers: {addresses: [10.40.0.2]}
`
	// The VLAN has no DHCP server: the simulated guest gets no lease.
	mr.Spec.Labels = map[string]string{sim.AnnotationFault: sim.FaultNoDHCP}
	w.must(mgmt.Create(w.ctx, mr))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	if got.Status.IPAddress != "10.40.0.50" || len(got.Status.IPAddresses) == 0 || got.Status.IPAddresses[0] != "10.40.0.50" {
		t.Fatalf("ipAddress %q, ipAddresses %v, want the node's own 10.40.0.50", got.Status.IPAddress, got.Status.IPAddresses)
	}
	secret := &corev1.Secret{}
	w.must(hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: "mgmt-cp-0-cloudinit"}, secret))
	if string(secret.Data["networkdata"]) != mr.Spec.NetworkData || !strings.HasPrefix(string(secret.Data["userdata"]), "version: v1alpha1") {
		t.Fatalf("cloud-init Secret: networkdata %q, userdata %q", secret.Data["networkdata"], secret.Data["userdata"])
	}
	w.deleteAndWait(mr)
}

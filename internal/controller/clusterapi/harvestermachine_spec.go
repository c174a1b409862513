package clusterapi

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// Keys of a Cluster API bootstrap data Secret (Cluster API's bootstrap provider contract).
const (
	bootstrapValueKey  = "value"
	bootstrapFormatKey = "format"
	// bootstrapFormatCloudConfig is the only format the provider delivers (through cloud-init
	// NoCloud, from a Secret: no size limit below a Secret's).
	bootstrapFormatCloudConfig = "cloud-config"
)

// bootstrapUserData reads a machine's bootstrap data from its Secret: key "value", whose key
// "format" must be cloud-config (or absent, which Cluster API reads as cloud-config).
func bootstrapUserData(secret *corev1.Secret) (string, error) {
	where := fmt.Sprintf("bootstrap data Secret %s/%s", secret.Namespace, secret.Name)
	value, ok := secret.Data[bootstrapValueKey]
	if !ok || len(value) == 0 {
		return "", errkind.Waiting(infrav1.ReasonWaitingForBootstrapData, requeue.ProviderConfigRetry,
			"%s has no key %q yet: the bootstrap provider writes it", where, bootstrapValueKey)
	}
	if format := string(secret.Data[bootstrapFormatKey]); format != "" && format != bootstrapFormatCloudConfig {
		return "", errkind.Permanent(infrav1.ReasonInvalidSpec,
			"%s has format %q (key %q): the Harvester provider delivers %s only, through cloud-init NoCloud; use a bootstrap provider that writes %s",
			where, format, bootstrapFormatKey, bootstrapFormatCloudConfig, bootstrapFormatCloudConfig)
	}
	if len(value) > corev1.MaxSecretSize {
		return "", errkind.Permanent(infrav1.ReasonUserDataTooLarge,
			"%s holds %d bytes; a Secret holds at most %d", where, len(value), corev1.MaxSecretSize)
	}
	return string(value), nil
}

// harvesterMachineSpec describes a HarvesterMachine's VM for the engine, in the place the target
// names now (the caller puts it where the machine lives, if that is recorded). The VM is named
// after the HarvesterMachine: it is the guest's hostname and the tenant cluster's Node name, which
// is how Harvester's cloud provider and CSI driver find the VM of a Node.
func harvesterMachineSpec(hm *infrav1.HarvesterMachine, m capiMachine, t *target.Target, managementCluster string) (*harvester.MachineSpec, error) {
	nics, err := machineNICs(hm, t)
	if err != nil {
		return nil, err
	}
	image, err := machineImage(hm, t)
	if err != nil {
		return nil, err
	}
	role := "worker"
	if m.ControlPlane {
		role = "control-plane"
	}
	spec := &harvester.MachineSpec{
		Owner:               harvesterMachineOwner(hm, managementCluster),
		Namespace:           t.Credentials.Namespace,
		Name:                hm.Name,
		Role:                role,
		CPU:                 uint32(hm.Spec.CPU), //nolint:gosec // G115: the CRD bounds spec.cpu to 1..128, so it fits
		DedicatedCPUs:       hm.Spec.DedicatedCPUPlacement,
		CPUModel:            hm.Spec.CPUModel,
		Firmware:            machineFirmware(hm.Spec.Firmware),
		HostDevices:         deviceResources(hm.Spec.HostDevices),
		GPUs:                deviceResources(hm.Spec.GPUs),
		MemoryMB:            ceilUnits(hm.Spec.Memory, 1<<20),
		DiskGB:              ceilUnits(hm.Spec.RootDisk.Size, 1<<30),
		Image:               image,
		NICs:                nics,
		DefaultStorageClass: t.StorageClass,
		Labels:              hm.Spec.Labels,
	}
	for _, d := range hm.Spec.ExtraDisks {
		spec.ExtraDisks = append(spec.ExtraDisks, harvester.DiskSpec{SizeGB: ceilUnits(d.Size, 1<<30), StorageClass: d.StorageClassName})
	}
	return spec, nil
}

// machineFirmware is the engine's firmware of spec.firmware (nil: BIOS, no TPM).
func machineFirmware(f *infrav1.Firmware) harvester.Firmware {
	if f == nil {
		return harvester.Firmware{}
	}
	return harvester.Firmware{
		UEFI: f.Boot == infrav1.FirmwareUEFI, SecureBoot: f.SecureBoot, PersistentEFI: f.PersistentEFI,
		TPM: f.TPM != "", PersistentTPM: f.TPM == infrav1.TPMPersistent,
	}
}

// deviceResources are the Harvester device resources of the machine's devices, in order (nil for
// none). The Node resources they come with are the template's capacity, none of the VM's.
func deviceResources(devices []infrav1.PassthroughDevice) []string {
	if len(devices) == 0 {
		return nil
	}
	out := make([]string, 0, len(devices))
	for _, d := range devices {
		out = append(out, d.DeviceName)
	}
	return out
}

// failureDomainNodes returns the node labels of the failure domain the Machine places the
// machine in (nil for a Machine that names none: any node), as the HarvesterCluster hc defines
// it. A failure domain hc does not define is a wait that names the Machine, the field, the
// failure domains there are and the fix: the Cluster API contract has a machine placed in its
// Machine's failure domain, never elsewhere.
func failureDomainNodes(namespace string, m capiMachine, hc *infrav1.HarvesterCluster) (map[string]string, error) {
	if m.FailureDomain == "" {
		return nil, nil
	}
	if nodes, ok := hc.Spec.NodeSelectorFor(m.FailureDomain); ok {
		return nodes, nil
	}
	known := "it defines none"
	if len(hc.Spec.FailureDomains) > 0 {
		names := make([]string, 0, len(hc.Spec.FailureDomains))
		for _, fd := range hc.Spec.FailureDomains {
			names = append(names, fd.Name)
		}
		known = "it defines " + strings.Join(names, ", ")
	}
	return nil, errkind.Waiting(infrav1.ReasonFailureDomainNotFound, capiWaitingRetry,
		"spec.failureDomain %q of Machine %s/%s is not one of spec.failureDomains of HarvesterCluster %s/%s (%s): add a failure domain named %q to the HarvesterCluster, with the labels of the Harvester nodes it stands for in its nodeSelector, or set the Machine's spec.failureDomain to one it defines; nothing is created until then",
		m.FailureDomain, namespace, m.Name, hc.Namespace, hc.Name, known, m.FailureDomain)
}

// ceilUnits is q in units of unit bytes, rounded up: a machine never gets less than it asked for.
func ceilUnits(q resource.Quantity, unit int64) int64 {
	return (q.Value() + unit - 1) / unit
}

// machineNICs are the machine's NICs on their networks, their addressing still to come
// (configureNICs): spec.interfaces', else one on spec.networks' first, else one on the
// ProviderConfig's network.
func machineNICs(hm *infrav1.HarvesterMachine, t *target.Target) ([]harvester.NIC, error) {
	if len(hm.Spec.Interfaces) == 0 {
		network, err := machineNetwork(hm, t)
		return []harvester.NIC{{Network: network}}, err
	}
	nics := make([]harvester.NIC, 0, len(hm.Spec.Interfaces))
	for i, iface := range hm.Spec.Interfaces {
		ref, err := harvester.ParseObjectRef(iface.Network, "")
		if err != nil {
			return nil, errkind.Permanent(infrav1.ReasonInvalidSpec, "spec.interfaces[%d].network: %v", i, err)
		}
		nics = append(nics, harvester.NIC{Network: ref})
	}
	return nics, nil
}

// machineNetwork is the machine's network: its spec.networks' first, else the ProviderConfig's.
func machineNetwork(hm *infrav1.HarvesterMachine, t *target.Target) (harvester.ObjectRef, error) {
	if len(hm.Spec.Networks) == 0 {
		return t.Network()
	}
	ref, err := harvester.ParseObjectRef(hm.Spec.Networks[0], "")
	if err != nil {
		return ref, errkind.Permanent(infrav1.ReasonInvalidSpec, "spec.networks[0]: %v", err)
	}
	return ref, nil
}

// machineImage is the machine's image: its spec.image, else the ProviderConfig's default.
func machineImage(hm *infrav1.HarvesterMachine, t *target.Target) (harvester.ObjectRef, error) {
	if hm.Spec.Image != "" {
		ref, err := target.ParseImage(hm.Spec.Image, t.Credentials.Namespace)
		if err != nil {
			return ref, errkind.Permanent(infrav1.ReasonInvalidSpec, "spec.image: %v", err)
		}
		return ref, nil
	}
	ref, err := t.DefaultImage()
	if err != nil {
		return harvester.ObjectRef{}, err
	}
	if ref == nil {
		return harvester.ObjectRef{}, target.InvalidProviderConfig(t.Ref,
			"has no spec.harvester.imageName and the HarvesterMachine has no spec.image: set one of them to \"<namespace>/<name>\" of a VirtualMachineImage")
	}
	return *ref, nil
}

// machineAddresses are a running machine's addresses as Cluster API reads them: the VM's IPv4
// machineAddresses are a machine's addresses for Cluster API: the addresses its pools assigned
// (the primary NIC's first), then those the guest agent reports on its primary NIC, each once, as
// InternalIP; and the VM's name as Hostname.
func machineAddresses(vmName string, assigned [][]assignedAddress, guest harvester.Addresses) []infrav1.MachineAddress {
	var out []infrav1.MachineAddress
	seen := map[string]bool{}
	add := func(ip string) {
		if !seen[ip] {
			seen[ip] = true
			out = append(out, infrav1.MachineAddress{Type: infrav1.MachineInternalIP, Address: ip})
		}
	}
	for _, nic := range assigned {
		for _, a := range nic {
			add(a.Prefix.Addr().String())
		}
	}
	for _, ip := range guest.All {
		add(ip)
	}
	return append(out, infrav1.MachineAddress{Type: infrav1.MachineHostName, Address: vmName})
}

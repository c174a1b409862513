package machinerequest

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/providerconfig"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// reservedLabelPrefixes are label prefixes the provider and Harvester own on the VM.
var reservedLabelPrefixes = []string{"butler.butlerlabs.dev/", "harvesterhci.io/", "kubevirt.io/"}

// ownerOf identifies the MachineRequest on Harvester. A MachineRequest the published provider
// served is recognised by its status: a providerID that is a bare UID, or, since it can reach
// Running without writing one, a status past Pending with nothing this provider records (it
// records the place before it creates anything): its VM is then adopted by name.
//
// managementCluster identifies the management cluster the objects are labelled with; the
// MachineRequest's AnnotationHandOver lets it take over objects another one made.
func ownerOf(mr *v1alpha1.MachineRequest, managementCluster string) harvester.Owner {
	return harvester.Owner{
		Namespace: mr.Namespace, Name: mr.Name, UID: mr.UID,
		LegacyProviderID: legacyProviderID(mr.Status.ProviderID),
		AdoptByName:      !placeRecorded(mr) && !nothingCreated(mr.Status),
		Cluster:          managementCluster,
		HandOver:         mr.Annotations[v1alpha1.AnnotationHandOver] == "true",
	}
}

func providerConfigRef(mr *v1alpha1.MachineRequest) string {
	namespace, name := mr.ProviderConfigKey()
	return namespace + "/" + name
}

// machineTarget is what the MachineRequest's ProviderConfig points at (see resolveProviderConfig).
func machineTarget(mr *v1alpha1.MachineRequest, pc *v1alpha1.ProviderConfig) (*target.Target, error) {
	return target.ResolveProviderConfig(pc, providerConfigRef(mr), "spec.providerRef")
}

// machineSpecFor derives what to create on Harvester from a MachineRequest and its ProviderConfig,
// in the place the ProviderConfig names now (the caller puts it where the machine lives, if that
// is recorded). Problems of the MachineRequest are permanent (fixed by changing its spec);
// problems of the ProviderConfig are waits.
func machineSpecFor(mr *v1alpha1.MachineRequest, pc *v1alpha1.ProviderConfig, consumer target.Consumer, managementCluster string) (*harvester.MachineSpec, harvester.Credentials, error) {
	t, err := machineTarget(mr, pc)
	if err != nil {
		return nil, harvester.Credentials{}, err
	}
	creds := t.Credentials
	if pc.Spec.Provider != v1alpha1.ProviderTypeHarvester {
		return nil, creds, errkind.Waiting(v1alpha1.ReasonProviderConfigMoved, requeue.ProviderConfigRetry,
			"ProviderConfig %s now says provider %q: the Harvester provider creates nothing more for this MachineRequest; delete it, or set the ProviderConfig's provider back to \"harvester\"",
			t.Ref, pc.Spec.Provider)
	}
	network, err := t.Network()
	if err != nil {
		return nil, creds, err
	}
	image, err := imageFor(mr, t)
	if err != nil {
		return nil, creds, err
	}
	if err := validateRequest(mr); err != nil {
		return nil, creds, err
	}
	spec := &harvester.MachineSpec{
		Owner:               ownerOf(mr, managementCluster),
		Namespace:           creds.Namespace,
		Name:                mr.Spec.MachineName,
		Role:                string(mr.Spec.Role),
		CPU:                 uint32(mr.Spec.CPU), //nolint:gosec // G115: the CRD bounds spec.cpu to 1..128, so it fits
		MemoryMB:            int64(mr.Spec.MemoryMB),
		DiskGB:              int64(mr.Spec.DiskGB),
		Image:               image,
		NICs:                []harvester.NIC{{Network: network}},
		DefaultStorageClass: t.StorageClass,
		UserData:            mr.Spec.UserData,
		NetworkData:         mr.Spec.NetworkData,
		Labels:              mr.Spec.Labels,
		Door:                requestGate{t: t, mr: mr, consumer: consumer},
	}
	for _, d := range mr.Spec.ExtraDisks {
		spec.ExtraDisks = append(spec.ExtraDisks, harvester.DiskSpec{SizeGB: int64(d.SizeGB), StorageClass: d.StorageClass})
	}
	return spec, creds, nil
}

// specFor is machineSpecFor of the scope's MachineRequest, with who its namespace is to its
// ProviderConfig (read only for a team's ProviderConfig of another namespace).
func (r *Reconciler) specFor(ctx context.Context, s *machineScope) (*harvester.MachineSpec, harvester.Credentials, error) {
	consumer, err := target.ConsumerOf(ctx, r.live, s.pc, s.mr.Namespace)
	if err != nil {
		return nil, harvester.Credentials{}, err
	}
	return machineSpecFor(s.mr, s.pc, consumer, r.managementCluster)
}

// requestGate is the door of a MachineRequest (MachineSpec.Door) as machineSpecFor gives it: a
// harvester.CreationGate, and nothing more (the engine records no place for it). A machine with
// nothing recorded gets an unrecordedRequest instead, which records its place too.
type requestGate struct {
	t        *target.Target
	mr       *v1alpha1.MachineRequest
	consumer target.Consumer
}

// Gate holds up the creation of a machine until its ProviderConfig may be used by it and passes
// its checks. It judges machines without a VM only: one that exists is observed and deleted
// whatever the ProviderConfig's checks say now.
func (g requestGate) Gate(context.Context) error {
	if err := target.SharedWith(g.t.ProviderConfig, g.consumer, "MachineRequests", "spec.providerRef"); err != nil {
		return err
	}
	return providerconfig.PreflightGate(g.t.ProviderConfig, g.mr.Spec.Image == "")
}

// imageFor picks the MachineRequest's image, else the ProviderConfig's default.
func imageFor(mr *v1alpha1.MachineRequest, t *target.Target) (harvester.ObjectRef, error) {
	if mr.Spec.Image != "" {
		ref, err := target.ParseImage(mr.Spec.Image, t.Credentials.Namespace)
		if err != nil {
			return ref, errkind.Permanent(v1alpha1.ReasonInvalidSpec, "spec.image: %v", err)
		}
		return ref, nil
	}
	image, err := t.DefaultImage()
	switch {
	case err != nil:
		return harvester.ObjectRef{}, err
	case image == nil:
		return harvester.ObjectRef{}, target.InvalidProviderConfig(t.Ref,
			"has no spec.harvester.imageName and the MachineRequest has no spec.image: set one of them to \"<namespace>/<name>\" of a VirtualMachineImage")
	}
	return *image, nil
}

// validateRequest checks what the published schema lets through but Harvester would refuse.
func validateRequest(mr *v1alpha1.MachineRequest) error {
	if size := len(mr.Spec.UserData) + len(mr.Spec.NetworkData); size > corev1.MaxSecretSize {
		return errkind.Permanent(v1alpha1.ReasonUserDataTooLarge,
			"spec.userData and spec.networkData are %d bytes together; a Secret holds at most %d: shrink the machine configuration", size, corev1.MaxSecretSize)
	}
	for k, v := range mr.Spec.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return errkind.Permanent(v1alpha1.ReasonInvalidSpec, "spec.labels: key %q is not a valid label key: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return errkind.Permanent(v1alpha1.ReasonInvalidSpec, "spec.labels[%q]: %q is not a valid label value: %s", k, v, strings.Join(errs, "; "))
		}
		for _, p := range reservedLabelPrefixes {
			if strings.HasPrefix(k, p) {
				return errkind.Permanent(v1alpha1.ReasonInvalidSpec, "spec.labels: key %q uses the reserved prefix %q: choose another key", k, p)
			}
		}
	}
	return nil
}

// legacyProviderID returns a providerID written by the published provider (a bare VM UID).
func legacyProviderID(id string) string {
	if id == "" || strings.HasPrefix(id, harvester.ProviderIDPrefix) {
		return ""
	}
	return id
}

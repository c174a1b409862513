package controller

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// providerConfigRetry is how soon to look again at a missing or unusable ProviderConfig (its
// watch usually wakes us earlier).
const providerConfigRetry = time.Minute

// blockedDeletionRetry is how soon a blocked deletion is tried again.
const blockedDeletionRetry = 30 * time.Second

// reservedLabelPrefixes are label prefixes the provider and Harvester own on the VM.
var reservedLabelPrefixes = []string{"butler.butlerlabs.dev/", "harvesterhci.io/", "kubevirt.io/"}

// credentialsFor locates the credentials of the MachineRequest's ProviderConfig, with
// Namespace set to the Harvester namespace where new machines are created. Only the
// ProviderConfig can be at fault here, so every problem is a wait: it is fixed there, which wakes
// the MachineRequest through the watch.
func credentialsFor(mr *v1alpha1.MachineRequest, pc *v1alpha1.ProviderConfig) (harvester.Credentials, error) {
	pcRef := providerConfigRef(mr)
	if pc == nil {
		return harvester.Credentials{}, harvester.Waiting(v1alpha1.ReasonProviderConfigNotFound, providerConfigRetry,
			"ProviderConfig %s (spec.providerRef) does not exist: create it or correct spec.providerRef", pcRef)
	}
	if _, err := harvesterOf(pc, pcRef); err != nil {
		return harvester.Credentials{}, err
	}
	return credentialsOf(pc, pcRef)
}

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

// machineSpecFor derives what to create on Harvester from a MachineRequest and its ProviderConfig,
// in the place the ProviderConfig names now (the caller puts it where the machine lives, if that
// is recorded). Problems of the MachineRequest are permanent (fixed by changing its spec);
// problems of the ProviderConfig are waits.
func machineSpecFor(mr *v1alpha1.MachineRequest, pc *v1alpha1.ProviderConfig, managementCluster string) (*harvester.MachineSpec, harvester.Credentials, error) {
	creds, err := credentialsFor(mr, pc)
	if err != nil {
		return nil, creds, err
	}
	if pc.Spec.Provider != v1alpha1.ProviderTypeHarvester {
		return nil, creds, harvester.Waiting(v1alpha1.ReasonProviderConfigMoved, providerConfigRetry,
			"ProviderConfig %s now says provider %q: the Harvester provider creates nothing more for this MachineRequest; delete it, or set the ProviderConfig's provider back to \"harvester\"",
			providerConfigRef(mr), pc.Spec.Provider)
	}
	pcRef := providerConfigRef(mr)
	hv := pc.Spec.Harvester
	network, err := harvester.ParseObjectRef(hv.NetworkName, "")
	if err != nil {
		return nil, creds, invalidProviderConfig(pcRef, "spec.harvester.networkName: "+err.Error())
	}
	image, err := imageFor(mr, hv, creds.Namespace, pcRef)
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
		Network:             network,
		DefaultStorageClass: hv.StorageClassName,
		UserData:            mr.Spec.UserData,
		NetworkData:         mr.Spec.NetworkData,
		Labels:              mr.Spec.Labels,
		Gate:                creationGate(pc, mr),
	}
	for _, d := range mr.Spec.ExtraDisks {
		spec.ExtraDisks = append(spec.ExtraDisks, harvester.DiskSpec{SizeGB: int64(d.SizeGB), StorageClass: d.StorageClass})
	}
	return spec, creds, nil
}

// creationGate holds up the creation of a machine until its ProviderConfig may be used by it and
// passes its checks. It judges machines without a VM only: one that exists is observed and
// deleted whatever the ProviderConfig's checks say now.
func creationGate(pc *v1alpha1.ProviderConfig, mr *v1alpha1.MachineRequest) func() error {
	return func() error {
		if err := sharedWith(pc, mr.Namespace, "MachineRequests", "spec.providerRef"); err != nil {
			return err
		}
		return preflightGate(pc, mr.Spec.Image == "")
	}
}

// sharedWith enforces who may use a ProviderConfig: MachineRequests and ImageSyncs (kinds) of its
// own namespace, and of any namespace when its spec.scope.type is "platform". An object in another
// namespace could otherwise use credentials its author cannot read. The policy gates creation
// only: machines that exist are still observed and deleted.
func sharedWith(pc *v1alpha1.ProviderConfig, namespace, kinds, refField string) error {
	if pc.Namespace == namespace || (pc.Spec.Scope != nil && pc.Spec.Scope.Type == v1alpha1.ProviderConfigScopePlatform) {
		return nil
	}
	return harvester.Waiting(v1alpha1.ReasonProviderConfigNotShared, providerConfigRetry,
		"ProviderConfig %s/%s (%s) is in another namespace and not shared: set its spec.scope.type to \"platform\" to let %s of other namespaces use it, or use a ProviderConfig in namespace %s",
		pc.Namespace, pc.Name, refField, kinds, namespace)
}

// harvesterOf returns the ProviderConfig's harvester block, which a harvester ProviderConfig needs.
func harvesterOf(pc *v1alpha1.ProviderConfig, pcRef string) (*v1alpha1.HarvesterProviderConfig, error) {
	if pc.Spec.Harvester == nil {
		return nil, invalidProviderConfig(pcRef, "has no spec.harvester block: add one with at least harvester.networkName")
	}
	return pc.Spec.Harvester, nil
}

// credentialsOf locates the ProviderConfig's credentials, with the documented defaults.
func credentialsOf(pc *v1alpha1.ProviderConfig, pcRef string) (harvester.Credentials, error) {
	ref := pc.Spec.CredentialsRef
	if ref == nil || ref.Name == "" {
		return harvester.Credentials{}, invalidProviderConfig(pcRef, "has no spec.credentialsRef: name the Secret holding the Harvester kubeconfig")
	}
	if ref.Namespace != "" && ref.Namespace != pc.Namespace {
		// Whoever may write a ProviderConfig must not be able to use a Secret they could not read.
		return harvester.Credentials{}, invalidProviderConfig(pcRef, fmt.Sprintf(
			"spec.credentialsRef.namespace is %q: the credentials Secret must be in the ProviderConfig's own namespace %q; copy the Secret there", ref.Namespace, pc.Namespace))
	}
	creds := harvester.Credentials{SecretNamespace: ref.Namespace, SecretName: ref.Name, Key: ref.Key, Namespace: "default"}
	if pc.Spec.Harvester != nil {
		creds.Endpoint = pc.Spec.Harvester.Endpoint
		creds.Namespace = namespaceOf(pc.Spec.Harvester)
	}
	if creds.SecretNamespace == "" {
		creds.SecretNamespace = pc.Namespace
	}
	if creds.Key == "" {
		creds.Key = v1alpha1.DefaultCredentialsKey
	}
	return creds, nil
}

// namespaceOf is the Harvester namespace machines are created in (default "default").
func namespaceOf(hv *v1alpha1.HarvesterProviderConfig) string {
	if hv.Namespace == "" {
		return "default"
	}
	return hv.Namespace
}

func invalidProviderConfig(pcRef, problem string) error {
	return harvester.Waiting(v1alpha1.ReasonInvalidProviderConfig, providerConfigRetry, "ProviderConfig %s %s", pcRef, problem)
}

// imageFor picks the MachineRequest's image, else the ProviderConfig's default.
func imageFor(mr *v1alpha1.MachineRequest, hv *v1alpha1.HarvesterProviderConfig, namespace, pcRef string) (harvester.ObjectRef, error) {
	if mr.Spec.Image != "" {
		ref, err := parseImage(mr.Spec.Image, namespace)
		if err != nil {
			return ref, harvester.Permanent(v1alpha1.ReasonInvalidSpec, "spec.image: %v", err)
		}
		return ref, nil
	}
	if hv.ImageName == "" {
		return harvester.ObjectRef{}, invalidProviderConfig(pcRef,
			"has no spec.harvester.imageName and the MachineRequest has no spec.image: set one of them to \"<namespace>/<name>\" of a VirtualMachineImage")
	}
	ref, err := parseImage(hv.ImageName, namespace)
	if err != nil {
		return ref, invalidProviderConfig(pcRef, "spec.harvester.imageName: "+err.Error())
	}
	return ref, nil
}

func parseImage(s, defaultNamespace string) (harvester.ObjectRef, error) {
	ref, err := harvester.ParseObjectRef(s, defaultNamespace)
	if err != nil {
		return ref, err
	}
	if errs := validation.IsDNS1123Label(ref.Namespace); len(errs) > 0 {
		return ref, fmt.Errorf("namespace %q of %q is not valid: %s", ref.Namespace, s, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(ref.Name); len(errs) > 0 {
		return ref, fmt.Errorf("name %q of %q is not valid: %s", ref.Name, s, strings.Join(errs, "; "))
	}
	return ref, nil
}

// validateRequest checks what the published schema lets through but Harvester would refuse.
func validateRequest(mr *v1alpha1.MachineRequest) error {
	if size := len(mr.Spec.UserData) + len(mr.Spec.NetworkData); size > corev1.MaxSecretSize {
		return harvester.Permanent(v1alpha1.ReasonUserDataTooLarge,
			"spec.userData and spec.networkData are %d bytes together; a Secret holds at most %d: shrink the machine configuration", size, corev1.MaxSecretSize)
	}
	for k, v := range mr.Spec.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return harvester.Permanent(v1alpha1.ReasonInvalidSpec, "spec.labels: key %q is not a valid label key: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return harvester.Permanent(v1alpha1.ReasonInvalidSpec, "spec.labels[%q]: %q is not a valid label value: %s", k, v, strings.Join(errs, "; "))
		}
		for _, p := range reservedLabelPrefixes {
			if strings.HasPrefix(k, p) {
				return harvester.Permanent(v1alpha1.ReasonInvalidSpec, "spec.labels: key %q uses the reserved prefix %q: choose another key", k, p)
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

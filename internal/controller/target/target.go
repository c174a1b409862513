package target

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/requeue"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// Target is what a harvester ProviderConfig points at, read in one place for every reconciler
// that uses one (ProviderConfig, MachineRequest, ImageSync): the same problem of a ProviderConfig
// then says the same wherever it is met. Only the ProviderConfig can be at fault here, so every
// problem is a wait: it is fixed there, which wakes its users through their watches.
//
// Who may use the ProviderConfig (sharedWith) and whether its checks let them create
// (preflightGate) are judged by its users, which know their kind.
type Target struct {
	// ProviderConfig is the ProviderConfig.
	ProviderConfig *v1alpha1.ProviderConfig
	// Ref is "<namespace>/<name>" of the ProviderConfig, as messages name it.
	Ref string
	// Credentials locate the credentials; Credentials.Namespace is the Harvester namespace where new
	// machines (and images) are created.
	Credentials harvester.Credentials
	// StorageClass is the default storage class of extra disks ("" for Harvester's default).
	StorageClass string
}

// ResolveProviderConfig reads pc, which its user names as pcRef ("<namespace>/<name>") in its
// field refField; pc is nil when it does not exist. It checks what reaching Harvester needs (the
// harvester block and the credentials reference, with the documented defaults); what only
// creation needs is checked by network and defaultImage, so that a machine that exists is still
// observed and deleted whatever they say.
func ResolveProviderConfig(pc *v1alpha1.ProviderConfig, pcRef, refField string) (*Target, error) {
	if pc == nil {
		return nil, errkind.Waiting(v1alpha1.ReasonProviderConfigNotFound, requeue.ProviderConfigRetry,
			"ProviderConfig %s (%s) does not exist: create it or correct %s", pcRef, refField, refField)
	}
	hv := pc.Spec.Harvester
	if hv == nil {
		return nil, InvalidProviderConfig(pcRef, "has no spec.harvester block: add one with at least harvester.networkName")
	}
	ref := pc.Spec.CredentialsRef
	if ref == nil || ref.Name == "" {
		return nil, InvalidProviderConfig(pcRef, "has no spec.credentialsRef: name the Secret holding the Harvester kubeconfig")
	}
	if ref.Namespace != "" && ref.Namespace != pc.Namespace {
		// Whoever may write a ProviderConfig must not be able to use a Secret they could not read.
		return nil, InvalidProviderConfig(pcRef, fmt.Sprintf(
			"spec.credentialsRef.namespace is %q: the credentials Secret must be in the ProviderConfig's own namespace %q; copy the Secret there", ref.Namespace, pc.Namespace))
	}
	creds := harvester.Credentials{SecretNamespace: pc.Namespace, SecretName: ref.Name, Key: ref.Key, Endpoint: hv.Endpoint, Namespace: hv.Namespace}
	if creds.Key == "" {
		creds.Key = v1alpha1.DefaultCredentialsKey
	}
	if creds.Namespace == "" {
		creds.Namespace = "default"
	}
	return &Target{ProviderConfig: pc, Ref: pcRef, Credentials: creds, StorageClass: hv.StorageClassName}, nil
}

// Network is the VM Network, spec.harvester.networkName.
func (t *Target) Network() (harvester.ObjectRef, error) {
	ref, err := harvester.ParseObjectRef(t.ProviderConfig.Spec.Harvester.NetworkName, "")
	if err != nil {
		return ref, InvalidProviderConfig(t.Ref, "spec.harvester.networkName: "+err.Error())
	}
	return ref, nil
}

// DefaultImage is the image of machines that name none, spec.harvester.imageName (nil if unset),
// in the Harvester namespace unless it names another.
func (t *Target) DefaultImage() (*harvester.ObjectRef, error) {
	name := t.ProviderConfig.Spec.Harvester.ImageName
	if name == "" {
		return nil, nil
	}
	ref, err := ParseImage(name, t.Credentials.Namespace)
	if err != nil {
		return nil, InvalidProviderConfig(t.Ref, "spec.harvester.imageName: "+err.Error())
	}
	return &ref, nil
}

// InvalidProviderConfig is the wait of an object whose ProviderConfig (pcRef) has a problem only
// its author can fix: the message names the ProviderConfig, the field and the fix (problem).
func InvalidProviderConfig(pcRef, problem string) error {
	return errkind.Waiting(v1alpha1.ReasonInvalidProviderConfig, requeue.ProviderConfigRetry, "ProviderConfig %s %s", pcRef, problem)
}

// ParseImage reads "<namespace>/<name>" (or "<name>", in defaultNamespace) of a
// VirtualMachineImage.
func ParseImage(s, defaultNamespace string) (harvester.ObjectRef, error) {
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

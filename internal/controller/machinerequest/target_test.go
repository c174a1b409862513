package machinerequest

import (
	"testing"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/providerconfig"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/target"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// A problem of a ProviderConfig says the same to the ProviderConfig's checks and to a
// MachineRequest that uses it: both read it with resolveProviderConfig.
func TestProviderConfigProblemSaysTheSameEverywhere(t *testing.T) {
	for name, change := range map[string]func(*v1alpha1.ProviderConfig){
		"no harvester block":        func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester = nil },
		"no credentialsRef":         func(pc *v1alpha1.ProviderConfig) { pc.Spec.CredentialsRef = nil },
		"Secret of another ns":      func(pc *v1alpha1.ProviderConfig) { pc.Spec.CredentialsRef.Namespace = "elsewhere" },
		"network not ns/name":       func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.NetworkName = "a/b/c" },
		"default image not a name":  func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.ImageName = "default/Talos_1" },
		"default image ns not a ns": func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.ImageName = "Default/talos" },
	} {
		t.Run(name, func(t *testing.T) {
			pc := harvesterPC(v1alpha1.ProviderTypeHarvester)
			change(pc)
			_, _, checks := providerconfig.PreflightTarget(pc)
			_, _, machine := machineSpecFor(machineRequest(), pc, target.Consumer{Namespace: machineRequest().Namespace}, "")
			w, ok := errkind.AsWaiting(checks)
			if !ok || w.Reason != v1alpha1.ReasonInvalidProviderConfig {
				t.Fatalf("checks: %v, want a wait with reason %s", checks, v1alpha1.ReasonInvalidProviderConfig)
			}
			if machine == nil || machine.Error() != checks.Error() {
				t.Fatalf("the MachineRequest is told %q, the checks %q", machine, checks)
			}
		})
	}
}

// What only creation needs (the network, the default image) does not keep a machine that exists
// from being reached: its credentials are located whatever those say.
func TestCreationOnlyFieldsDoNotHideTheCredentials(t *testing.T) {
	pc := harvesterPC(v1alpha1.ProviderTypeHarvester)
	pc.Spec.Harvester.NetworkName = "a/b/c"
	pc.Spec.Harvester.ImageName = "not/a/ref"
	got, err := machineTarget(machineRequest(), pc)
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Credentials; c.SecretNamespace != "butler-system" || c.SecretName != "harvester-kubeconfig" || c.Key != v1alpha1.DefaultCredentialsKey || c.Namespace != "vms" {
		t.Fatalf("credentials %+v; want Secret butler-system/harvester-kubeconfig, its default key, and Harvester namespace vms", c)
	}
}

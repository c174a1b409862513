package capi

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// TestClusterAPIRefusedMachineRechecksItsProviderConfig runs a Machine after its ProviderConfig
// passed its checks and its default image was deleted from Harvester since. The ProviderConfig is
// not polled (its recheck interval is a day): Harvester refusing the HarvesterMachine for a reason
// a check covers has the checks run again at once, so the ProviderConfig says ImageReady=False and
// holds up the machines still to come.
func TestClusterAPIRefusedMachineRechecksItsProviderConfig(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t)
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "harvester"}}
	conditions := func() []metav1.Condition { return pc.Status.Conditions }
	passed := w.waitCondition(pc, conditions, v1alpha1.ConditionReady, v1alpha1.ReasonAllChecksPassed)
	w.tenantCluster()

	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	image.SetNamespace("vms")
	image.SetName("ubuntu")
	w.must(w.hv.Client.Delete(w.ctx, image))
	time.Sleep(time.Second) // past the harness's RefusalRecheckGap: a refusal this soon after the last check asks for none

	w.machine("tenant-refused", "")
	failed := w.waitCondition(pc, conditions, v1alpha1.ConditionImageReady, v1alpha1.ReasonImageNotFound, "VirtualMachineImage vms/ubuntu")
	if !failed.LastTransitionTime.After(passed.LastTransitionTime.Time) {
		t.Fatalf("ImageReady went False at %s, not after the checks passed at %s", failed.LastTransitionTime, passed.LastTransitionTime)
	}
	w.waitCondition(pc, conditions, v1alpha1.ConditionReady, v1alpha1.ReasonChecksFailed, "ImageReady")
	w.readyCondition("tenant-refused", v1alpha1.ReasonImageNotFound, "vms/ubuntu")
}

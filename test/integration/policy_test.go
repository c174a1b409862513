package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// A ProviderConfig may not use a Secret of another namespace.
func TestCredentialsMustBeInTheProviderConfigsNamespace(t *testing.T) {
	w := newWorld(t)
	other := "other-" + rand.String(5)
	createNamespace(t, mgmt, other)
	w.must(mgmt.Create(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "borrowed", Namespace: other}, Data: map[string][]byte{"kubeconfig": harvesterConfig}}))
	pc := w.otherPC("borrower", func(pc *v1alpha1.ProviderConfig) {
		pc.Spec.CredentialsRef = &v1alpha1.SecretReference{Name: "borrowed", Namespace: other}
	})
	c := w.waitPCCondition(pc, v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidProviderConfig)
	requireMentions(t, "CredentialsValid message", c.Message, "spec.credentialsRef.namespace", other, "own namespace")
}

// A MachineRequest may use a ProviderConfig of another namespace only if it is shared
// (spec.scope.type platform).
func TestProviderConfigOfAnotherNamespaceMustBeShared(t *testing.T) {
	w := newWorld(t)
	tenant := "tenant-" + rand.String(5)
	createNamespace(t, mgmt, tenant)
	mr := w.machineRequest("tenant-0")
	mr.Namespace = tenant
	mr.Spec.ProviderRef = v1alpha1.ProviderReference{Name: w.pc.Name, Namespace: w.ns}
	w.must(mgmt.Create(w.ctx, mr))
	c := w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonProviderConfigNotShared)
	requireMentions(t, "Progressing message", c.Message, "ProviderConfig "+w.ns+"/"+w.pc.Name, `spec.scope.type to "platform"`)
	if vms, _, _ := w.harvesterObjects(); vms != 0 {
		t.Fatalf("%d VMs created through an unshared ProviderConfig", vms)
	}

	pc := &v1alpha1.ProviderConfig{}
	w.must(mgmt.Get(w.ctx, client.ObjectKeyFromObject(w.pc), pc))
	patch := client.MergeFrom(pc.DeepCopy())
	pc.Spec.Scope = &v1alpha1.ProviderConfigScope{Type: v1alpha1.ProviderConfigScopePlatform}
	w.must(mgmt.Patch(w.ctx, pc, patch))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.deleteAndWait(mr)
}

// Rotated credentials (a new kubeconfig in the same Secret) are picked up: existing machines stay
// Running, new ones are created with the new credentials.
func TestCredentialsRotated(t *testing.T) {
	w := newWorld(t)
	first := w.machineRequest("rot-0")
	w.must(mgmt.Create(w.ctx, first))
	w.waitPhase(first, v1alpha1.MachinePhaseRunning)

	user, err := simulated.Env.AddUser(envtest.User{Name: "rotated-" + rand.String(4), Groups: []string{"system:masters"}}, nil)
	w.must(err)
	secret := &corev1.Secret{}
	w.must(mgmt.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "harvester-kubeconfig"}, secret))
	secret.Data["kubeconfig"] = sim.KubeconfigFor(user.Config())
	w.must(mgmt.Update(w.ctx, secret))

	second := w.machineRequest("rot-1")
	w.must(mgmt.Create(w.ctx, second))
	w.waitPhase(second, v1alpha1.MachinePhaseRunning)
	consistently(t, time.Second, func() error {
		if p := w.get(first).Status.Phase; p != v1alpha1.MachinePhaseRunning {
			return errString("the first machine left Running: " + string(p))
		}
		return nil
	})
	w.deleteAndWait(first)
	w.deleteAndWait(second)
}

// A ProviderConfig deleted while its machines run: they stay Running, Degraded says why, and
// deleting them waits (DeletionBlocked, tested elsewhere) until it is back.
func TestProviderConfigDeletedWhileRunning(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("orphan-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.must(mgmt.Delete(w.ctx, w.pc))
	// The next health check (event-driven through the ProviderConfig watch) reports it.
	c := w.waitMRCondition(mr, v1alpha1.ConditionDegraded, v1alpha1.ReasonProviderConfigNotFound)
	requireMentions(t, "Degraded message", c.Message, "ProviderConfig "+w.ns+"/"+w.pc.Name)
	if p := w.get(mr).Status.Phase; p != v1alpha1.MachinePhaseRunning {
		t.Fatalf("phase %s: the VM still runs", p)
	}
	pc := w.pc.DeepCopy()
	pc.ObjectMeta = metav1.ObjectMeta{Name: w.pc.Name, Namespace: w.ns}
	w.must(mgmt.Create(w.ctx, pc))
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

// An ImageSync obeys the sharing rule MachineRequests obey: a ProviderConfig of another namespace
// that is not shared creates nothing on Harvester, and the ImageSync says which rule holds it up.
func TestImageSyncProviderConfigMustBeShared(t *testing.T) {
	setButlerConfig(t, factoryURL)
	w := newWorld(t)
	tenant := "tenant-" + rand.String(5)
	createNamespace(t, mgmt, tenant)
	is := w.imageSync("tenant-image")
	is.Namespace = tenant
	is.Spec.ProviderConfigRef = v1alpha1.ProviderReference{Name: w.pc.Name, Namespace: w.ns}
	w.must(mgmt.Create(w.ctx, is))
	eventually(t, timeout, func() error {
		for _, c := range w.getSync(is).Status.Conditions {
			if c.Reason == v1alpha1.ReasonProviderConfigNotShared {
				if !strings.Contains(c.Message, `spec.scope.type to "platform"`) || !strings.Contains(c.Message, "ImageSyncs") {
					return fmt.Errorf("condition %s says %q", c.Type, c.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("ImageSync conditions %s, want one with reason %s", describeConditions(w.getSync(is).Status.Conditions), v1alpha1.ReasonProviderConfigNotShared)
	})
	images := &unstructured.UnstructuredList{}
	images.SetGroupVersionKind(sim.VirtualMachineImageGVK.GroupVersion().WithKind("VirtualMachineImageList"))
	w.must(hv.List(w.ctx, images, client.InNamespace(w.hvNs)))
	if len(images.Items) != 1 { // the world's own image only
		t.Fatalf("%d images in %s: an unshared ProviderConfig created one", len(images.Items), w.hvNs)
	}

	pc := &v1alpha1.ProviderConfig{}
	w.must(mgmt.Get(w.ctx, client.ObjectKeyFromObject(w.pc), pc))
	patch := client.MergeFrom(pc.DeepCopy())
	pc.Spec.Scope = &v1alpha1.ProviderConfigScope{Type: v1alpha1.ProviderConfigScopePlatform}
	w.must(mgmt.Patch(w.ctx, pc, patch))
	w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseReady)
}

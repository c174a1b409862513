package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// waitPCCondition waits until the ProviderConfig's condition has the status and reason, and
// returns it.
func (w *world) waitPCCondition(pc *v1alpha1.ProviderConfig, condType string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	w.t.Helper()
	var found *metav1.Condition
	eventually(w.t, timeout, func() error {
		got := &v1alpha1.ProviderConfig{}
		if err := mgmt.Get(w.ctx, client.ObjectKeyFromObject(pc), got); err != nil {
			return err
		}
		found = meta.FindStatusCondition(got.Status.Conditions, condType)
		if found == nil || found.Status != status || found.Reason != reason {
			return fmt.Errorf("ProviderConfig %s: %s = %+v, want %s %s", pc.Name, condType, found, status, reason)
		}
		return nil
	})
	return found
}

// waitMRCondition waits until the MachineRequest's condition has the reason, and returns it.
func (w *world) waitMRCondition(mr *v1alpha1.MachineRequest, condType, reason string) *metav1.Condition {
	w.t.Helper()
	var found *metav1.Condition
	eventually(w.t, timeout, func() error {
		found = meta.FindStatusCondition(w.get(mr).Status.Conditions, condType)
		if found == nil || found.Reason != reason {
			return fmt.Errorf("MachineRequest %s: %s = %+v, want reason %s", mr.Name, condType, found, reason)
		}
		return nil
	})
	return found
}

func requireMentions(t *testing.T, what, message string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(message, p) {
			t.Fatalf("%s %q does not mention %q", what, message, p)
		}
	}
}

// otherPC adds a second ProviderConfig to the world, changed by mutate.
func (w *world) otherPC(name string, mutate func(*v1alpha1.ProviderConfig)) *v1alpha1.ProviderConfig {
	pc := w.pc.DeepCopy()
	pc.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: w.ns}
	pc.Status = v1alpha1.ProviderConfigStatus{}
	mutate(pc)
	w.must(mgmt.Create(w.ctx, pc))
	return pc
}

func TestPreflightPasses(t *testing.T) {
	w := newWorld(t)
	for _, c := range []string{v1alpha1.ConditionCredentialsValid, v1alpha1.ConditionImageReady, v1alpha1.ConditionNetworkReady, v1alpha1.ConditionStorageReady, v1alpha1.ConditionPermissionsReady} {
		w.waitPCCondition(w.pc, c, metav1.ConditionTrue, v1alpha1.ReasonCheckPassed)
	}
	w.waitPCCondition(w.pc, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAllChecksPassed)
	got := &v1alpha1.ProviderConfig{}
	w.must(mgmt.Get(w.ctx, client.ObjectKeyFromObject(w.pc), got))
	if !got.Status.Ready || !got.Status.Validated || got.Status.LastValidationTime == nil || got.Status.LastProbeTime == nil || !strings.HasPrefix(got.Status.ProviderVersion, "v1.") {
		t.Fatalf("status %+v", got.Status)
	}
}

// Troubleshooting, "Network misconfiguration": the VLAN network does not exist.
func TestPreflightNetworkMissing(t *testing.T) {
	w := newWorld(t)
	pc := w.otherPC("no-network", func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.NetworkName = w.hvNs + "/vlan99" })
	c := w.waitPCCondition(pc, v1alpha1.ConditionNetworkReady, metav1.ConditionFalse, v1alpha1.ReasonNetworkNotFound)
	requireMentions(t, "NetworkReady message", c.Message, w.hvNs+"/vlan99", "harvester.networkName")
	w.waitPCCondition(pc, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonChecksFailed)

	mr := w.machineRequest("net-0")
	mr.Spec.ProviderRef.Name = pc.Name
	w.must(mgmt.Create(w.ctx, mr))
	c = w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonProviderConfigNotReady)
	requireMentions(t, "MachineRequest message", c.Message, "ProviderConfig "+w.ns+"/no-network", "NetworkReady=False", w.hvNs+"/vlan99")
	w.requireHarvesterEmpty("created on Harvester while the network is missing")

	w.network("vlan99", "10.99.0.0/24") // the fix
	got := w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	requireMentions(t, "IP", got.Status.IPAddress, "10.99.0.")
	w.deleteAndWait(mr)
}

// Troubleshooting, "Wrong image reference": the default image does not exist. Requests that name
// their own image are not held up.
func TestPreflightImageMissing(t *testing.T) {
	w := newWorld(t)
	pc := w.otherPC("no-image", func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.ImageName = w.hvNs + "/image-5rs6d" })
	c := w.waitPCCondition(pc, v1alpha1.ConditionImageReady, metav1.ConditionFalse, v1alpha1.ReasonImageNotFound)
	requireMentions(t, "ImageReady message", c.Message, "VirtualMachineImage "+w.hvNs+"/image-5rs6d", "upload it")

	usesDefault := w.machineRequest("img-0")
	usesDefault.Spec.ProviderRef.Name = pc.Name
	ownImage := w.machineRequest("img-1")
	ownImage.Spec.ProviderRef.Name = pc.Name
	ownImage.Spec.Image = w.hvNs + "/" + w.imageName
	w.must(mgmt.Create(w.ctx, usesDefault))
	w.must(mgmt.Create(w.ctx, ownImage))
	c = w.waitMRCondition(usesDefault, v1alpha1.ConditionProgressing, v1alpha1.ReasonProviderConfigNotReady)
	requireMentions(t, "MachineRequest message", c.Message, "ImageReady=False", "image-5rs6d")
	w.waitPhase(ownImage, v1alpha1.MachinePhaseRunning)
	w.deleteAndWait(usesDefault)
	w.deleteAndWait(ownImage)
}

// A ProviderConfig that passed its checks is not polled: a machine that Harvester refuses for a
// reason a check covers (here its default image, deleted since) has the checks run again at once,
// and the ProviderConfig's status then holds up the machines still to come, without a round trip
// to Harvester each.
func TestPreflightRecheckedWhenAMachineIsRefused(t *testing.T) {
	w := newWorld(t)
	w.image("short-lived", nil)
	w.imageClass("short-lived")
	pc := w.otherPC("short-lived", func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.ImageName = w.hvNs + "/short-lived" })
	passed := w.waitPCCondition(pc, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAllChecksPassed)

	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	img.SetNamespace(w.hvNs)
	img.SetName("short-lived")
	w.must(hv.Delete(w.ctx, img))
	time.Sleep(time.Second) // longer than the suite's RefusalRecheckGap: a refusal this soon after the last check asks for none

	first := w.machineRequest("refused-0")
	first.Spec.ProviderRef.Name = pc.Name
	w.must(mgmt.Create(w.ctx, first))
	c := w.waitPCCondition(pc, v1alpha1.ConditionImageReady, metav1.ConditionFalse, v1alpha1.ReasonImageNotFound)
	requireMentions(t, "ImageReady message", c.Message, "VirtualMachineImage "+w.hvNs+"/short-lived")
	if !c.LastTransitionTime.After(passed.LastTransitionTime.Time) {
		t.Fatalf("ImageReady went False at %s, not after the checks passed at %s", c.LastTransitionTime, passed.LastTransitionTime)
	}
	w.waitPCCondition(pc, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonChecksFailed)

	next := w.machineRequest("refused-1")
	next.Spec.ProviderRef.Name = pc.Name
	w.must(mgmt.Create(w.ctx, next))
	c = w.waitMRCondition(next, v1alpha1.ConditionProgressing, v1alpha1.ReasonProviderConfigNotReady)
	requireMentions(t, "MachineRequest message", c.Message, "ImageReady=False", "short-lived")
	w.deleteAndWait(first)
	w.deleteAndWait(next)
	w.requireHarvesterEmpty("after the deletions")
}

// Troubleshooting, "Image not bootable": the image upload failed.
func TestImageImportFailed(t *testing.T) {
	w := newWorld(t)
	w.image("broken", map[string]string{sim.AnnotationFault: sim.FaultImportFailed})
	pc := w.otherPC("broken-image", func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.ImageName = w.hvNs + "/broken" })
	c := w.waitPCCondition(pc, v1alpha1.ConditionImageReady, metav1.ConditionFalse, v1alpha1.ReasonImageImportFailed)
	requireMentions(t, "ImageReady message", c.Message, w.hvNs+"/broken", "ImportFailed", "re-upload")

	mr := w.machineRequest("broken-0")
	mr.Spec.Image = w.hvNs + "/broken" // through the healthy ProviderConfig: the request itself finds out
	w.must(mgmt.Create(w.ctx, mr))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonImageImportFailed {
		t.Fatalf("failureReason %s", got.Status.FailureReason)
	}
	requireMentions(t, "failureMessage", got.Status.FailureMessage, w.hvNs+"/broken", "re-upload")
	w.deleteAndWait(mr)
}

// Troubleshooting, "Storage class missing": the image's storage class is gone, and an extra disk
// names a class that does not exist.
func TestStorageClassMissing(t *testing.T) {
	w := newWorld(t)
	w.image("no-class", nil)
	class := w.imageClass("no-class")
	eventually(t, timeout, func() error {
		return hv.Get(w.ctx, client.ObjectKey{Name: class}, &storagev1.StorageClass{})
	})
	w.must(hv.Delete(w.ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}}))
	pc := w.otherPC("no-class", func(pc *v1alpha1.ProviderConfig) { pc.Spec.Harvester.ImageName = w.hvNs + "/no-class" })
	c := w.waitPCCondition(pc, v1alpha1.ConditionStorageReady, metav1.ConditionFalse, v1alpha1.ReasonStorageClassNotFound)
	requireMentions(t, "StorageReady message", c.Message, class)

	mr := w.machineRequest("disk-0")
	mr.Spec.ExtraDisks = []v1alpha1.DiskSpec{{SizeGB: 10, StorageClass: "fast-nvme"}}
	w.must(mgmt.Create(w.ctx, mr))
	c = w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonVolumeNotBound)
	requireMentions(t, "Progressing message", c.Message, "PersistentVolumeClaim "+w.hvNs+"/disk-0-disk-1", "fast-nvme", "not found")
	w.waitEvent(mr, corev1.EventTypeWarning, v1alpha1.ReasonVolumeNotBound)
	w.deleteAndWait(mr)
}

// Troubleshooting, "VM creation fails with permission error": the credentials may not do
// everything; the check names what is missing.
func TestPreflightPermissions(t *testing.T) {
	w := newWorld(t)
	userName := "restricted-" + rand.String(4)
	user, err := simulated.Env.AddUser(envtest.User{Name: userName}, nil)
	w.must(err)
	w.must(hv.Create(w.ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-vms", Namespace: w.hvNs},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines"}, Verbs: []string{"get"}}},
	}))
	w.must(hv.Create(w.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "read-vms", Namespace: w.hvNs},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "read-vms"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: userName}},
	}))
	w.must(mgmt.Create(w.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "restricted", Namespace: w.ns},
		Data:       map[string][]byte{"kubeconfig": sim.KubeconfigFor(user.Config())},
	}))
	pc := w.otherPC("restricted", func(pc *v1alpha1.ProviderConfig) { pc.Spec.CredentialsRef.Name = "restricted" })
	c := w.waitPCCondition(pc, v1alpha1.ConditionPermissionsReady, metav1.ConditionFalse, v1alpha1.ReasonPermissionsMissing)
	requireMentions(t, "PermissionsReady message", c.Message, "create virtualmachines.kubevirt.io in namespace "+w.hvNs,
		"create persistentvolumeclaims in namespace "+w.hvNs, "get virtualmachineimages.harvesterhci.io")
	if strings.Contains(c.Message, "get virtualmachines.kubevirt.io") {
		t.Fatalf("a granted permission is reported missing: %s", c.Message)
	}
	mr := w.machineRequest("perm-0")
	mr.Spec.ProviderRef.Name = pc.Name
	w.must(mgmt.Create(w.ctx, mr))
	c = w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonProviderConfigNotReady)
	requireMentions(t, "MachineRequest message", c.Message, "PermissionsReady=False")

	// The checks held it up before its place was recorded, so nothing can have been created:
	// the deletion needs no permission on Harvester and is released at once.
	if p, err := w.get(mr).RecordedPlacement(); p != nil || err != nil {
		t.Fatalf("placement %+v (%v) recorded for a machine the checks held up", p, err)
	}
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("after the deletion")
}

// Credentials that are missing or not self-contained fail CredentialsValid, saying why.
func TestPreflightCredentials(t *testing.T) {
	w := newWorld(t)
	missing := w.otherPC("no-secret", func(pc *v1alpha1.ProviderConfig) { pc.Spec.CredentialsRef.Name = "nope" })
	c := w.waitPCCondition(missing, v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonCredentialsUnavailable)
	requireMentions(t, "CredentialsValid message", c.Message, "Secret "+w.ns+"/nope", "does not exist")
	w.waitPCCondition(missing, v1alpha1.ConditionPermissionsReady, metav1.ConditionUnknown, v1alpha1.ReasonNotChecked)

	w.must(mgmt.Create(w.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "exec", Namespace: w.ns},
		Data: map[string][]byte{"kubeconfig": []byte("apiVersion: v1\nkind: Config\nclusters: [{name: h, cluster: {server: https://127.0.0.1:1}}]\n" +
			"users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/touch, args: [/tmp/pwned]}}}]\n" +
			"contexts: [{name: h, context: {cluster: h, user: u}}]\ncurrent-context: h\n")},
	}))
	exec := w.otherPC("exec", func(pc *v1alpha1.ProviderConfig) { pc.Spec.CredentialsRef.Name = "exec" })
	c = w.waitPCCondition(exec, v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonCredentialsUnavailable)
	requireMentions(t, "CredentialsValid message", c.Message, "exec plugin", "self-contained")
}

// A VM Harvester cannot place: the scheduler's reason reaches the MachineRequest, and after the
// provisioning timeout the machine is Failed with that diagnosis (the bootstrap acts on Failed).
func TestDiagnosisUnschedulable(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("big-0")
	mr.Spec.Labels = map[string]string{sim.AnnotationFault: sim.FaultUnschedulable}
	w.must(mgmt.Create(w.ctx, mr))
	c := w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonVMUnschedulable)
	requireMentions(t, "Progressing message", c.Message, "VirtualMachine "+w.hvNs+"/big-0", "Insufficient memory", "spec.memoryMB")
	w.waitEvent(mr, corev1.EventTypeWarning, v1alpha1.ReasonVMUnschedulable)
	got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonProvisioningTimeout || time.Since(got.CreationTimestamp.Time) < provisioningTimeout {
		t.Fatalf("failure %s after %s: %s", got.Status.FailureReason, time.Since(got.CreationTimestamp.Time), got.Status.FailureMessage)
	}
	requireMentions(t, "failureMessage", got.Status.FailureMessage, "Insufficient memory", "--provisioning-timeout")
	w.waitEvent(mr, corev1.EventTypeWarning, v1alpha1.ReasonProvisioningTimeout)
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

// Troubleshooting, "DHCP not responding": the VM runs but never reports an address.
func TestDiagnosisNoIPAddress(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("dark-0")
	mr.Spec.Labels = map[string]string{sim.AnnotationFault: sim.FaultNoDHCP}
	w.must(mgmt.Create(w.ctx, mr))
	c := w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonNoIPAddress)
	requireMentions(t, "Progressing message", c.Message, "VirtualMachine "+w.hvNs+"/dark-0", "guest agent", "DHCP")
	w.waitEvent(mr, corev1.EventTypeWarning, v1alpha1.ReasonNoIPAddress)
	w.deleteAndWait(mr)
}

// A Failed machine retries on the retry annotation, without a spec change; the annotation is
// consumed.
func TestRetryAnnotation(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("late-0")
	mr.Spec.Image = w.hvNs + "/late"
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	w.image("late", nil) // the fix, outside the MachineRequest
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationRetry + `":"true"}}}`)
	w.must(mgmt.Patch(w.ctx, w.get(mr), client.RawPatch("application/merge-patch+json", patch)))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	if _, still := got.Annotations[v1alpha1.AnnotationRetry]; still || got.Status.FailureReason != "" {
		t.Fatalf("annotations %v, failureReason %q", got.Annotations, got.Status.FailureReason)
	}
	w.waitEvent(mr, corev1.EventTypeNormal, "Retrying")
	w.deleteAndWait(mr)
}

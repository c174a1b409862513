package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// Semantic errors the schema cannot see end in Failed with a reason that names the field and the
// fix, and nothing is created on Harvester.
func TestSemanticErrorsFailBeforeCreating(t *testing.T) {
	w := newWorld(t)
	w.image("big", map[string]string{sim.AnnotationVirtualSize: "30Gi"})
	for name, tc := range map[string]struct {
		mutate func(*v1alpha1.MachineRequest)
		reason string
		parts  []string
	}{
		"disk smaller than the image": {func(m *v1alpha1.MachineRequest) { m.Spec.Image = w.hvNs + "/big"; m.Spec.DiskGB = 20 },
			v1alpha1.ReasonDiskTooSmall, []string{"spec.diskGB is 20", "needs 30 GiB", "raise spec.diskGB"}},
		"userData larger than a Secret": {func(m *v1alpha1.MachineRequest) { m.Spec.UserData = strings.Repeat("#", corev1.MaxSecretSize+1) },
			v1alpha1.ReasonUserDataTooLarge, []string{"spec.userData", "1048576"}},
		"label key invalid": {func(m *v1alpha1.MachineRequest) { m.Spec.Labels = map[string]string{"bad key": "x"} },
			v1alpha1.ReasonInvalidSpec, []string{"spec.labels", "bad key"}},
	} {
		t.Run(name, func(t *testing.T) {
			mr := w.machineRequest("semantic-" + strings.ReplaceAll(strings.Fields(name)[0], "userData", "ud"))
			mr.Name = strings.ToLower(mr.Name)
			mr.Spec.MachineName = mr.Name
			tc.mutate(mr)
			w.must(mgmt.Create(w.ctx, mr))
			got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
			if got.Status.FailureReason != tc.reason {
				t.Fatalf("failureReason %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
			}
			requireMentions(t, "failureMessage", got.Status.FailureMessage, tc.parts...)
			w.deleteAndWait(mr)
		})
	}
	w.requireHarvesterEmpty("created on Harvester")
}

// Deleting the root disk out of band while the machine runs is refused by Harvester's PVC webhook
// (409 since Harvester v1.8.0), naming the VM; the disk is not even Terminating, and the machine
// stays Running.
func TestRootDiskDeletedWhileRunning(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("disk-gone-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.hvNs, Name: "disk-gone-0-disk-0"}}
	err := hv.Delete(w.ctx, pvc)
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "currently attached to VM: "+w.hvNs+"/disk-gone-0") {
		t.Fatalf("deleting the root disk of a running VM: %v, want Harvester's refusal", err)
	}
	consistently(t, 2*time.Second, func() error {
		got := &corev1.PersistentVolumeClaim{}
		if err := hv.Get(w.ctx, client.ObjectKeyFromObject(pvc), got); err != nil || got.DeletionTimestamp != nil {
			return errString("the refused root disk should stay as it was")
		}
		if p := w.get(mr).Status.Phase; p != v1alpha1.MachinePhaseRunning {
			return errString("phase " + string(p))
		}
		return nil
	})
	w.deleteAndWait(mr)
	w.requireHarvesterEmpty("left on Harvester")
}

// The whole Harvester namespace deleted: the machines' VMs are gone, so they become Failed
// VMDeleted, and deleting them completes.
func TestHarvesterNamespaceDeleted(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("ns-gone-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.must(hv.Delete(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.hvNs}}))
	got := w.waitPhase(mr, v1alpha1.MachinePhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonVMDeleted {
		t.Fatalf("failureReason %s", got.Status.FailureReason)
	}
	w.deleteAndWait(mr)
}

// A kubeconfig with an exec plugin is refused and its command never runs.
func TestExecPluginNeverRuns(t *testing.T) {
	w := newWorld(t)
	marker := filepath.Join(t.TempDir(), "pwned")
	w.must(mgmt.Create(w.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "hostile", Namespace: w.ns},
		Data: map[string][]byte{"kubeconfig": []byte("apiVersion: v1\nkind: Config\nclusters: [{name: h, cluster: {server: https://127.0.0.1:1}}]\n" +
			"users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /usr/bin/touch, args: [" + marker + "]}}}]\n" +
			"contexts: [{name: h, context: {cluster: h, user: u}}]\ncurrent-context: h\n")},
	}))
	pc := w.otherPC("hostile", func(pc *v1alpha1.ProviderConfig) { pc.Spec.CredentialsRef.Name = "hostile" })
	w.waitPCCondition(pc, v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonCredentialsUnavailable)
	mr := w.machineRequest("hostile-0")
	mr.Spec.ProviderRef.Name = pc.Name
	w.must(mgmt.Create(w.ctx, mr))
	w.waitMRCondition(mr, v1alpha1.ConditionProgressing, v1alpha1.ReasonCredentialsUnavailable)
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the exec plugin ran (%v)", err)
	}
	// Nothing was ever created for it (no place recorded), so deletion needs no credentials:
	// it is released at once, still without running the plugin.
	if p, err := w.get(mr).RecordedPlacement(); p != nil || err != nil {
		t.Fatalf("placement %+v (%v) recorded without usable credentials", p, err)
	}
	w.deleteAndWait(mr)
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the exec plugin ran (%v)", err)
	}
}

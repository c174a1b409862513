package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	platformv1alpha1 "github.com/butlerdotdev/butler-provider-harvester/api/platform/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/imagesync"
	"github.com/butlerdotdev/butler-provider-harvester/internal/imagefactory"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

const (
	factoryURL = "https://factory.butlerlabs.example/"
	schematic  = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
)

// setButlerConfig creates or updates the one ButlerConfig ("butler"); factory "" removes the
// image factory. It is put back the way the other tests expect when the test ends.
func setButlerConfig(t *testing.T, factory string) {
	t.Helper()
	ctx := context.Background()
	bc := &platformv1alpha1.ButlerConfig{ObjectMeta: metav1.ObjectMeta{Name: platformv1alpha1.ButlerConfigName}}
	err := mgmt.Get(ctx, client.ObjectKeyFromObject(bc), bc)
	if factory == "" {
		bc.Spec.ImageFactory = nil
	} else {
		bc.Spec.ImageFactory = &platformv1alpha1.ImageFactoryConfig{URL: factory, DefaultSchematicID: schematic}
	}
	switch {
	case apierrors.IsNotFound(err):
		err = mgmt.Create(ctx, bc)
	case err == nil:
		err = mgmt.Update(ctx, bc)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mgmt.Delete(ctx, bc); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
}

func deleteButlerConfig(t *testing.T) {
	t.Helper()
	bc := &platformv1alpha1.ButlerConfig{ObjectMeta: metav1.ObjectMeta{Name: platformv1alpha1.ButlerConfigName}}
	if err := mgmt.Delete(context.Background(), bc); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
}

// imageSync is an ImageSync as the Butler bootstrap creates it for a Harvester cluster.
func (w *world) imageSync(name string) *v1alpha1.ImageSync {
	return &v1alpha1.ImageSync{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "butler"}},
		Spec: v1alpha1.ImageSyncSpec{
			FactoryRef:        v1alpha1.ImageFactoryRef{SchematicID: schematic, Version: "v1.9.5", Arch: "amd64", Platform: "talos"},
			ProviderConfigRef: v1alpha1.ProviderReference{Name: w.pc.Name},
			Format:            "qcow2", TransferMode: v1alpha1.TransferModeDirect,
		},
	}
}

func (w *world) getSync(is *v1alpha1.ImageSync) *v1alpha1.ImageSync {
	w.t.Helper()
	out := &v1alpha1.ImageSync{}
	w.must(mgmt.Get(w.ctx, client.ObjectKeyFromObject(is), out))
	return out
}

func (w *world) waitSyncPhase(is *v1alpha1.ImageSync, phase v1alpha1.ImageSyncPhase) *v1alpha1.ImageSync {
	w.t.Helper()
	var got *v1alpha1.ImageSync
	eventually(w.t, timeout, func() error {
		got = &v1alpha1.ImageSync{}
		if err := mgmt.Get(w.ctx, client.ObjectKeyFromObject(is), got); err != nil {
			return err
		}
		if got.Status.Phase != phase {
			return fmt.Errorf("ImageSync %s is %q, want %s; failure %q %q; conditions %s", is.Name, got.Status.Phase, phase,
				got.Status.FailureReason, got.Status.FailureMessage, describeConditions(got.Status.Conditions))
		}
		return nil
	})
	return got
}

// harvesterImage reads a VirtualMachineImage of the test's Harvester namespace.
func (w *world) harvesterImage(name string) (*unstructured.Unstructured, error) {
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	return img, hv.Get(w.ctx, client.ObjectKey{Namespace: w.hvNs, Name: name}, img)
}

// The bootstrap's ImageSync goes Ready with the image Harvester downloaded from the factory, under
// the name the rest of Butler computes; a machine boots from it; deleting the ImageSync leaves the
// image (VM disks are cloned from it).
func TestImageSyncGoesReady(t *testing.T) {
	setButlerConfig(t, factoryURL)
	w := newWorld(t)
	is := w.imageSync("mgmt-37656798-1-9-5")
	w.must(mgmt.Create(w.ctx, is))

	got := w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseReady)
	const name = syncImageName
	wantURL := "https://factory.butlerlabs.example/image/" + schematic + "/v1.9.5/talos-amd64.qcow2"
	if got.Status.ProviderImageRef != w.hvNs+"/"+name || got.Status.ArtifactURL != wantURL || got.Status.FailureReason != "" {
		t.Fatalf("status %+v", got.Status)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonImageReady {
		t.Fatalf("Ready = %+v", c)
	}
	if !controllerutilContains(got.Finalizers, v1alpha1.ImageSyncFinalizer) {
		t.Fatalf("finalizers %v", got.Finalizers)
	}
	img, err := w.harvesterImage(name)
	w.must(err)
	sourceType, _, _ := unstructured.NestedString(img.Object, "spec", "sourceType")
	url, _, _ := unstructured.NestedString(img.Object, "spec", "url")
	display, _, _ := unstructured.NestedString(img.Object, "spec", "displayName")
	if sourceType != "download" || url != wantURL || display != name {
		t.Fatalf("image spec: sourceType %q url %q displayName %q", sourceType, url, display)
	}

	mr := w.machineRequest("from-sync-0")
	mr.Spec.Image = got.Status.ProviderImageRef
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)
	w.deleteAndWait(mr)

	w.must(mgmt.Delete(w.ctx, got))
	w.waitGone(&v1alpha1.ImageSync{ObjectMeta: got.ObjectMeta}, mgmt)
	if _, err := w.harvesterImage(name); err != nil {
		t.Fatalf("the image is gone with its ImageSync: %v", err)
	}
}

// A Ready ImageSync stays Ready when the ButlerConfig changes or goes; an image deleted on
// Harvester is created again.
func TestImageSyncStaysReadyAndRecreatesItsImage(t *testing.T) {
	setButlerConfig(t, factoryURL)
	w := newWorld(t)
	is := w.imageSync("stays-ready")
	w.must(mgmt.Create(w.ctx, is))
	got := w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseReady)
	name := strings.TrimPrefix(got.Status.ProviderImageRef, w.hvNs+"/")

	deleteButlerConfig(t)
	consistently(t, 2*time.Second, func() error {
		if p := w.getSync(is).Status.Phase; p != v1alpha1.ImageSyncPhaseReady {
			return fmt.Errorf("phase %s after the ButlerConfig was deleted", p)
		}
		return nil
	})

	setButlerConfig(t, factoryURL)
	img, err := w.harvesterImage(name)
	w.must(err)
	w.must(hv.Delete(w.ctx, img))
	eventually(t, timeout, func() error {
		again, err := w.harvesterImage(name)
		if err != nil {
			return err
		}
		if again.GetUID() == img.GetUID() {
			return errors.New("the image was not created again")
		}
		return nil
	})
	w.waitEvent(is, corev1.EventTypeWarning, v1alpha1.ReasonImageMissing)
	w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseReady)
}

// Failures: only for what cannot heal by itself, each with the published reason, and retried once
// the cause is gone.
func TestImageSyncFailures(t *testing.T) {
	setButlerConfig(t, factoryURL)
	t.Run("unreachable factory", func(t *testing.T) {
		w := newWorld(t)
		simulated.Sim.SetFaults(sim.Faults{UnreachableURLs: []string{factoryURL}})
		defer simulated.Sim.SetFaults(sim.Faults{})
		is := w.imageSync("unreachable")
		w.must(mgmt.Create(w.ctx, is))
		got := w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseFailed)
		if got.Status.FailureReason != v1alpha1.ReasonHarvesterRetryLimitExceeded || !strings.Contains(got.Status.FailureMessage, "retry attempted 3/3") {
			t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
		}
		// Reachable again, and the image Harvester gave up on deleted, as the message says.
		simulated.Sim.SetFaults(sim.Faults{})
		img, err := w.harvesterImage(syncImageName)
		w.must(err)
		w.must(hv.Delete(w.ctx, img))
		w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseReady)
	})
	t.Run("proxy transfer mode", func(t *testing.T) {
		w := newWorld(t)
		is := w.imageSync("proxy")
		is.Spec.TransferMode = v1alpha1.TransferModeProxy
		w.must(mgmt.Create(w.ctx, is))
		got := w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseFailed)
		if got.Status.FailureReason != v1alpha1.ReasonUnsupportedTransferMode || !strings.Contains(got.Status.FailureMessage, "spec.transferMode") {
			t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
		}
		if _, err := w.harvesterImage(syncImageName); !apierrors.IsNotFound(err) {
			t.Fatalf("an image was created for a proxy ImageSync: %v", err)
		}
		got.Spec.TransferMode = v1alpha1.TransferModeDirect
		w.must(mgmt.Update(w.ctx, got))
		w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseReady)
	})
	t.Run("same name, another URL", func(t *testing.T) {
		w := newWorld(t)
		is := w.imageSync("conflict")
		name := syncImageName
		w.image(name, nil) // someone's image of that name, from another URL
		w.must(mgmt.Create(w.ctx, is))
		got := w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseFailed)
		if got.Status.FailureReason != v1alpha1.ReasonCreateImageFailed || !strings.Contains(got.Status.FailureMessage, "example.invalid") {
			t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
		}
		img, err := w.harvesterImage(name)
		w.must(err)
		if url, _, _ := unstructured.NestedString(img.Object, "spec", "url"); url != "https://example.invalid/metal-amd64.raw.xz" {
			t.Fatalf("the other image was changed: url %q", url)
		}
	})
	t.Run("ButlerConfig missing, then created", func(t *testing.T) {
		deleteButlerConfig(t)
		w := newWorld(t)
		is := w.imageSync("no-config")
		w.must(mgmt.Create(w.ctx, is))
		eventually(t, timeout, func() error {
			c := meta.FindStatusCondition(w.getSync(is).Status.Conditions, v1alpha1.ConditionDegraded)
			if c == nil || c.Reason != v1alpha1.ReasonButlerConfigNotFound {
				return fmt.Errorf("Degraded = %+v", c)
			}
			return nil
		})
		got := w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseFailed) // after the grace period
		if got.Status.FailureReason != v1alpha1.ReasonButlerConfigNotFound {
			t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
		}
		setButlerConfig(t, factoryURL)
		w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseReady)
	})
}

// syncImageName is the image name of world.imageSync, as the rest of Butler computes it.
const syncImageName = "talos-v1-9-5-amd64-37656798-butler"

// ImageSyncs of other providers, or whose ProviderConfig does not exist yet, are never written to;
// a ProviderConfig created later is noticed.
func TestImageSyncOfOtherProvidersUntouched(t *testing.T) {
	setButlerConfig(t, factoryURL)
	w := newWorld(t)
	nutanix := &v1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "nutanix", Namespace: w.ns},
		Spec: v1alpha1.ProviderConfigSpec{Provider: v1alpha1.ProviderTypeNutanix, CredentialsRef: &v1alpha1.SecretReference{Name: "n"},
			Nutanix: &v1alpha1.NutanixProviderConfig{Endpoint: "https://prism.example", ClusterUUID: "c", SubnetUUID: "s"}},
	}
	w.must(mgmt.Create(w.ctx, nutanix))
	other := w.imageSync("for-nutanix")
	other.Spec.ProviderConfigRef.Name = nutanix.Name
	later := w.imageSync("pc-later")
	later.Spec.ProviderConfigRef.Name = "created-later"
	w.must(mgmt.Create(w.ctx, other))
	w.must(mgmt.Create(w.ctx, later))
	before := map[string]string{other.Name: w.getSync(other).ResourceVersion, later.Name: w.getSync(later).ResourceVersion}
	consistently(t, 2*time.Second, func() error {
		for _, is := range []*v1alpha1.ImageSync{other, later} {
			if got := w.getSync(is); got.ResourceVersion != before[is.Name] {
				return fmt.Errorf("ImageSync %s was written to: finalizers %v, status %+v", is.Name, got.Finalizers, got.Status)
			}
		}
		return nil
	})
	pc := w.pc.DeepCopy()
	pc.ObjectMeta = metav1.ObjectMeta{Name: "created-later", Namespace: w.ns}
	w.must(mgmt.Create(w.ctx, pc))
	w.waitSyncPhase(later, v1alpha1.ImageSyncPhaseReady)
	if got := w.getSync(other); got.ResourceVersion != before[other.Name] {
		t.Fatalf("the other provider's ImageSync was written to: %+v", got.Status)
	}
}

// Deleting an ImageSync never hangs, even with its ProviderConfig and Secret gone.
func TestImageSyncDeletionNeverHangs(t *testing.T) {
	setButlerConfig(t, factoryURL)
	w := newWorld(t)
	is := w.imageSync("orphan")
	w.must(mgmt.Create(w.ctx, is))
	w.waitSyncPhase(is, v1alpha1.ImageSyncPhaseReady)
	w.must(mgmt.Delete(w.ctx, w.pc))
	w.must(mgmt.Delete(w.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: w.ns}}))
	w.must(mgmt.Delete(w.ctx, is))
	w.waitGone(&v1alpha1.ImageSync{ObjectMeta: metav1.ObjectMeta{Name: is.Name, Namespace: is.Namespace}}, mgmt)
}

// Without the ImageSync CRD, or without permission to read ImageSyncs and ButlerConfigs, the
// ImageSync controller cannot run, and Unavailable says why: the manager then leaves it off and
// logs that reason (test/deploy's CLI test reads the line).
func TestImageSyncControllerOffWhenUnavailable(t *testing.T) {
	restricted, err := mgmtEnv.AddUser(envtest.User{Name: "no-imagesync-" + rand.String(4)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		config *rest.Config
		want   string
	}{
		// The simulated Harvester is a cluster without Butler's CRDs.
		"no CRD":        {simulated.Config, "no ImageSync CRD"},
		"no permission": {restricted.Config(), "may not list butlerconfigs, list imagesyncs, watch butlerconfigs, watch imagesyncs"},
	} {
		t.Run(name, func(t *testing.T) {
			mgr, err := ctrl.NewManager(tc.config, ctrl.Options{Scheme: mgmt.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
			if err != nil {
				t.Fatal(err)
			}
			if why := imagesync.Unavailable(context.Background(), mgr); !strings.Contains(why, tc.want) {
				t.Fatalf("ImageSync controller off because %q, want %q", why, tc.want)
			}
		})
	}
}

// An ImageSync whose ProviderConfig is deleted after it was taken on: Ready stays Ready; one still
// downloading waits, then fails with ProviderConfigNotFound, and comes back when the
// ProviderConfig does.
func TestImageSyncProviderConfigDeleted(t *testing.T) {
	setButlerConfig(t, factoryURL)
	w := newWorld(t)
	ready := w.imageSync("pc-gone-ready")
	w.must(mgmt.Create(w.ctx, ready))
	w.waitSyncPhase(ready, v1alpha1.ImageSyncPhaseReady)
	slow := w.imageSync("pc-gone-slow")
	slow.Spec.DisplayName = "slow"
	// The same image, created before with the ImageSync's URL (so it is shared) and an import
	// that does not finish.
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	img.SetNamespace(w.hvNs)
	img.SetName("slow")
	img.SetAnnotations(map[string]string{sim.AnnotationImportDelay: "1h"})
	_ = unstructured.SetNestedField(img.Object, imagefactory.URL(factoryURL, slow.Spec), "spec", "url")
	w.must(hv.Create(w.ctx, img))
	w.must(mgmt.Create(w.ctx, slow))
	w.waitSyncPhase(slow, v1alpha1.ImageSyncPhaseDownloading)

	w.must(mgmt.Delete(w.ctx, w.pc))
	got := w.waitSyncPhase(slow, v1alpha1.ImageSyncPhaseFailed)
	if got.Status.FailureReason != v1alpha1.ReasonProviderConfigNotFound || !strings.Contains(got.Status.FailureMessage, "spec.providerConfigRef") {
		t.Fatalf("failure %s: %s", got.Status.FailureReason, got.Status.FailureMessage)
	}
	if p := w.getSync(ready).Status.Phase; p != v1alpha1.ImageSyncPhaseReady {
		t.Fatalf("the Ready ImageSync is %s without its ProviderConfig", p)
	}
	pc := w.pc.DeepCopy()
	pc.ObjectMeta = metav1.ObjectMeta{Name: w.pc.Name, Namespace: w.ns}
	w.must(mgmt.Create(w.ctx, pc))
	w.waitSyncPhase(slow, v1alpha1.ImageSyncPhaseDownloading)
}

package clusterapi

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// Annotation skip-cleanup releases a HarvesterMachine only when its deletion is blocked and its
// placement record is intact.
func TestSkipCleanupCountsOnlyForABlockedDeletion(t *testing.T) {
	blocked := errkind.Waiting(infrav1.ReasonDeletionBlocked, capiWaitingRetry, "ProviderConfig gone")
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		err         error
		want        bool
	}{
		{"blocked, asked", map[string]string{infrav1.AnnotationSkipHarvesterCleanup: "true"}, blocked, true},
		{"blocked, not asked", nil, blocked, false},
		{"deleting, asked", map[string]string{infrav1.AnnotationSkipHarvesterCleanup: "true"}, errkind.Waiting(infrav1.ReasonDeleting, capiWaitingRetry, "VM"), false},
		{"disk in use, asked", map[string]string{infrav1.AnnotationSkipHarvesterCleanup: "true"}, errkind.Waiting(infrav1.ReasonDiskInUse, capiWaitingRetry, "disk"), false},
		{"transient, asked", map[string]string{infrav1.AnnotationSkipHarvesterCleanup: "true"}, errors.New("connection refused"), false},
		{"done, asked", map[string]string{infrav1.AnnotationSkipHarvesterCleanup: "true"}, nil, false},
		{"blocked, asked, record broken", map[string]string{infrav1.AnnotationSkipHarvesterCleanup: "true", infrav1.AnnotationPlacement: "{"}, blocked, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations}}
			if got := releasedWhenBlocked(hm, tc.err); got != tc.want {
				t.Fatalf("released = %v, want %v", got, tc.want)
			}
		})
	}
	if msg := releaseNotNeeded("the VM"); !strings.Contains(msg, "--"+options.SkipCleanupFlag) || !strings.Contains(msg, infrav1.AnnotationSkipHarvesterCleanup) {
		t.Fatalf("the message of a release not needed names neither the annotation nor the flag: %q", msg)
	}
}

// A machine is made only at its own place; a record elsewhere is refused with the record named.
func TestPlaceOfItsOwn(t *testing.T) {
	hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "md-0"}}
	own := harvester.Place{Namespace: "vms", Name: "md-0"}
	for _, tc := range []struct {
		name     string
		recorded harvester.Place
		refused  bool
	}{
		{"its own", harvester.Place{ClusterID: "c", Namespace: "vms", Name: "md-0"}, false},
		{"another namespace", harvester.Place{ClusterID: "c", Namespace: "team-b-vms", Name: "md-0"}, true},
		{"another name", harvester.Place{ClusterID: "c", Namespace: "vms", Name: "their-md-0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := placeOfItsOwn(hm, tc.recorded, own)
			if !tc.refused {
				if err != nil {
					t.Fatalf("refused its own place: %v", err)
				}
				return
			}
			w, ok := errkind.AsWaiting(err)
			if !ok || w.Reason != infrav1.ReasonPlacementRefused {
				t.Fatalf("error %v, want a %s wait", err, infrav1.ReasonPlacementRefused)
			}
			for _, want := range []string{tc.recorded.Namespace + "/" + tc.recorded.Name, "vms/md-0", "HarvesterMachine team-a/md-0", infrav1.AnnotationPlacement + "-"} {
				if !strings.Contains(w.Message, want) {
					t.Errorf("message %q does not say %q", w.Message, want)
				}
			}
		})
	}
}

func TestProviderIDOfItsOwn(t *testing.T) {
	hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "md-0"}}
	if err := providerIDOfItsOwn(hm); err != nil {
		t.Fatalf("no providerID: %v", err)
	}
	hm.Spec.ProviderID = "harvester://0b1c"
	w, ok := errkind.AsWaiting(providerIDOfItsOwn(hm))
	if !ok || w.Reason != infrav1.ReasonPlacementRefused {
		t.Fatalf("a providerID without a recorded place: %v", w)
	}
	for _, want := range []string{"spec.providerID of HarvesterMachine team-a/md-0 is harvester://0b1c", infrav1.AnnotationPlacement, "Delete the Machine"} {
		if !strings.Contains(w.Message, want) {
			t.Errorf("message %q does not say %q", w.Message, want)
		}
	}
}

func TestOthersAtRecordedPlace(t *testing.T) {
	hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "md-0"}}
	own := harvester.Place{Namespace: "vms", Name: "md-0"}
	taken := harvester.Permanent(harvester.ReasonNameTaken, "VirtualMachine vms-b/their-md-0 exists on Harvester but was not created for HarvesterMachine team-a/md-0")
	other := harvester.Permanent(reasons.InvalidSpec, "bad")
	for _, tc := range []struct {
		name     string
		recorded harvester.Place
		err      error
		refused  bool
	}{
		{"a name taken at its own place is the engine's to say", own, taken, false},
		{"another's VM at a recorded place elsewhere", harvester.Place{Namespace: "vms-b", Name: "their-md-0"}, taken, true},
		{"other errors are the engine's", harvester.Place{Namespace: "vms-b", Name: "their-md-0"}, other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := othersAtRecordedPlace(hm, tc.recorded, own, tc.err)
			if !tc.refused {
				if !errors.Is(err, tc.err) {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			w, ok := errkind.AsWaiting(err)
			if !ok || w.Reason != infrav1.ReasonPlacementRefused {
				t.Fatalf("error %v, want a %s wait", err, infrav1.ReasonPlacementRefused)
			}
			for _, want := range []string{"vms-b/their-md-0, which is not this machine's", "vms/md-0", infrav1.AnnotationPlacement + "-"} {
				if !strings.Contains(w.Message, want) {
					t.Errorf("message %q does not say %q", w.Message, want)
				}
			}
		})
	}
}

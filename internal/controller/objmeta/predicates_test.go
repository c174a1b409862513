package objmeta

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

func TestUpdatesThatMatter(t *testing.T) {
	base := &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Namespace: "butler-system", Generation: 1}}
	base.ResourceVersion = "1"
	changed := func(f func(*v1alpha1.MachineRequest)) *v1alpha1.MachineRequest {
		mr := base.DeepCopy()
		mr.ResourceVersion = "2"
		f(mr)
		return mr
	}
	now := metav1.Now()
	for name, tc := range map[string]struct {
		new  *v1alpha1.MachineRequest
		want bool
	}{
		"resync (--sync-period)":  {base.DeepCopy(), true},
		"our status patch":        {changed(func(m *v1alpha1.MachineRequest) { m.Status.Phase = v1alpha1.MachinePhaseRunning }), false},
		"our finalizer added":     {changed(func(m *v1alpha1.MachineRequest) { m.Finalizers = []string{v1alpha1.MachineRequestFinalizer} }), false},
		"another finalizer added": {changed(func(m *v1alpha1.MachineRequest) { m.Finalizers = []string{"example.com/other"} }), true},
		"spec changed":            {changed(func(m *v1alpha1.MachineRequest) { m.Generation++ }), true},
		"deleted":                 {changed(func(m *v1alpha1.MachineRequest) { m.DeletionTimestamp = &now }), true},
		"skip-cleanup annotation": {changed(func(m *v1alpha1.MachineRequest) {
			m.Annotations = map[string]string{v1alpha1.AnnotationSkipHarvesterCleanup: "true"}
		}), true},
		// RecordPlace: the reconcile that records the place goes on to create the machine.
		"our place recorded, with our finalizer": {changed(func(m *v1alpha1.MachineRequest) {
			m.Annotations = map[string]string{v1alpha1.AnnotationPlacement: "p"}
			m.Finalizers = []string{v1alpha1.MachineRequestFinalizer}
		}), false},
		"our place recorded, with another annotation": {changed(func(m *v1alpha1.MachineRequest) {
			m.Annotations = map[string]string{v1alpha1.AnnotationPlacement: "p", v1alpha1.AnnotationSkipHarvesterCleanup: "true"}
		}), true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := UpdatesThatMatter(v1alpha1.MachineRequestFinalizer).Update(event.UpdateEvent{ObjectOld: base, ObjectNew: tc.new}); got != tc.want {
				t.Fatalf("passes = %v, want %v", got, tc.want)
			}
		})
	}
}

// A recorded place that is edited or removed afterwards wakes the object: the provider reports it.
func TestUpdatesThatMatterPlaceEdited(t *testing.T) {
	recorded := &v1alpha1.MachineRequest{ObjectMeta: metav1.ObjectMeta{Name: "cp-0", Namespace: "butler-system", ResourceVersion: "1",
		Annotations: map[string]string{v1alpha1.AnnotationPlacement: "p"}}}
	for name, annotations := range map[string]map[string]string{
		"edited":  {v1alpha1.AnnotationPlacement: "q"},
		"removed": nil,
	} {
		t.Run(name, func(t *testing.T) {
			edited := recorded.DeepCopy()
			edited.ResourceVersion, edited.Annotations = "2", annotations
			if !UpdatesThatMatter(v1alpha1.MachineRequestFinalizer).Update(event.UpdateEvent{ObjectOld: recorded, ObjectNew: edited}) {
				t.Fatal("dropped; want it passed")
			}
		})
	}
}

package clusterapi

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
)

// The hand-over of another management cluster's objects is the platform operator's decision: a
// HarvesterMachine's annotation alone turns nothing on, and with the operator's list it reaches
// only the management clusters listed.
func TestHarvesterMachineHandOverNeedsTheOperator(t *testing.T) {
	annotated := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "cp-0", UID: "uid-1",
		Annotations: map[string]string{infrav1.AnnotationHandOver: "true"}}}
	plain := annotated.DeepCopy()
	plain.Annotations = nil
	for name, tc := range map[string]struct {
		hm       *infrav1.HarvesterMachine
		from     []string
		handOver bool
	}{
		"annotation, no operator list": {annotated, nil, false},
		"operator list, no annotation": {plain, []string{"mgmt-a"}, false},
		"both":                         {annotated, []string{"mgmt-a"}, true},
	} {
		t.Run(name, func(t *testing.T) {
			o := withHandOver(harvesterMachineOwner(tc.hm, "mgmt-b"), tc.hm, tc.from)
			if o.HandOver != tc.handOver || (o.HandOver && len(o.HandOverFrom) != len(tc.from)) {
				t.Fatalf("owner %+v: HandOver %v, want %v limited to %v", o, o.HandOver, tc.handOver, tc.from)
			}
			if o.Succession == nil || !o.Succession.Created.Equal(tc.hm.CreationTimestamp.Time) {
				t.Fatalf("owner %+v: a HarvesterMachine's owner may be a re-creation (Succession with its creation time)", o)
			}
		})
	}
}

package clusterapi

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

func TestHandOverFrom(t *testing.T) {
	for value, want := range map[string][]string{
		"":                   nil,
		"a":                  {"a"},
		"a, ,b,":             {"a", "b"},
		"5d857bfe-f169-432a": {"5d857bfe-f169-432a"},
	} {
		pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.AnnotationHandOverFrom: value}}}
		if got := handOverFrom(pc); !slices.Equal(got, want) {
			t.Errorf("annotation %q: %q, want %q", value, got, want)
		}
	}
	if got := handOverFrom(nil); got != nil {
		t.Errorf("no ProviderConfig: %q", got)
	}
}

func TestSoonest(t *testing.T) {
	never, minute, second := reconcile.Result{}, reconcile.Result{RequeueAfter: time.Minute}, reconcile.Result{RequeueAfter: time.Second}
	for _, tc := range []struct{ a, b, want reconcile.Result }{
		{never, never, never}, {never, minute, minute}, {minute, never, minute}, {minute, second, second}, {second, minute, second},
	} {
		if got := soonest(tc.a, tc.b); got != tc.want {
			t.Errorf("soonest(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

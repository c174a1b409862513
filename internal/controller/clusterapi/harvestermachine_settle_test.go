package clusterapi

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
)

// Normal progress waits progressReportDelay after the provider's last write of the machine's
// metadata or spec, and only for that HarvesterMachine (not a new one of the same name).
func TestRecentWritesSettling(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hm-0", UID: "a"}}
	var w recentWrites
	if _, ok := w.settling(hm, now); ok {
		t.Fatal("settling before any write; want not")
	}
	w.wrote(hm, now)
	for name, tc := range map[string]struct {
		after    time.Duration
		uid      string
		want     bool
		wantLeft time.Duration
	}{
		"just written":         {after: 0, uid: "a", want: true, wantLeft: progressReportDelay},
		"half way":             {after: progressReportDelay / 2, uid: "a", want: true, wantLeft: progressReportDelay / 2},
		"settled":              {after: progressReportDelay, uid: "a"},
		"a new one, same name": {after: 0, uid: "b"},
	} {
		t.Run(name, func(t *testing.T) {
			o := hm.DeepCopy()
			o.UID = types.UID(tc.uid)
			left, ok := w.settling(o, now.Add(tc.after))
			if ok != tc.want || left != tc.wantLeft {
				t.Fatalf("settling = %s, %v; want %s, %v", left, ok, tc.wantLeft, tc.want)
			}
		})
	}
	w.forget(client.ObjectKeyFromObject(hm))
	if _, ok := w.settling(hm, now); ok {
		t.Fatal("settling after forget; want not")
	}
}

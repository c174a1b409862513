package providerconfig

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

func TestNoticeRefusalAsksForOneRecheck(t *testing.T) {
	const retry = time.Minute
	pc := &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: "butler-system", Name: "site-a", UID: "uid-a", Generation: 3}}
	denied := errkind.Waiting(v1alpha1.ReasonPermissionDenied, time.Minute, "Harvester refused to create VirtualMachine x: the credentials lack permission")
	for _, tc := range []struct {
		name      string
		last      *lastValidation // nil: never validated
		err       error
		wantAsked bool
	}{
		{name: "passed long ago, refused for a checked reason", last: &lastValidation{uid: "uid-a", generation: 3, ready: true, at: time.Now().Add(-time.Hour)}, err: denied, wantAsked: true},
		{name: "a missing image", last: &lastValidation{uid: "uid-a", generation: 3, ready: true, at: time.Now().Add(-time.Hour)},
			err: errkind.Permanent(v1alpha1.ReasonImageNotFound, "VirtualMachineImage default/x does not exist"), wantAsked: true},
		{name: "checked a moment ago", last: &lastValidation{uid: "uid-a", generation: 3, ready: true, at: time.Now()}, err: denied},
		{name: "checked within the gap", last: &lastValidation{uid: "uid-a", generation: 3, ready: true, at: time.Now().Add(-4 * time.Minute)}, err: denied},
		{name: "already failing: retried on its own", last: &lastValidation{uid: "uid-a", generation: 3, ready: false, at: time.Now().Add(-time.Hour)}, err: denied},
		{name: "never validated", err: denied},
		{name: "a recreated ProviderConfig of the same name", last: &lastValidation{uid: "uid-old", generation: 3, ready: true, at: time.Now().Add(-time.Hour)}, err: denied},
		{name: "a reason no check covers", last: &lastValidation{uid: "uid-a", generation: 3, ready: true, at: time.Now().Add(-time.Hour)},
			err: errkind.Waiting(v1alpha1.ReasonVMUnschedulable, time.Minute, "no node can run it")},
		{name: "a transient error", last: &lastValidation{uid: "uid-a", generation: 3, ready: true, at: time.Now().Add(-time.Hour)}, err: errors.New("connection reset")},
		{name: "no error", last: &lastValidation{uid: "uid-a", generation: 3, ready: true, at: time.Now().Add(-time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{RecheckInterval: 24 * time.Hour, NotReadyRetry: retry, RefusalRecheckGap: 5 * time.Minute}
			if tc.last != nil {
				r.seen = map[client.ObjectKey]lastValidation{client.ObjectKeyFromObject(pc): *tc.last}
			}
			wake := r.recheckRequests()
			r.NoticeRefusal(pc, tc.err)
			r.NoticeRefusal(pc, tc.err) // a second machine refused alike asks nothing more
			if got := len(wake); got != map[bool]int{true: 1}[tc.wantAsked] {
				t.Fatalf("%d rechecks asked for, want asked=%v", got, tc.wantAsked)
			}
			if tc.last == nil || tc.last.uid != pc.UID {
				return
			}
			_, due := r.due(pc, tc.last.secretVersion)
			wantDue := tc.wantAsked || !tc.last.ready && time.Since(tc.last.at) >= retry
			if due != wantDue {
				t.Fatalf("due = %v, want %v", due, wantDue)
			}
		})
	}
}

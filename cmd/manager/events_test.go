package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// recorderUnder returns an eventRecorder whose permissions are allowed[namespace][group] (the
// namespace "*" for any), its two underlying fake recorders, what it logged, and how many
// permission checks it made.
func recorderUnder(allowed map[string]map[string]bool, err error) (*eventRecorder, *events.FakeRecorder, *record.FakeRecorder, *[]string, *int) {
	v1, core := events.NewFakeRecorder(10), record.NewFakeRecorder(10)
	var logged []string
	checks := 0
	r := &eventRecorder{
		eventsV1: v1, coreV1: core,
		mayWrite: func(_ context.Context, namespace, group string) (bool, error) {
			checks++
			if err != nil {
				return false, err
			}
			return allowed[namespace][group] || allowed["*"][group], nil
		},
		log: funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}),
	}
	return r, v1, core, &logged, &checks
}

func secretIn(namespace string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: namespace}}
}

func drained[T any](c chan T) int {
	n := 0
	for {
		select {
		case <-c:
			n++
		default:
			return n
		}
	}
}

func TestEventRecorderChoosesTheAPIItMayWrite(t *testing.T) {
	tests := map[string]struct {
		allowed          map[string]map[string]bool
		wantV1, wantCore int
		wantLog          string
	}{
		"events.k8s.io (the chart's and config/rbac's RBAC)": {map[string]map[string]bool{"*": {"events.k8s.io": true, "": true}}, 3, 0, ""},
		"core events only (the Butler CLI's RBAC)":           {map[string]map[string]bool{"*": {"": true}}, 0, 3, "Recording core/v1 Events"},
		"neither":                             {nil, 0, 0, "Recording no events"},
		"events.k8s.io in one namespace only": {map[string]map[string]bool{"a": {"events.k8s.io": true}, "b": {"": true}}, 2, 1, "Recording core/v1 Events"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r, v1, core, logged, checks := recorderUnder(tt.allowed, nil)
			for _, ns := range []string{"a", "a", "b"} {
				r.Eventf(secretIn(ns), nil, corev1.EventTypeNormal, "Created", "Create", "created %s", "vm")
			}
			if got := drained(v1.Events); got != tt.wantV1 {
				t.Errorf("%d events.k8s.io events, want %d", got, tt.wantV1)
			}
			if got := drained(core.Events); got != tt.wantCore {
				t.Errorf("%d core events, want %d", got, tt.wantCore)
			}
			if *checks > 4 {
				t.Errorf("%d permission checks for 2 namespaces, want at most 2 each", *checks)
			}
			switch {
			case tt.wantLog == "" && len(*logged) != 0:
				t.Errorf("logged %q, want nothing", *logged)
			case tt.wantLog != "" && (len(*logged) != 1 || !strings.Contains((*logged)[0], tt.wantLog)):
				t.Errorf("logged %q, want one line with %q", *logged, tt.wantLog)
			}
		})
	}
}

// The note reaches a core event as the message (formatted once), the action and related object
// being what the old API cannot carry.
func TestEventRecorderCoreEventMessage(t *testing.T) {
	r, _, core, _, _ := recorderUnder(map[string]map[string]bool{"*": {"": true}}, nil)
	r.Eventf(secretIn("a"), nil, corev1.EventTypeWarning, "PreflightFailed", "Validate", "%s", "NetworkReady: 100% gone")
	if got := <-core.Events; got != "Warning PreflightFailed NetworkReady: 100% gone" {
		t.Errorf("core event %q", got)
	}
}

// When the API server cannot answer, nothing is decided: the event goes to events.k8s.io, the
// failure is logged once, and the next event asks again.
func TestEventRecorderUndecided(t *testing.T) {
	r, v1, _, logged, checks := recorderUnder(nil, errors.New("connection refused"))
	r.Eventf(secretIn("a"), nil, corev1.EventTypeNormal, "Created", "Create", "one")
	r.Eventf(secretIn("a"), nil, corev1.EventTypeNormal, "Created", "Create", "two")
	if drained(v1.Events) != 2 || *checks != 2 || len(*logged) != 1 {
		t.Errorf("events.k8s.io events, %d checks, log %q: want 2 events, 2 checks, one line", *checks, *logged)
	}
}

// The checks are SelfSubjectAccessReviews for create and patch on events of the group, in the namespace.
func TestMayWriteEvents(t *testing.T) {
	var asked []string
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			a := obj.(*authorizationv1.SelfSubjectAccessReview).Spec.ResourceAttributes
			asked = append(asked, a.Verb+" "+a.Resource+"."+a.Group+" in "+a.Namespace)
			obj.(*authorizationv1.SelfSubjectAccessReview).Status.Allowed = a.Group == "" || a.Verb == "create"
			return nil
		},
	}).Build()
	may := mayWriteEvents(c)
	if ok, err := may(context.Background(), "butler-system", ""); !ok || err != nil {
		t.Errorf("core events: %v, %v; want allowed", ok, err)
	}
	if ok, err := may(context.Background(), "butler-system", "events.k8s.io"); ok || err != nil {
		t.Errorf("events.k8s.io without patch: %v, %v; want not allowed", ok, err)
	}
	want := "create events. in butler-system,patch events. in butler-system,create events.events.k8s.io in butler-system,patch events.events.k8s.io in butler-system"
	if got := strings.Join(asked, ","); got != want {
		t.Errorf("asked %s\nwant  %s", got, want)
	}
}

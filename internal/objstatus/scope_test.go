package objstatus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// The tests use ImageSyncs: any kind with the common status fields would do.
var testKind = Kind[*v1alpha1.ImageSync, v1alpha1.ImageSyncStatus]{
	Name:     "ImageSync",
	Status:   func(is *v1alpha1.ImageSync) *v1alpha1.ImageSyncStatus { return &is.Status },
	DeepCopy: (*v1alpha1.ImageSyncStatus).DeepCopy,
	Fields: func(st *v1alpha1.ImageSyncStatus) Fields {
		return Fields{Phase: (*string)(&st.Phase), LastUpdated: &st.LastUpdated, Conditions: &st.Conditions,
			FailureReason: &st.FailureReason, FailureMessage: &st.FailureMessage, ObservedGeneration: &st.ObservedGeneration}
	},
	FailedPhase: string(v1alpha1.ImageSyncPhaseFailed),
	Conditions: Conditions{Ready: v1alpha1.ConditionReady, Progressing: v1alpha1.ConditionProgressing,
		Degraded: v1alpha1.ConditionDegraded, AsExpected: v1alpha1.ReasonAsExpected},
}

const (
	userReason  = "NeedsUser"   // degrading and configuration in testPolicy
	quietReason = "Downloading" // neither
	retry       = 30 * time.Second
	grace       = time.Minute
)

func isUserReason(reason string) bool { return reason == userReason }

// testPolicy is a policy as a MachineRequest's: some waits degrade, some fail after the grace.
func testPolicy() Policy {
	return Policy{
		Action: "Provision", FailAction: "Fail",
		Degrading:        isUserReason,
		NewWaitCondition: v1alpha1.ConditionProgressing,
		Configuration:    isUserReason,
		Grace:            grace,
		GraceExpired:     "%s (unresolved for %s)",
		TransientReason:  "Unavailable",
	}
}

func testObject() *v1alpha1.ImageSync {
	return &v1alpha1.ImageSync{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "img", UID: "uid-1", Generation: 3}}
}

// degradedSince gives obj a Degraded condition that turned True with reason at since.
func degradedSince(reason string, since time.Time) func(*v1alpha1.ImageSync) {
	return func(is *v1alpha1.ImageSync) {
		is.Status.Conditions = []metav1.Condition{
			{Type: v1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason, LastTransitionTime: metav1.NewTime(since)},
			{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason, LastTransitionTime: metav1.NewTime(since)},
		}
	}
}

func condition(is *v1alpha1.ImageSync, t string) string {
	c := meta.FindStatusCondition(is.Status.Conditions, t)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

func TestOutcome(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "imagesyncs"}, "img", errors.New("modified"))
	type want struct {
		result               ctrl.Result
		err                  bool
		phase                string
		failure              string // reason, then the message after ": "
		ready, prog, degrade string // "Status/Reason" of Ready, Progressing, Degraded ("" absent)
		events               int
		observed             bool
		// within says result.RequeueAfter may be up to this much shorter (time passes).
		within time.Duration
	}
	for name, tc := range map[string]struct {
		policy func(*Policy)
		setup  func(*v1alpha1.ImageSync)
		res    ctrl.Result
		err    error
		want   want
	}{
		"nil keeps the result and observes": {res: ctrl.Result{RequeueAfter: time.Hour},
			want: want{result: ctrl.Result{RequeueAfter: time.Hour}, observed: true}},
		"a wait on the user degrades and says so once": {err: errkind.Waiting(userReason, retry, "fix it"),
			want: want{result: ctrl.Result{RequeueAfter: retry}, ready: "False/" + userReason, prog: "True/" + userReason, degrade: "True/" + userReason, events: 1, observed: true}},
		"a wait that goes on is not said again": {err: errkind.Waiting(userReason, retry, "fix it"), setup: degradedSince(userReason, time.Now()),
			want: want{result: ctrl.Result{RequeueAfter: retry}, ready: "False/" + userReason, prog: "True/" + userReason, degrade: "True/" + userReason, observed: true}},
		"a quiet wait is healthy": {err: errkind.Waiting(quietReason, retry, "downloading"),
			want: want{result: ctrl.Result{RequeueAfter: retry}, ready: "False/" + quietReason, prog: "True/" + quietReason, degrade: "False/" + v1alpha1.ReasonAsExpected, observed: true}},
		"a configuration wait requeues when its grace runs out": {err: errkind.Waiting(userReason, time.Hour, "fix it"), setup: degradedSince(userReason, time.Now().Add(-grace/2)),
			want: want{result: ctrl.Result{RequeueAfter: grace/2 + TimerSlack}, within: time.Second, ready: "False/" + userReason, prog: "True/" + userReason, degrade: "True/" + userReason, observed: true}},
		"a configuration wait past its grace fails": {err: errkind.Waiting(userReason, retry, "fix it"), setup: degradedSince(userReason, time.Now().Add(-2*grace)),
			want: want{phase: "Failed", failure: userReason + ": fix it (unresolved for 1m0s)", ready: "False/" + userReason, prog: "False/" + userReason, degrade: "True/" + userReason, events: 1, observed: true}},
		"no grace where the policy says it does not apply": {err: errkind.Waiting(userReason, retry, "fix it"), setup: degradedSince(userReason, time.Now().Add(-2*grace)),
			policy: func(p *Policy) { p.GraceApplies = func() bool { return false } },
			want:   want{result: ctrl.Result{RequeueAfter: retry}, ready: "False/" + userReason, prog: "True/" + userReason, degrade: "True/" + userReason, observed: true}},
		"every wait is configuration with AnyReason": {err: errkind.Waiting(quietReason, retry, "downloading"), setup: degradedSince(quietReason, time.Now().Add(-2*grace)),
			policy: func(p *Policy) { p.Degrading, p.Configuration = AnyReason, AnyReason },
			want:   want{phase: "Failed", failure: quietReason + ": downloading (unresolved for 1m0s)", ready: "False/" + quietReason, prog: "False/" + quietReason, degrade: "True/" + quietReason, events: 1, observed: true}},
		"a deadline fails the wait": {err: errkind.Waiting(quietReason, retry, "downloading"),
			policy: func(p *Policy) {
				p.Deadline = func(why string) (bool, time.Duration) { return true, 0 }
			},
			want: want{ready: "False/" + quietReason, prog: "True/" + quietReason, degrade: "False/" + v1alpha1.ReasonAsExpected, observed: true}},
		"a deadline shortens the requeue": {err: errkind.Waiting(quietReason, retry, "downloading"),
			policy: func(p *Policy) {
				p.Deadline = func(why string) (bool, time.Duration) { return false, time.Second }
			},
			want: want{result: ctrl.Result{RequeueAfter: time.Second + TimerSlack}, ready: "False/" + quietReason, prog: "True/" + quietReason, degrade: "False/" + v1alpha1.ReasonAsExpected, observed: true}},
		"Ready False keeps its first reason when the policy says so": {err: errkind.Waiting(userReason, retry, "fix it"),
			policy: func(p *Policy) { p.KeepNotReady = true },
			setup: func(is *v1alpha1.ImageSync) {
				is.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "ImageMissing"}}
			},
			want: want{result: ctrl.Result{RequeueAfter: retry}, ready: "False/ImageMissing", prog: "True/" + userReason, degrade: "True/" + userReason, events: 1, observed: true}},
		"permanent fails for this generation": {err: fmt.Errorf("context: %w", errkind.Permanent("Invalid", "spec.x is wrong")),
			want: want{phase: "Failed", failure: "Invalid: spec.x is wrong", ready: "False/Invalid", prog: "False/Invalid", degrade: "True/Invalid", events: 1, observed: true}},
		"a failure said before is not said again": {err: errkind.Permanent("Invalid", "spec.x is wrong"),
			setup: func(is *v1alpha1.ImageSync) {
				is.Status.Phase, is.Status.FailureReason = v1alpha1.ImageSyncPhaseFailed, "Invalid"
			},
			want: want{phase: "Failed", failure: "Invalid: spec.x is wrong", ready: "False/Invalid", prog: "False/Invalid", degrade: "True/Invalid", observed: true}},
		"a conflict is retried soon and quietly": {err: fmt.Errorf("patch: %w", conflict),
			want: want{result: ctrl.Result{RequeueAfter: ConflictRetry, Priority: new(int)}}},
		"anything else is transient and degrades": {err: errors.New("connection refused"),
			want: want{err: true, degrade: "True/Unavailable"}},
		"without a transient reason Degraded is left alone": {err: errors.New("connection refused"),
			policy: func(p *Policy) { p.TransientReason = "" },
			want:   want{err: true}},
		"gone is nothing": {err: fmt.Errorf("record: %w", ErrGone)},
	} {
		t.Run(name, func(t *testing.T) {
			obj := testObject()
			if tc.setup != nil {
				tc.setup(obj)
			}
			p := testPolicy()
			if tc.policy != nil {
				tc.policy(&p)
			}
			recorder := events.NewFakeRecorder(10)
			s := New(obj, testKind, p, recorder, &Memory[v1alpha1.ImageSyncStatus]{})
			res, err := s.Outcome(context.Background(), tc.res, tc.err)
			w := tc.want
			if short := w.result.RequeueAfter - res.RequeueAfter; (err != nil) != w.err || short < 0 || short > w.within ||
				(res.Priority == nil) != (w.result.Priority == nil) || (res.Priority != nil && *res.Priority != *w.result.Priority) {
				t.Fatalf("Outcome = %+v, %v; want %+v, error %v", res, err, w.result, w.err)
			}
			if res.RequeueAfter > 0 && err != nil {
				t.Fatal("a requeue together with an error")
			}
			st := obj.Status
			failure := ""
			if st.FailureReason != "" {
				failure = st.FailureReason + ": " + st.FailureMessage
			}
			if string(st.Phase) != w.phase || failure != w.failure {
				t.Fatalf("phase %q, failure %q; want %q, %q", st.Phase, failure, w.phase, w.failure)
			}
			if got := [3]string{condition(obj, v1alpha1.ConditionReady), condition(obj, v1alpha1.ConditionProgressing), condition(obj, v1alpha1.ConditionDegraded)}; got != [3]string{w.ready, w.prog, w.degrade} {
				t.Fatalf("Ready, Progressing, Degraded = %q; want %q", got, [3]string{w.ready, w.prog, w.degrade})
			}
			if n := len(recorder.Events); n != w.events {
				t.Fatalf("%d events, want %d", n, w.events)
			}
			if observed := st.ObservedGeneration == obj.Generation; observed != w.observed {
				t.Fatalf("observedGeneration %d, generation %d: observed %v, want %v", st.ObservedGeneration, obj.Generation, observed, w.observed)
			}
		})
	}
}

// During a deletion no wait is said by an event (the deletion says its own), nothing fails on
// configuration, and the generation is observed only with the next write there is.
func TestOutcomeDuringDeletion(t *testing.T) {
	obj := testObject()
	now := metav1.Now()
	obj.DeletionTimestamp = &now
	degradedSince("Other", time.Now().Add(-2*grace))(obj)
	recorder := events.NewFakeRecorder(10)
	s := New(obj, testKind, testPolicy(), recorder, &Memory[v1alpha1.ImageSyncStatus]{})
	res, err := s.Outcome(context.Background(), ctrl.Result{}, errkind.Waiting(userReason, retry, "fix it"))
	if err != nil || res.RequeueAfter != retry || obj.Status.Phase != "" {
		t.Fatalf("Outcome = %+v, %v, phase %q; want a requeue after %s and no failure", res, err, obj.Status.Phase, retry)
	}
	if len(recorder.Events) != 0 || obj.Status.ObservedGeneration != 0 {
		t.Fatalf("%d events, observedGeneration %d; want none and 0", len(recorder.Events), obj.Status.ObservedGeneration)
	}
}

// fakeServer is an API server holding one object that counts status patches, and answers them
// with statusAnswer when that is set.
type fakeServer struct {
	client.Client
	patches      int
	statusAnswer error
}

// newFakeServer stores obj and reads it back into obj.
func newFakeServer(t *testing.T, obj *v1alpha1.ImageSync) *fakeServer {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{}
	f.Client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj.DeepCopy()).WithStatusSubresource(obj).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			f.patches++
			if f.statusAnswer != nil {
				return f.statusAnswer
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}}).Build()
	if err := f.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestWriteStatus(t *testing.T) {
	ctx := context.Background()
	obj := testObject()
	c := newFakeServer(t, obj)
	memory := &Memory[v1alpha1.ImageSyncStatus]{}
	var written []string
	kind := testKind
	kind.Written = func(_ *v1alpha1.ImageSync, before, after *v1alpha1.ImageSyncStatus) {
		written = append(written, string(before.Phase)+"->"+string(after.Phase))
	}
	newScope := func() *Scope[*v1alpha1.ImageSync, v1alpha1.ImageSyncStatus] {
		return New(obj, kind, testPolicy(), events.NewFakeRecorder(10), memory)
	}

	// Nothing changed: nothing is written.
	s := newScope()
	if err := s.WriteStatus(ctx, c); err != nil || c.patches != 0 {
		t.Fatalf("WriteStatus = %v after %d patches; want no patch", err, c.patches)
	}

	// Held progress is not written (a later reconcile builds it again from the object).
	held := New(testObject(), kind, testPolicy(), events.NewFakeRecorder(10), memory)
	held.Progressing(quietReason, "building")
	if !held.HoldProgress(quietReason) {
		t.Fatal("HoldProgress over a status that says nothing of progress did not hold")
	}
	if err := held.WriteStatus(ctx, c); err != nil || c.patches != 0 {
		t.Fatalf("WriteStatus = %v after %d patches; want no patch for held progress", err, c.patches)
	}

	// A lazy change alone is not worth a write; it rides along with the next one.
	s.SetLazily(func(st *v1alpha1.ImageSyncStatus) { st.ArtifactURL = "https://factory/x" })
	if err := s.WriteStatus(ctx, c); err != nil || c.patches != 0 {
		t.Fatalf("WriteStatus = %v after %d patches; want no patch for a lazy change", err, c.patches)
	}
	s.SetPhase(string(v1alpha1.ImageSyncPhasePending))
	if err := s.WriteStatus(ctx, c); err != nil || c.patches != 1 {
		t.Fatalf("WriteStatus = %v after %d patches; want one", err, c.patches)
	}
	stored := &v1alpha1.ImageSync{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Status.Phase != v1alpha1.ImageSyncPhasePending || stored.Status.ArtifactURL != "https://factory/x" {
		t.Fatalf("stored status %+v; want the phase and the lazy change", stored.Status)
	}
	if len(written) != 1 || written[0] != "->Pending" {
		t.Fatalf("Written told %q; want one write from \"\" to Pending", written)
	}

	// Written again unchanged: no write, neither from this scope nor from the next, which
	// starts from what was written even though the object it is given is older.
	if err := s.WriteStatus(ctx, c); err != nil || c.patches != 1 {
		t.Fatalf("WriteStatus = %v after %d patches; want no second patch", err, c.patches)
	}
	obj = testObject()
	obj.ResourceVersion = stored.ResourceVersion
	if s := newScope(); obj.Status.Phase != v1alpha1.ImageSyncPhasePending || s.WriteStatus(ctx, c) != nil || c.patches != 1 {
		t.Fatalf("a new scope starts from phase %q and wrote %d patches; want Pending from memory and no patch", obj.Status.Phase, c.patches)
	}

	// An object that is gone is released: no error, and nothing more is written.
	c.statusAnswer = apierrors.NewNotFound(schema.GroupResource{Resource: "imagesyncs"}, obj.Name)
	s = newScope()
	s.SetPhase(string(v1alpha1.ImageSyncPhaseReady))
	if err := s.WriteStatus(ctx, c); err != nil || !s.Released() || c.patches != 2 {
		t.Fatalf("WriteStatus = %v, released %v after %d patches; want nil, released, 2", err, s.Released(), c.patches)
	}
	s.SetPhase(string(v1alpha1.ImageSyncPhaseFailed))
	if err := s.WriteStatus(ctx, c); err != nil || c.patches != 2 {
		t.Fatalf("WriteStatus = %v after %d patches; want no write once released", err, c.patches)
	}
}

// A failed write says which kind's status it was, and is not remembered.
func TestWriteStatusError(t *testing.T) {
	ctx := context.Background()
	obj := testObject()
	c := newFakeServer(t, obj)
	c.statusAnswer = errors.New("etcd is down")
	memory := &Memory[v1alpha1.ImageSyncStatus]{}
	s := New(obj, testKind, testPolicy(), events.NewFakeRecorder(10), memory)
	s.SetPhase(string(v1alpha1.ImageSyncPhasePending))
	err := s.WriteStatus(ctx, c)
	if err == nil || !strings.Contains(err.Error(), "patch ImageSync status") || !strings.Contains(err.Error(), "etcd is down") {
		t.Fatalf("WriteStatus = %v; want the kind and the cause", err)
	}
	if _, ok := memory.Last(obj); ok {
		t.Fatal("a status that was not written is remembered")
	}
}

// PatchMeta keeps the status being built, and releases an object that is gone.
func TestPatchMeta(t *testing.T) {
	ctx := context.Background()
	obj := testObject()
	c := newFakeServer(t, obj)
	s := New(obj, testKind, testPolicy(), events.NewFakeRecorder(10), &Memory[v1alpha1.ImageSyncStatus]{})
	s.Progressing(quietReason, "building")
	patch := client.MergeFrom(obj.DeepCopy())
	obj.Annotations = map[string]string{"a": "b"}
	if err := s.PatchMeta(ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	if condition(obj, v1alpha1.ConditionProgressing) != "True/"+quietReason || obj.Annotations["a"] != "b" {
		t.Fatalf("after PatchMeta: conditions %+v, annotations %v; want the status being built and the patch", obj.Status.Conditions, obj.Annotations)
	}
	if err := c.Delete(ctx, obj.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	if err := s.PatchMeta(ctx, c, client.MergeFrom(obj.DeepCopy())); !errors.Is(err, ErrGone) || !s.Released() {
		t.Fatalf("PatchMeta of a deleted object = %v, released %v; want ErrGone and released", err, s.Released())
	}
	if res, err := s.Outcome(ctx, ctrl.Result{}, fmt.Errorf("x: %w", ErrGone)); err != nil || res != (ctrl.Result{}) {
		t.Fatalf("Outcome(ErrGone) = %+v, %v; want nothing", res, err)
	}
}

// HoldProgress holds normal progress over a status that says nothing of progress or says the
// same, and never over one that says something else, which would mislead if left.
func TestHoldProgress(t *testing.T) {
	ctx := context.Background()
	progressing := func(reason string) func(*v1alpha1.ImageSync) {
		return func(is *v1alpha1.ImageSync) {
			is.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: reason, Message: "stored"}}
		}
	}
	for name, tc := range map[string]struct {
		stored    func(*v1alpha1.ImageSync)
		wantHeld  bool
		wantPatch int
	}{
		"no status yet":          {stored: func(*v1alpha1.ImageSync) {}, wantHeld: true},
		"the same progress":      {stored: progressing(quietReason), wantHeld: true},
		"an earlier wait":        {stored: progressing(userReason), wantPatch: 1},
		"a problem since passed": {stored: degradedSince(userReason, time.Now().Add(-time.Minute)), wantPatch: 1},
	} {
		t.Run(name, func(t *testing.T) {
			obj := testObject()
			tc.stored(obj)
			c := newFakeServer(t, obj)
			s := New(obj, testKind, testPolicy(), events.NewFakeRecorder(10), &Memory[v1alpha1.ImageSyncStatus]{})
			s.Progressing(quietReason, "building")
			if held := s.HoldProgress(quietReason); held != tc.wantHeld {
				t.Fatalf("HoldProgress = %v; want %v", held, tc.wantHeld)
			}
			if err := s.WriteStatus(ctx, c); err != nil || c.patches != tc.wantPatch {
				t.Fatalf("WriteStatus = %v after %d patches; want %d", err, c.patches, tc.wantPatch)
			}
		})
	}
}

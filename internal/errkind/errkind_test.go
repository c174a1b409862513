package errkind

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// terms renames "Engine" to "API" and advises on it.
func terms(reason string) (string, string) {
	if reason == "Engine" {
		return "API", "; do this"
	}
	return reason, ""
}

func TestTranslateOnce(t *testing.T) {
	for name, tc := range map[string]struct {
		err                error
		reason, message    string
		waiting, unchanged bool
		retryAfter         time.Duration
	}{
		"the engine's wait is put in the door's words": {err: EngineWaiting("Engine", time.Minute, "no %s", "image"),
			reason: "API", message: "no image; do this", waiting: true, retryAfter: time.Minute},
		"the engine's failure is put in the door's words, through a wrap": {err: fmt.Errorf("create: %w", EnginePermanent("Engine", "taken")),
			reason: "API", message: "taken; do this"},
		"the door's own wait is left as it is, advice and all": {err: Waiting("Engine", time.Second, "the door's"), unchanged: true},
		"the door's own failure is left as it is":              {err: Permanent("Engine", "the door's"), unchanged: true},
		"another error is left as it is":                       {err: errors.New("boom"), unchanged: true},
	} {
		t.Run(name, func(t *testing.T) {
			got := Translate(tc.err, terms)
			if tc.unchanged {
				if !errors.Is(got, tc.err) || got.Error() != tc.err.Error() {
					t.Fatalf("Translate changed %v into %v", tc.err, got)
				}
				return
			}
			if InEngineWords(got) {
				t.Fatalf("%v is still in the engine's words", got)
			}
			again := Translate(got, terms)
			if !errors.Is(again, got) {
				t.Fatalf("a second Translate changed %q into %q", got, again)
			}
			if w, ok := AsWaiting(got); tc.waiting && (!ok || w.Reason != tc.reason || w.Message != tc.message || w.RetryAfter != tc.retryAfter) {
				t.Fatalf("got %#v", got)
			}
			if p, ok := AsPermanent(got); !tc.waiting && (!ok || p.Reason != tc.reason || p.Message != tc.message) {
				t.Fatalf("got %#v", got)
			}
		})
	}
}

func TestInEngineWords(t *testing.T) {
	if !InEngineWords(fmt.Errorf("x: %w", EngineWaiting("R", 0, "m"))) || !InEngineWords(EnginePermanent("R", "m")) {
		t.Error("the engine's errors are not said to be in its words")
	}
	if InEngineWords(Waiting("R", 0, "m")) || InEngineWords(Permanent("R", "m")) || InEngineWords(errors.New("m")) || InEngineWords(nil) {
		t.Error("a door's error or another is said to be in the engine's words")
	}
}

func TestReasonOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", EngineWaiting("Waits", time.Second, "m")), "Waits"},
		{fmt.Errorf("x: %w", Permanent("Fails", "m")), "Fails"},
		{errors.New("connection reset"), ""},
		{nil, ""},
	} {
		if got := ReasonOf(tc.err); got != tc.want {
			t.Errorf("ReasonOf(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

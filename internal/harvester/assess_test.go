package harvester

import (
	"strings"
	"testing"
	"time"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
)

func TestAssess(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	limits := StartLimits{StartGrace: 5 * time.Minute, IPReport: 3 * time.Minute}
	failing := &Diagnosis{Reason: reasons.VolumeNotBound, Message: "disk pending"}
	for name, tc := range map[string]struct {
		obs         Observation
		wantReason  string
		wantLookAt  time.Time // zero: none
		wantMention string
	}{
		"just created: on its way, looked at when the grace runs out": {
			obs: Observation{VMCreatedAt: now.Add(-time.Minute)}, wantLookAt: now.Add(4*time.Minute + timerSlack)},
		"starting past the grace": {
			obs:        Observation{Namespace: "vms", Name: "cp-0", VMCreatedAt: now.Add(-6 * time.Minute), Starting: "status Provisioning"},
			wantReason: reasons.VMNotStarting, wantMention: "status Provisioning"},
		"what Harvester reports wrong, at once": {
			obs: Observation{VMCreatedAt: now.Add(-time.Second), Diagnosis: failing}, wantReason: reasons.VolumeNotBound},
		"a diagnosis that may appear later is looked for then": {
			obs:        Observation{VMCreatedAt: now.Add(-10 * time.Minute), Diagnosis: failing, DiagnoseAgainAt: now.Add(time.Minute)},
			wantReason: reasons.VolumeNotBound, wantLookAt: now.Add(time.Minute + timerSlack)},
		"running without an address, within the IP timeout": {
			obs: Observation{Running: true, RunningSince: now.Add(-time.Minute), VMCreatedAt: now.Add(-time.Hour)}, wantLookAt: now.Add(2*time.Minute + time.Second + timerSlack)},
		"running without an address past the IP timeout": {
			obs:        Observation{Namespace: "vms", Name: "cp-0", Running: true, RunningSince: now.Add(-4 * time.Minute)},
			wantReason: reasons.NoIPAddress, wantMention: "guest agent"},
	} {
		t.Run(name, func(t *testing.T) {
			a := Assess(tc.obs, limits, now)
			reason := ""
			if a.Problem != nil {
				reason = a.Problem.Reason
				if !strings.Contains(a.Problem.Message, tc.wantMention) {
					t.Errorf("message %q does not mention %q", a.Problem.Message, tc.wantMention)
				}
			}
			if reason != tc.wantReason || !a.LookAgainAt.Equal(tc.wantLookAt) {
				t.Fatalf("reason %q, look again at %v; want %q, %v", reason, a.LookAgainAt, tc.wantReason, tc.wantLookAt)
			}
		})
	}
}

package harvester

import (
	"fmt"
	"time"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
)

// StartLimits are how long a starting machine may take before its start is reported as a
// problem.
type StartLimits struct {
	// StartGrace is how long a VM may take to start (its disks cloned, its pod scheduled and
	// started, the guest running) before the start is reported (reasons.VMNotStarting) with where
	// it stands. Failures Harvester reports are reported at once.
	StartGrace time.Duration
	// IPReport is how long a running VM may go without an IPv4 address before the guest agent
	// and DHCP are blamed (reasons.NoIPAddress).
	IPReport time.Duration
}

// Assessment is the engine's judgement of a machine that is not running with an address yet.
type Assessment struct {
	// Problem, if set, is what is wrong (or a start that takes too long): worth telling the user.
	// Nil while the machine is simply on its way.
	Problem *Diagnosis
	// LookAgainAt, if set, is when the judgement may change with no change on Harvester to
	// announce it (a grace period runs out): the front door looks again then.
	LookAgainAt time.Time
}

// timerSlack is added to a time to look again so that the timer has run out by then.
const timerSlack = 10 * time.Millisecond

// Assess judges a machine from its observation at now: what Harvester reports is wrong at once; a
// running VM without an address once IPReport has passed since it started running; a start that
// goes on past StartGrace since the VM was created.
func Assess(obs Observation, limits StartLimits, now time.Time) Assessment {
	var a Assessment
	lookAgain := func(at time.Time) {
		if at.After(now) && (a.LookAgainAt.IsZero() || at.Before(a.LookAgainAt)) {
			a.LookAgainAt = at.Add(timerSlack)
		}
	}
	if !obs.DiagnoseAgainAt.IsZero() {
		lookAgain(obs.DiagnoseAgainAt)
	}
	a.Problem = obs.Diagnosis
	vm := describe("VirtualMachine", obs.Namespace, obs.Name)
	// KubeVirt records phase transitions to the second: the VM may have run up to a second less.
	ipDeadline := obs.RunningSince.Add(limits.IPReport + time.Second)
	switch {
	case obs.Running && !obs.RunningSince.IsZero() && now.After(ipDeadline):
		a.Problem = &Diagnosis{Reason: reasons.NoIPAddress, Message: fmt.Sprintf(
			"%s has run for more than %s without reporting an IPv4 address on %s: check that the image runs the QEMU guest agent (for Talos, the qemu-guest-agent system extension) and that the VM network has DHCP with free leases",
			vm, limits.IPReport, NICName)}
	case obs.Running:
		if !obs.RunningSince.IsZero() {
			lookAgain(ipDeadline)
		}
	case a.Problem == nil && !obs.VMCreatedAt.IsZero():
		if now.Sub(obs.VMCreatedAt) > limits.StartGrace {
			a.Problem = &Diagnosis{Reason: reasons.VMNotStarting, Message: fmt.Sprintf(
				"%s has been starting for more than %s: %s. Its events on Harvester say more (kubectl describe vmi, and its virt-launcher pod)", vm, limits.StartGrace, obs.Starting)}
		} else {
			lookAgain(obs.VMCreatedAt.Add(limits.StartGrace))
		}
	}
	return a
}

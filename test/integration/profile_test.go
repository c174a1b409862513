package integration

import (
	"bytes"
	"runtime/pprof"
	"strings"
	"testing"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// A CPU profile of the manager says which Harvester watch its samples are for: every informer of
// a cluster cache runs in goroutines labelled with its cache and kind (the watch's decoding among
// them, the largest share of the manager's CPU in the bench's profiles).
func TestHarvesterWatchesAreLabelledInProfiles(t *testing.T) {
	w := newWorld(t)
	mr := w.machineRequest("labelled-0")
	w.must(mgmt.Create(w.ctx, mr))
	w.waitPhase(mr, v1alpha1.MachinePhaseRunning)

	var goroutines bytes.Buffer
	w.must(pprof.Lookup("goroutine").WriteTo(&goroutines, 1))
	for _, want := range []string{
		`"cache":"owned", "kind":"VirtualMachine"`,
		`"cache":"owned", "kind":"VirtualMachineInstance"`,
		`"cache":"owned", "kind":"PersistentVolumeClaim"`,
		`"cache":"owned", "kind":"Secret metadata"`,
		`"cache":"owned", "kind":"VirtualMachineImage"`,
		`"cache":"warnings", "kind":"Event"`,
		`"cache":"volumes", "kind":"VirtualMachine"`,
	} {
		if !strings.Contains(goroutines.String(), want) {
			t.Errorf("no goroutine labelled %s; labels seen:\n%s", want, labelsIn(goroutines.String()))
		}
	}
	w.deleteAndWait(mr)
}

// labelsIn lists the distinct label lines of a goroutine profile (debug=1).
func labelsIn(profile string) string {
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(profile, "\n") {
		if strings.HasPrefix(line, "# labels:") && !seen[line] {
			seen[line] = true
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

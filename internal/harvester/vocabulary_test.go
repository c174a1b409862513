package harvester

import (
	"go/ast"
	"go/token"
	"regexp"
	"testing"
)

// The engine speaks to the users of every front door: no word it writes names one front door's
// kind or fields (the front doors' engine_errors.go add the advice in their own words). The one
// string naming a kind is the MachineRequest's owner kind, which the labels of objects made before
// owner kinds were recorded imply.
func TestEngineMessagesNameNoFrontDoor(t *testing.T) {
	frontDoorWords := regexp.MustCompile(`MachineRequest|HarvesterMachine|HarvesterCluster|spec\.(machineName|memoryMB|image|providerID)`)
	checked := 0
	for _, src := range engineSources(t) {
		ast.Inspect(src.file, func(n ast.Node) bool {
			if spec, ok := n.(*ast.ValueSpec); ok && len(spec.Names) == 1 && spec.Names[0].Name == "OwnerKindMachineRequest" {
				return false
			}
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			checked++
			if frontDoorWords.MatchString(lit.Value) {
				t.Errorf("%s: %s names a front door's kind or field: say it in the front door's advice (engine_errors.go)", src.name, lit.Value)
			}
			return true
		})
	}
	if checked < 200 {
		t.Fatalf("checked %d strings: the test no longer reads the engine's files", checked)
	}
}

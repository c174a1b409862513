package harvester

import (
	"go/ast"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The caches of each Harvester cluster hold trimmed objects (trimVMI, trimToVolumes, no
// managedFields): an Update built from one would write the trimmed object back and erase on
// Harvester what the cache left out. So the engine writes to Harvester by creates, deletes and
// patches of what it changes; its one Update is of a Lease (writeLease), which it reads live and
// never caches, so that of two writers one fails on the resourceVersion.
func TestNoUpdateIsBuiltFromACachedObject(t *testing.T) {
	updatesMayBeIn := map[string]bool{"writeLease": true}
	seen := map[string]int{}
	for _, src := range engineSources(t) {
		for _, decl := range src.file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Update" {
					seen[fn.Name.Name]++
					if !updatesMayBeIn[fn.Name.Name] {
						t.Errorf("%s: %s calls Update: patch what it changes instead (a cached copy may be trimmed), or read the object live and add the function here with why", src.name, fn.Name.Name)
					}
				}
				return true
			})
		}
	}
	if seen["writeLease"] == 0 {
		t.Fatal("writeLease no longer calls Update: the test no longer finds the engine's updates")
	}
	for _, watches := range NewWatches(nil) {
		for _, kind := range watches.Kinds() {
			if _, isLease := kind.Object.(*coordinationv1.Lease); isLease {
				t.Errorf("the %s cache watches Leases, which writeLease updates as read: read them live", watches.Name())
			}
		}
	}
}

package v1alpha1_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

func TestProviderIDRoundTrips(t *testing.T) {
	id := infrav1.ProviderID("3f1b8a4e-0d7c-4d2b-9a51-6c1f0e2b7d90")
	if id != "harvester://3f1b8a4e-0d7c-4d2b-9a51-6c1f0e2b7d90" {
		t.Fatalf("ProviderID = %q", id)
	}
	uid, err := infrav1.VMUIDFromProviderID(id)
	if err != nil || uid != "3f1b8a4e-0d7c-4d2b-9a51-6c1f0e2b7d90" {
		t.Fatalf("VMUIDFromProviderID(%q) = %q, %v", id, uid, err)
	}
	for _, bad := range []string{"", "harvester://", "harvester:///uid", "harvester://ns/uid", "aws:///i-1", "uid"} {
		if uid, err := infrav1.VMUIDFromProviderID(bad); err == nil {
			t.Errorf("VMUIDFromProviderID(%q) = %q, want an error", bad, uid)
		}
	}
}

func TestAPIEndpoint(t *testing.T) {
	for _, tc := range []struct {
		e            infrav1.APIEndpoint
		zero, valid  bool
		hostPortForm string
	}{
		{infrav1.APIEndpoint{}, true, false, ":0"},
		{infrav1.APIEndpoint{Host: "10.0.0.10"}, false, false, "10.0.0.10:0"},
		{infrav1.APIEndpoint{Host: "10.0.0.10", Port: 6443}, false, true, "10.0.0.10:6443"},
		{infrav1.APIEndpoint{Host: "fd00::10", Port: 6443}, false, true, "[fd00::10]:6443"},
	} {
		if tc.e.IsZero() != tc.zero || tc.e.IsValid() != tc.valid || tc.e.String() != tc.hostPortForm {
			t.Errorf("%+v: IsZero %v, IsValid %v, String %q", tc.e, tc.e.IsZero(), tc.e.IsValid(), tc.e.String())
		}
	}
}

func TestFailureDomainsForTheContract(t *testing.T) {
	spec := infrav1.HarvesterClusterSpec{FailureDomains: []infrav1.HarvesterFailureDomain{
		{Name: "a", NodeSelector: map[string]string{"zone": "a"}},
		{Name: "b", ControlPlane: ptr.To(false), NodeSelector: map[string]string{"zone": "b", "disk": "ssd"}},
		{Name: "c", ControlPlane: ptr.To(true), NodeSelector: map[string]string{"zone": "c"}},
	}}
	got := spec.ContractFailureDomains()
	want := []infrav1.FailureDomain{
		{Name: "a", ControlPlane: ptr.To(true), Attributes: map[string]string{"zone": "a"}},
		{Name: "b", ControlPlane: ptr.To(false), Attributes: map[string]string{"zone": "b", "disk": "ssd"}},
		{Name: "c", ControlPlane: ptr.To(true), Attributes: map[string]string{"zone": "c"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ContractFailureDomains() = %+v, want %+v", got, want)
	}
	got[0].Attributes["zone"] = "changed"
	if spec.FailureDomains[0].NodeSelector["zone"] != "a" {
		t.Error("the contract's attributes share the spec's map")
	}
	if fds := (&infrav1.HarvesterClusterSpec{}).ContractFailureDomains(); fds != nil {
		t.Errorf("no failure domains became %+v, want nil (the field is left out)", fds)
	}

	sel, ok := spec.NodeSelectorFor("b")
	if !ok || !reflect.DeepEqual(sel, map[string]string{"zone": "b", "disk": "ssd"}) {
		t.Errorf("NodeSelectorFor(b) = %v, %v", sel, ok)
	}
	sel["zone"] = "changed"
	if spec.FailureDomains[1].NodeSelector["zone"] != "b" {
		t.Error("NodeSelectorFor shares the spec's map")
	}
	if sel, ok := spec.NodeSelectorFor("z"); ok || sel != nil {
		t.Errorf("NodeSelectorFor(z) = %v, %v", sel, ok)
	}
}

func TestProviderConfigKeyDefaultsToTheClustersNamespace(t *testing.T) {
	c := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "c"}}
	c.Spec.ProviderConfigRef.Name = "harvester"
	if ns, name := c.ProviderConfigKey(); ns != "team-a" || name != "harvester" {
		t.Errorf("ProviderConfigKey() = %s/%s", ns, name)
	}
	c.Spec.ProviderConfigRef.Namespace = "butler-system"
	if ns, name := c.ProviderConfigKey(); ns != "butler-system" || name != "harvester" {
		t.Errorf("ProviderConfigKey() = %s/%s", ns, name)
	}
}

func TestConditionsAccessors(t *testing.T) {
	conds := []metav1.Condition{{Type: infrav1.ConditionReady, Status: metav1.ConditionTrue, Reason: infrav1.ReasonVMRunning}}
	m := &infrav1.HarvesterMachine{}
	m.SetConditions(conds)
	c := &infrav1.HarvesterCluster{}
	c.SetConditions(conds)
	if !reflect.DeepEqual(m.GetConditions(), conds) || !reflect.DeepEqual(c.GetConditions(), conds) {
		t.Error("conditions do not round-trip")
	}
}

// Empty contract structs are left out, as the contract's omitzero asks: an object that was never
// reconciled has no status, and a cluster without an endpoint has no controlPlaneEndpoint.
func TestEmptyContractFieldsAreLeftOut(t *testing.T) {
	c := &infrav1.HarvesterCluster{}
	c.Spec.ProviderConfigRef.Name = "harvester"
	data, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"controlPlaneEndpoint", "status", "initialization"} {
		if strings.Contains(string(data), field) {
			t.Errorf("%s is in\n%s", field, data)
		}
	}
	m := &infrav1.HarvesterMachine{}
	m.Status.Conditions = []metav1.Condition{}
	m.Status.ObservedGeneration = 1
	data, err = yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "initialization") {
		t.Errorf("an empty initialization is in\n%s", data)
	}
}

// Every constant of conditions.go is documented, and its condition types are words
// metav1.Condition's schema accepts (the reasons' are held so in api/reasons). VMProvisioning is
// the one reason of the machines renamed (the MachineRequest's VMCreating).
func TestConditionTypesAreValidWords(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "conditions.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	types := 0
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if vs.Doc.Text() == "" {
				t.Errorf("%s has no doc comment", vs.Names[0].Name)
			}
			if name := vs.Names[0].Name; strings.HasPrefix(name, "Condition") {
				types++
				if value, _ := strconv.Unquote(vs.Values[0].(*ast.BasicLit).Value); !conditionWord.MatchString(value) {
					t.Errorf("%s (%q) is not a valid condition type", name, value)
				}
			}
		}
	}
	if types < 5 {
		t.Errorf("found %d condition types: the test no longer reads conditions.go as written", types)
	}
	if infrav1.ReasonVMProvisioning == v1alpha1.ReasonVMCreating || infrav1.ReasonNameConflict != v1alpha1.ReasonNameConflict {
		t.Error("reason values changed")
	}
}

var conditionWord = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

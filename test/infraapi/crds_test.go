package infraapi

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
)

// The kinds of the package, as Cluster API finds them: the CRD of kind K in group G is named
// "<lowercase K>s.G" (Cluster API's contract.CalculateCRDName), and its label
// cluster.x-k8s.io/v1beta2 lists served versions of the CRD.
var kinds = []string{"HarvesterCluster", "HarvesterClusterTemplate", "HarvesterMachine", "HarvesterMachineTemplate"}

func TestCRDsFollowTheContract(t *testing.T) {
	ctx := context.Background()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			name := strings.ToLower(kind) + "s." + infrav1.GroupVersion.Group
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				t.Fatalf("CRD %s (the name Cluster API computes for kind %s): %v", name, kind, err)
			}
			if crd.Spec.Names.Kind != kind || crd.Spec.Names.ListKind != kind+"List" {
				t.Errorf("kind %q, list kind %q", crd.Spec.Names.Kind, crd.Spec.Names.ListKind)
			}
			if crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
				t.Errorf("scope %s: the contract wants namespaced resources", crd.Spec.Scope)
			}
			if !slices.Contains(crd.Spec.Names.Categories, "cluster-api") {
				t.Errorf("categories %v lack cluster-api", crd.Spec.Names.Categories)
			}
			label, ok := crd.Labels[infrav1.ContractVersionLabel]
			if !ok || label != "v1alpha1" {
				t.Fatalf("label %s is %q (present: %v), want v1alpha1", infrav1.ContractVersionLabel, label, ok)
			}
			for _, v := range strings.Split(label, "_") {
				served := slices.ContainsFunc(crd.Spec.Versions, func(cv apiextensionsv1.CustomResourceDefinitionVersion) bool {
					return cv.Name == v && cv.Served
				})
				if !served {
					t.Errorf("the contract label names version %s, which the CRD does not serve", v)
				}
			}
			gvk := infrav1.GroupVersion.WithKind(kind)
			if !scheme.Recognizes(gvk) || !scheme.Recognizes(schema.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: kind + "List"}) {
				t.Errorf("the package does not register %s and its list", gvk)
			}
			hasStatus := crd.Spec.Versions[0].Subresources != nil && crd.Spec.Versions[0].Subresources.Status != nil
			// A machine template reports what its machines will have (autoscaling from zero); a
			// cluster template has nothing to report.
			if wantStatus := kind != "HarvesterClusterTemplate"; hasStatus != wantStatus {
				t.Errorf("status subresource: %v, want %v", hasStatus, wantStatus)
			}
		})
	}
}

// config/crd/infrastructure/kustomization.yaml lists every generated CRD, and config/capi installs
// each CRD of the package (and nothing else of config/crd).
func TestKustomizationsListEveryCRD(t *testing.T) {
	dir := filepath.Join(repoRoot(), "config", "crd", "infrastructure")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	listed, err := kustomizationResources(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" && !slices.Contains(listed, base) {
			t.Errorf("%s is not listed in config/crd/infrastructure/kustomization.yaml", base)
		}
	}
	crds := 0
	for _, obj := range installed {
		if obj.GetKind() == "CustomResourceDefinition" {
			crds++
			if !strings.HasSuffix(obj.GetName(), "."+infrav1.GroupVersion.Group) {
				t.Errorf("config/capi installs CRD %s of another group", obj.GetName())
			}
		}
	}
	if crds != len(kinds) {
		t.Errorf("config/capi installs %d CRDs, want %d", crds, len(kinds))
	}
	// The chart and config/default do not carry them (yet): the MachineRequest provider's install
	// is tested as it is.
	for _, path := range []string{"charts/butler-provider-harvester/crds", "config/crd/bases"} {
		entries, err := os.ReadDir(filepath.Join(repoRoot(), path))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), infrav1.GroupVersion.Group) {
				t.Errorf("%s holds %s", path, e.Name())
			}
		}
	}
}

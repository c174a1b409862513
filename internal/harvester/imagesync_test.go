package harvester

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

const testSchematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

func TestFactoryImageName(t *testing.T) {
	for name, tc := range map[string]struct {
		spec v1alpha1.ImageSyncSpec
		want string
	}{
		"defaults":                {v1alpha1.ImageSyncSpec{FactoryRef: v1alpha1.ImageFactoryRef{SchematicID: testSchematic, Version: "v1.12.4"}}, "nocloud-v1-12-4-amd64-37656798-butler"},
		"what the bootstrap asks": {v1alpha1.ImageSyncSpec{FactoryRef: v1alpha1.ImageFactoryRef{SchematicID: testSchematic, Version: "v1.12.4", Arch: "amd64", Platform: "talos"}}, "talos-v1-12-4-amd64-37656798-butler"},
		"arm64":                   {v1alpha1.ImageSyncSpec{FactoryRef: v1alpha1.ImageFactoryRef{SchematicID: testSchematic, Version: "1.9", Arch: "arm64"}}, "nocloud-1-9-arm64-37656798-butler"},
		"short schematic":         {v1alpha1.ImageSyncSpec{FactoryRef: v1alpha1.ImageFactoryRef{SchematicID: "abcdef12", Version: "v1"}}, "nocloud-v1-amd64-abcdef12-butler"},
		"display name":            {v1alpha1.ImageSyncSpec{DisplayName: "Talos Linux_1.9 (prod)!"}, "talos-linux-1.9-prod"},
		"double dashes and ends":  {v1alpha1.ImageSyncSpec{DisplayName: "--a -- b.."}, "a-b"},
		"63 characters at most":   {v1alpha1.ImageSyncSpec{DisplayName: strings.Repeat("ab", 40)}, strings.Repeat("ab", 31) + "a"},
		"cut before a dash":       {v1alpha1.ImageSyncSpec{DisplayName: strings.Repeat("a", 62) + "-b"}, strings.Repeat("a", 62)},
		"nothing usable":          {v1alpha1.ImageSyncSpec{DisplayName: "!!!"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			if got := FactoryImageName(tc.spec); got != tc.want {
				t.Fatalf("FactoryImageName = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFactoryImageURL(t *testing.T) {
	spec := v1alpha1.ImageSyncSpec{FactoryRef: v1alpha1.ImageFactoryRef{SchematicID: testSchematic, Version: "v1.12.4"}}
	want := "https://factory.example/image/" + testSchematic + "/v1.12.4/nocloud-amd64.qcow2"
	for _, base := range []string{"https://factory.example", "https://factory.example/"} {
		if got := FactoryImageURL(base, spec); got != want {
			t.Fatalf("FactoryImageURL(%q) = %q, want %q", base, got, want)
		}
	}
	spec.FactoryRef.Platform, spec.FactoryRef.Arch, spec.Format = "talos", "arm64", "raw"
	if got := FactoryImageURL("https://f", spec); got != "https://f/image/"+testSchematic+"/v1.12.4/talos-arm64.raw" {
		t.Fatalf("FactoryImageURL = %q", got)
	}
}

func TestBuildVirtualMachineImage(t *testing.T) {
	u := BuildVirtualMachineImage(ImageSpec{Ref: ObjectRef{Namespace: "default", Name: "talos"}, URL: "https://f/x.qcow2", Requester: "butler-system/is"})
	if u.GroupVersionKind() != VirtualMachineImageGVK || u.GetNamespace() != "default" || u.GetName() != "talos" {
		t.Fatalf("object %v %s/%s", u.GroupVersionKind(), u.GetNamespace(), u.GetName())
	}
	spec, _, _ := unstructured.NestedStringMap(u.Object, "spec")
	if spec["sourceType"] != "download" || spec["url"] != "https://f/x.qcow2" || spec["displayName"] != "talos" {
		t.Fatalf("spec %v", spec)
	}
	if u.GetLabels()[LabelAppManagedBy] != "butler" || u.GetLabels()[LabelManagedBy] != ManagedByValue || u.GetAnnotations()[AnnotationImageSync] != "butler-system/is" {
		t.Fatalf("labels %v annotations %v", u.GetLabels(), u.GetAnnotations())
	}
}

func imageWith(conds ...map[string]any) *unstructured.Unstructured {
	u := BuildVirtualMachineImage(ImageSpec{Ref: ObjectRef{Namespace: "default", Name: "talos"}})
	list := make([]any, len(conds))
	for i, c := range conds {
		list[i] = c
	}
	_ = unstructured.SetNestedSlice(u.Object, list, "status", "conditions")
	return u
}

func c(t, s, reason, msg string) map[string]any {
	return map[string]any{"type": t, "status": s, "reason": reason, "message": msg}
}

// Harvester's import states (pkg/image/common/operator.go) and what an ImageSync makes of them.
func TestImportStateOf(t *testing.T) {
	for name, tc := range map[string]struct {
		image    *unstructured.Unstructured
		imported bool
		failure  string
		message  string
	}{
		"new":       {imageWith(), false, "", "Harvester is downloading"},
		"importing": {imageWith(c("Initialized", "True", "Initialized", ""), c("Imported", "Unknown", "Importing", "")), false, "", "Harvester is downloading"},
		"retrying": {imageWith(c("Initialized", "True", "Initialized", ""), c("Imported", "Unknown", "Importing", ""),
			c("RetryLimitExceeded", "False", "", "retry attempted 1/3 failed due to error: no route to host")), false, "", "retries after a failure: retry attempted 1/3"},
		"imported": {imageWith(c("Initialized", "True", "", ""), c("Imported", "True", "Imported", "")), true, "", "is imported"},
		"gave up": {imageWith(c("Initialized", "True", "", ""), c("Imported", "False", "Importing", "retry attempted 3/3 ..."),
			c("RetryLimitExceeded", "True", "", "retry attempted 3/3 failed due to error: no route to host")), false, v1alpha1.ReasonHarvesterRetryLimitExceeded, "no route to host"},
		"init gave up": {imageWith(c("Initialized", "False", "", "no backing image"), c("RetryLimitExceeded", "True", "", "retry attempted 3/3 failed due to error: storage class")),
			false, v1alpha1.ReasonHarvesterInitFailed, "storage class"},
		"upload failed": {imageWith(c("Imported", "False", "UploadFailed", "connection closed")), false, v1alpha1.ReasonHarvesterImportFailed, "UploadFailed"},
	} {
		t.Run(name, func(t *testing.T) {
			got := importStateOf(tc.image)
			failure := ""
			if got.Failure != nil {
				failure = got.Failure.Reason
				got.Message = got.Failure.Message
			}
			if got.Imported != tc.imported || failure != tc.failure || !strings.Contains(got.Message, tc.message) {
				t.Fatalf("imported %v, failure %q, message %q", got.Imported, failure, got.Message)
			}
		})
	}
}

// Nothing an ImageSync's author writes can add a path, a query or a fragment to the factory URL.
func TestValidateFactoryRef(t *testing.T) {
	good := v1alpha1.ImageSyncSpec{FactoryRef: v1alpha1.ImageFactoryRef{
		SchematicID: "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba", Version: "v1.9.5", Arch: "amd64", Platform: "nocloud"}, Format: "qcow2"}
	if err := ValidateFactoryRef(good); err != nil {
		t.Fatalf("a good spec refused: %v", err)
	}
	for name, tc := range map[string]struct {
		mutate func(*v1alpha1.ImageSyncSpec)
		field  string
	}{
		"schematic with a path":  {func(s *v1alpha1.ImageSyncSpec) { s.FactoryRef.SchematicID = "../../admin" }, "spec.factoryRef.schematicID"},
		"schematic not hex":      {func(s *v1alpha1.ImageSyncSpec) { s.FactoryRef.SchematicID = "376567988AD3701Z" }, "spec.factoryRef.schematicID"},
		"version with a query":   {func(s *v1alpha1.ImageSyncSpec) { s.FactoryRef.Version = "v1.9.5?x=1" }, "spec.factoryRef.version"},
		"version not semver":     {func(s *v1alpha1.ImageSyncSpec) { s.FactoryRef.Version = "latest" }, "spec.factoryRef.version"},
		"platform with a slash":  {func(s *v1alpha1.ImageSyncSpec) { s.FactoryRef.Platform = "nocloud/../x" }, "spec.factoryRef.platform"},
		"arch unknown":           {func(s *v1alpha1.ImageSyncSpec) { s.FactoryRef.Arch = "amd64#frag" }, "spec.factoryRef.arch"},
		"format with a fragment": {func(s *v1alpha1.ImageSyncSpec) { s.Format = "qcow2#x" }, "spec.format"},
	} {
		t.Run(name, func(t *testing.T) {
			s := good
			tc.mutate(&s)
			err := ValidateFactoryRef(s)
			p, ok := AsPermanent(err)
			if !ok || p.Reason != v1alpha1.ReasonInvalidSpec || !strings.Contains(p.Message, tc.field) {
				t.Fatalf("err = %v, want InvalidSpec naming %s", err, tc.field)
			}
		})
	}
	for _, v := range []string{"1.9.5", "v1.10.0-alpha.1", "v1.9.5+build.7"} {
		s := good
		s.FactoryRef.Version = v
		if err := ValidateFactoryRef(s); err != nil {
			t.Errorf("version %q refused: %v", v, err)
		}
	}
}

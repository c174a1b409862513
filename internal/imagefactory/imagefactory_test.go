package imagefactory

import (
	"strings"
	"testing"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

const testSchematic = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"

func TestImageName(t *testing.T) {
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
			if got := ImageName(tc.spec); got != tc.want {
				t.Fatalf("ImageName = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestURL(t *testing.T) {
	spec := v1alpha1.ImageSyncSpec{FactoryRef: v1alpha1.ImageFactoryRef{SchematicID: testSchematic, Version: "v1.12.4"}}
	want := "https://factory.example/image/" + testSchematic + "/v1.12.4/nocloud-amd64.qcow2"
	for _, base := range []string{"https://factory.example", "https://factory.example/"} {
		if got := URL(base, spec); got != want {
			t.Fatalf("URL(%q) = %q, want %q", base, got, want)
		}
	}
	spec.FactoryRef.Platform, spec.FactoryRef.Arch, spec.Format = "talos", "arm64", "raw"
	if got := URL("https://f", spec); got != "https://f/image/"+testSchematic+"/v1.12.4/talos-arm64.raw" {
		t.Fatalf("URL = %q", got)
	}
}

// Nothing an ImageSync's author writes can add a path, a query or a fragment to the factory URL.
func TestValidate(t *testing.T) {
	good := v1alpha1.ImageSyncSpec{FactoryRef: v1alpha1.ImageFactoryRef{
		SchematicID: "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba", Version: "v1.9.5", Arch: "amd64", Platform: "nocloud"}, Format: "qcow2"}
	if err := Validate(good); err != nil {
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
			err := Validate(s)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want an error naming %s", err, tc.field)
			}
		})
	}
	for _, v := range []string{"1.9.5", "v1.10.0-alpha.1", "v1.9.5+build.7"} {
		s := good
		s.FactoryRef.Version = v
		if err := Validate(s); err != nil {
			t.Errorf("version %q refused: %v", v, err)
		}
	}
}

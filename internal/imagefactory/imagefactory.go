// Package imagefactory knows the Butler Image Factory's conventions: the URL an ImageSync's image
// is downloaded from, the name the rest of Butler gives its VirtualMachineImage, and which parts of
// an ImageSync may go into that URL.
package imagefactory

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
)

// Factory defaults of an ImageSync (as butler-api defaults them).
const (
	defaultImagePlatform = "nocloud"
	defaultImageArch     = "amd64"
	defaultImageFormat   = "qcow2"
)

// URL is where Harvester downloads an ImageSync's image from:
// <factory>/image/<schematic>/<version>/<platform>-<arch>.<format>.
func URL(factoryURL string, s v1alpha1.ImageSyncSpec) string {
	ref := s.FactoryRef
	return fmt.Sprintf("%s/image/%s/%s/%s-%s.%s", strings.TrimSuffix(factoryURL, "/"), ref.SchematicID, ref.Version,
		cmp.Or(ref.Platform, defaultImagePlatform), cmp.Or(ref.Arch, defaultImageArch), cmp.Or(s.Format, defaultImageFormat))
}

// ImageName is the name of an ImageSync's VirtualMachineImage. It is the name the rest of
// Butler computes (the published provider and the CLI), so that every ImageSync for the same image
// finds the same VirtualMachineImage: spec.displayName sanitised if set, else the sanitised
// "<platform>-<version with dots as dashes>-<arch>-<first 8 of the schematic>-butler".
func ImageName(s v1alpha1.ImageSyncSpec) string {
	if s.DisplayName != "" {
		return sanitizeImageName(s.DisplayName)
	}
	ref := s.FactoryRef
	schematic := ref.SchematicID
	if len(schematic) > 8 {
		schematic = schematic[:8]
	}
	return sanitizeImageName(fmt.Sprintf("%s-%s-%s-%s-butler", cmp.Or(ref.Platform, defaultImagePlatform),
		strings.ReplaceAll(ref.Version, ".", "-"), cmp.Or(ref.Arch, defaultImageArch), schematic))
}

var notInImageName = regexp.MustCompile(`[^a-z0-9.-]`)

// sanitizeImageName makes a DNS-subdomain-like name of s as Butler does: lower case, spaces and
// underscores as dashes, nothing but [a-z0-9.-], no double dashes, at most 63 characters, no
// dash or dot at either end.
func sanitizeImageName(s string) string {
	s = strings.ToLower(s)
	s = strings.NewReplacer(" ", "-", "_", "-").Replace(s)
	s = notInImageName.ReplaceAllString(s, "")
	for strings.Contains(s, "--") {
		s = strings.ReplaceAll(s, "--", "-")
	}
	if len(s) > validation.DNS1123LabelMaxLength {
		s = s[:validation.DNS1123LabelMaxLength]
	}
	return strings.Trim(s, "-.")
}

var (
	schematicPattern = regexp.MustCompile(`^[0-9a-f]{8,64}$`)
	versionPattern   = regexp.MustCompile(`^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	platformPattern  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// imageArchs and imageFormats are what the Butler Image Factory serves.
var (
	imageArchs   = []string{"amd64", "arm64"}
	imageFormats = []string{"qcow2", "raw", "raw.xz", "raw.zst", "iso", "vmdk", "ova"}
)

// Validate checks the parts of an ImageSync that go into the factory URL, so that none
// can add a path ("../"), a query ("?") or a fragment ("#") to it: the schematic ID is hex, the
// version semver, the platform a name, the architecture and format ones the factory serves. The
// error names the field and what it may be.
func Validate(s v1alpha1.ImageSyncSpec) error {
	ref := s.FactoryRef
	switch {
	case !schematicPattern.MatchString(ref.SchematicID):
		return fmt.Errorf("spec.factoryRef.schematicID %q is not a schematic ID: it is the schematic's SHA-256, 8 to 64 lower-case hex digits", ref.SchematicID)
	case !versionPattern.MatchString(ref.Version):
		return fmt.Errorf("spec.factoryRef.version %q is not a version such as v1.9.5 (semver, with or without the v)", ref.Version)
	case ref.Platform != "" && !platformPattern.MatchString(ref.Platform):
		return fmt.Errorf("spec.factoryRef.platform %q is not a platform name such as nocloud or metal (lower-case letters, digits and dashes)", ref.Platform)
	case ref.Arch != "" && !slices.Contains(imageArchs, ref.Arch):
		return fmt.Errorf("spec.factoryRef.arch %q is not one of %s", ref.Arch, strings.Join(imageArchs, ", "))
	case s.Format != "" && !slices.Contains(imageFormats, s.Format):
		return fmt.Errorf("spec.format %q is not one of %s", s.Format, strings.Join(imageFormats, ", "))
	}
	return nil
}

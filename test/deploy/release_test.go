package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// publishedVersions are the published provider's releases (its tags, images and chart appVersion):
// none may name a release of this one.
var publishedVersions = []string{"v0.1.0", "v0.2.0", "v0.2.1", "v0.2.2", "v0.2.3"}

// The chart, the kustomize image tag and the Makefile's default release version agree, and are
// none of the published provider's.
func TestReleaseVersionsAgree(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(repoRoot(), path))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	var chart struct{ Version, AppVersion string }
	if err := sigsyaml.Unmarshal([]byte(read(chartDir+"/Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	field := func(path, pattern string) string {
		t.Helper()
		m := regexp.MustCompile(pattern).FindStringSubmatch(read(path))
		if m == nil {
			t.Fatalf("%s has no %s", path, pattern)
		}
		return m[1]
	}
	versions := map[string]string{
		"Chart.yaml version":                 "v" + chart.Version,
		"Chart.yaml appVersion":              chart.AppVersion,
		"config/manager image tag":           field("config/manager/kustomization.yaml", `(?m)^\s+newTag: (\S+)$`),
		"the Makefile's VERSION default":     field("Makefile", `(?m)^VERSION \?= (\S+)$`),
		"the Makefile's FIRST_VERSION guard": field("Makefile", `(?m)^FIRST_VERSION := (\S+)$`),
	}
	for what, v := range versions {
		if v != versions["Chart.yaml appVersion"] || slices.Contains(publishedVersions, v) {
			t.Errorf("%s is %s; want all of %v equal, and none of the published provider's %v", what, v, versions, publishedVersions)
		}
	}
}

// make release-artifacts, which the release workflow runs before it pushes anything, refuses the
// published provider's versions; the workflow pushes the image with the latest tag too.
func TestReleaseRefusesThePublishedVersions(t *testing.T) {
	for _, v := range publishedVersions {
		cmd := exec.Command("make", "-s", "release-artifacts", "VERSION="+v)
		cmd.Dir = repoRoot()
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "VERSION="+v+" is below v0.3.0") {
			t.Errorf("make release-artifacts VERSION=%s: %v\n%s", v, err, out)
		}
	}

	data, err := os.ReadFile(filepath.Join(repoRoot(), ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var workflow struct {
		Jobs map[string]struct {
			Steps []struct {
				Uses, Run string
				With      map[string]string
			}
		}
	}
	if err := sigsyaml.Unmarshal(data, &workflow); err != nil {
		t.Fatal(err)
	}
	artifacts, push, latest := -1, -1, false
	for i, s := range workflow.Jobs["release"].Steps {
		switch {
		case strings.Contains(s.Run, "make release-artifacts"):
			artifacts = i
		case strings.HasPrefix(s.Uses, "docker/build-push-action@"):
			push = i
		case strings.HasPrefix(s.Uses, "docker/metadata-action@"):
			latest = strings.Contains(s.With["flavor"], "latest=true")
		}
	}
	if artifacts < 0 || push < 0 || artifacts > push {
		t.Errorf("release.yml: make release-artifacts is step %d, the image push step %d: the version must be checked before anything is pushed", artifacts, push)
	}
	if !latest {
		t.Error("release.yml: the image is not tagged latest (metadata-action flavor latest=true)")
	}
}

// The release publishes the clusterctl repository: the workflow runs make
// infrastructure-components before the release step, which attaches dist/clusterctl/*; that
// target writes the components, steward-rbac.yaml and every file the testbed's clusterctl
// repository has (testbed.ClusterctlRepositoryFiles: metadata, cluster templates, ClusterClasses).
func TestReleasePublishesTheClusterctlRepository(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(), ".github", "workflows", "release.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var workflow struct {
		Jobs map[string]struct {
			Steps []struct {
				Uses, Run string
				With      map[string]string
			}
		}
	}
	if err := sigsyaml.Unmarshal(data, &workflow); err != nil {
		t.Fatal(err)
	}
	built, published := -1, -1
	for i, s := range workflow.Jobs["release"].Steps {
		switch {
		case strings.Contains(s.Run, "make infrastructure-components"):
			built = i
		case strings.HasPrefix(s.Uses, "softprops/action-gh-release@") && slices.Contains(strings.Fields(s.With["files"]), "dist/clusterctl/*"):
			published = i
		}
	}
	if built < 0 || published < 0 || built > published {
		t.Errorf("release.yml: make infrastructure-components is step %d, the release with dist/clusterctl/* step %d: the repository must be built, then published", built, published)
	}

	cmd := exec.Command("make", "-s", "infrastructure-components", "VERSION=v0.3.0")
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make infrastructure-components: %v\n%s", err, out)
	}
	want := []string{"infrastructure-components.yaml", "steward-rbac.yaml"}
	for _, glob := range testbed.ClusterctlRepositoryFiles {
		files, err := filepath.Glob(filepath.Join(repoRoot(), glob))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v, %v", glob, files, err)
		}
		for _, f := range files {
			want = append(want, filepath.Base(f))
		}
	}
	for _, name := range want {
		if _, err := os.Stat(filepath.Join(repoRoot(), "dist", "clusterctl", name)); err != nil {
			t.Errorf("make infrastructure-components did not write %s: %v", name, err)
		}
	}
}

package deploy

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/butlerdotdev/butler-provider-harvester/internal/metrics"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

func readDoc(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(), "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// docs/configuration.md lists every flag with its real default.
func TestDocsListEveryFlag(t *testing.T) {
	doc := readDoc(t, "configuration.md")
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| `([^`]*)` \\|").FindAllStringSubmatch(doc, -1) {
		rows[m[1]] = m[2]
	}
	fs, _ := options.NewFlagSet(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		documented, ok := rows[f.Name]
		switch {
		case !ok:
			t.Errorf("docs/configuration.md has no row for --%s", f.Name)
		case documented == f.DefValue || (documented == `""` && f.DefValue == ""):
		case sameDuration(documented, f.DefValue):
		default:
			t.Errorf("docs/configuration.md says --%s defaults to %s; the binary says %q", f.Name, documented, f.DefValue)
		}
		delete(rows, f.Name)
	})
	for name := range rows {
		t.Errorf("docs/configuration.md documents --%s, which the manager does not have", name)
	}
}

func sameDuration(a, b string) bool {
	da, errA := time.ParseDuration(a)
	db, errB := time.ParseDuration(b)
	return errA == nil && errB == nil && da == db
}

// docs/configuration.md names every value of the chart.
func TestDocsListEveryChartValue(t *testing.T) {
	doc := readDoc(t, "configuration.md")
	data, err := os.ReadFile(filepath.Join(repoRoot(), chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := sigsyaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	for _, key := range valueKeys("", values) {
		if !strings.Contains(doc, "`"+key+"`") {
			t.Errorf("docs/configuration.md does not mention chart value `%s`", key)
		}
	}
}

// valueKeys lists the leaves of values, except inside maps users fill freely (resources, pod
// security contexts).
func valueKeys(prefix string, m map[string]any) []string {
	var keys []string
	for k, v := range m {
		key := prefix + k
		if sub, ok := v.(map[string]any); ok && len(sub) > 0 && !freeForm[key] {
			keys = append(keys, valueKeys(key+".", sub)...)
			continue
		}
		keys = append(keys, key)
	}
	return keys
}

var freeForm = map[string]bool{"resources": true, "podSecurityContext": true, "securityContext": true}

// docs/configuration.md names every spec field of both CRDs (the other providers' blocks by
// their top-level name) and every metric of the provider.
func TestDocsListEveryFieldAndMetric(t *testing.T) {
	doc := readDoc(t, "configuration.md")
	ignoredBlocks := map[string]bool{"aws": true, "azure": true, "gcp": true, "nutanix": true, "proxmox": true, "local": true, "network": true, "limits": true}
	for _, file := range []string{"butler.butlerlabs.dev_machinerequests.yaml", "butler.butlerlabs.dev_providerconfigs.yaml", "butler.butlerlabs.dev_imagesyncs.yaml"} {
		data, err := os.ReadFile(filepath.Join(repoRoot(), "config", "crd", "bases", file))
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := sigsyaml.Unmarshal(data, crd); err != nil {
			t.Fatal(err)
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		for _, field := range fieldPaths("", spec, ignoredBlocks) {
			if !strings.Contains(doc, "`"+field+"`") {
				t.Errorf("docs/configuration.md does not mention %s field `%s`", crd.Spec.Names.Kind, field)
			}
		}
	}
	for _, name := range []string{metrics.MachineRequestsName, metrics.ProvisioningDurationName, metrics.DeletionDurationName,
		metrics.HarvesterAPIRequestsName, metrics.HarvesterAPIErrorsName, metrics.RateLimiterWaitName, metrics.MachinesObservedName} {
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("docs/configuration.md does not mention metric %s", name)
		}
	}
}

// docs/configuration.md lists every annotation the provider reads: the string constants named
// Annotation* in the API package, read from its source so a new one cannot be forgotten.
func TestDocsListEveryAnnotation(t *testing.T) {
	doc := readDoc(t, "configuration.md")
	files, err := filepath.Glob(filepath.Join(repoRoot(), "api", "v1alpha1", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, path := range files {
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range spec.Names {
				if !strings.HasPrefix(name.Name, "Annotation") || i >= len(spec.Values) {
					continue
				}
				lit, ok := spec.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				value, _ := strconv.Unquote(lit.Value)
				found++
				if !strings.Contains(doc, "`"+value+"=") {
					t.Errorf("docs/configuration.md does not document annotation %s (`%s=...`)", name.Name, value)
				}
			}
			return true
		})
	}
	if found == 0 {
		t.Fatal("found no Annotation* constants in api/v1alpha1")
	}
}

// fieldPaths lists the leaf fields of a schema ("extraDisks[].sizeGB"); the ignored top-level
// blocks count as leaves.
func fieldPaths(prefix string, s apiextensionsv1.JSONSchemaProps, ignored map[string]bool) []string {
	var out []string
	props := s.Properties
	if s.Items != nil && s.Items.Schema != nil {
		props = s.Items.Schema.Properties
	}
	for name, sub := range props {
		path := prefix + name
		childPrefix := path + "."
		if sub.Type == "array" {
			childPrefix = path + "[]."
		}
		children := fieldPaths(childPrefix, sub, nil)
		if ignored[path] || len(children) == 0 {
			out = append(out, path)
			continue
		}
		out = append(out, children...)
	}
	return out
}

package testbed

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ClusterctlRepositoryFiles are the globs, in the repository, of what `make
// infrastructure-components` copies into a clusterctl repository beside the components: the
// metadata, the cluster templates (one per flavour) and the ClusterClasses they name.
var ClusterctlRepositoryFiles = []string{"metadata.yaml", "templates/cluster-template*.yaml", "templates/clusterclass-*.yaml"}

// WriteClusterctlRepository builds, under dir, a local clusterctl repository of this provider as
// `make infrastructure-components` builds its files (infrastructure-components.yaml from
// config/clusterctl with the pinned kustomize, and ClusterctlRepositoryFiles; the image tag the
// make target sets does not matter here), as infrastructure-<provider>/<version>, and a
// clusterctl configuration in dir that names it. It returns the components as built and the
// configuration's path.
func WriteClusterctlRepository(ctx context.Context, repoRoot, dir, provider, version string) (components []byte, config string, err error) {
	repo := filepath.Join(dir, "infrastructure-"+provider, version)
	if err := os.MkdirAll(repo, 0o750); err != nil {
		return nil, "", err
	}
	kustomize := exec.CommandContext(ctx, "go", "tool", "-modfile="+filepath.Join("hack", "tools", "kustomize", "go.mod"), "kustomize", "build", "config/clusterctl") //nolint:gosec // G204: the pinned kustomize on the repository's kustomization
	kustomize.Dir = repoRoot
	var stderr bytes.Buffer
	kustomize.Stderr = &stderr
	if components, err = kustomize.Output(); err != nil {
		return nil, "", fmt.Errorf("kustomize build config/clusterctl: %w\n%s", err, stderr.String())
	}
	if err := os.WriteFile(filepath.Join(repo, "infrastructure-components.yaml"), components, 0o600); err != nil {
		return nil, "", err
	}
	for _, glob := range ClusterctlRepositoryFiles {
		files, err := filepath.Glob(filepath.Join(repoRoot, glob))
		if err != nil {
			return nil, "", err
		}
		if len(files) == 0 {
			return nil, "", fmt.Errorf("no %s in %s", glob, repoRoot)
		}
		for _, f := range files {
			data, err := os.ReadFile(f) //nolint:gosec // G304: the repository's own files
			if err != nil {
				return nil, "", err
			}
			if err := os.WriteFile(filepath.Join(repo, filepath.Base(f)), data, 0o600); err != nil { //nolint:gosec // G703: the repository's files, copied under their own base names
				return nil, "", err
			}
		}
	}
	config = filepath.Join(dir, "clusterctl.yaml")
	entry := fmt.Sprintf("providers:\n- name: %s\n  type: InfrastructureProvider\n  url: file://%s\n", provider, filepath.Join(repo, "infrastructure-components.yaml"))
	return components, config, os.WriteFile(config, []byte(entry), 0o600)
}

package deploy

import (
	"bufio"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The image cannot be built here (no Docker engine), so this replays the Dockerfile's build stage
// (its COPYs from a build context, then its build line) and checks what it produces: a static
// binary (no ELF interpreter, no shared libraries) that runs, on a distroless nonroot base. It does
// so for the two contexts the image is built from: the repository (make docker-build, the release
// workflow), and the directory above it with REPO_DIR naming the repository, as the Butler CLI's
// local mode builds it.
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	stage := parseDockerfile(t)
	if !strings.Contains(stage.buildLine, "CGO_ENABLED=0") || !strings.Contains(stage.buildLine, "-o /manager") {
		t.Fatalf("Dockerfile build line %q: want CGO_ENABLED=0 ... -o /manager", stage.buildLine)
	}
	if stage.lastFrom != "FROM gcr.io/distroless/static:nonroot" || stage.user != "65532:65532" {
		t.Errorf("runtime stage %q as user %q: want distroless static nonroot as 65532:65532", stage.lastFrom, stage.user)
	}

	// The CLI's layout: the repository is a directory of a root that holds Butler's other
	// repositories (a link here, to the very same files).
	root := t.TempDir()
	if err := os.Symlink(repoRoot(), filepath.Join(root, "butler-provider-harvester")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, context string
		buildArgs     map[string]string
	}{
		{"the repository as context", repoRoot(), nil},
		{"the repository as context, REPO_DIR empty", repoRoot(), map[string]string{"REPO_DIR": ""}},
		{"the parent directory as context, REPO_DIR=butler-provider-harvester", root, map[string]string{"REPO_DIR": "butler-provider-harvester"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			requireStaticManager(t, stage.build(t, tt.context, tt.buildArgs))
		})
	}
}

// buildStage is what the test replays of the Dockerfile's first stage.
type buildStage struct {
	args      map[string]string // ARG defaults
	workdir   string
	copies    [][]string // the words of each COPY from the context: sources..., destination
	buildLine string
	lastFrom  string // the runtime stage's FROM line
	user      string // and its USER
}

func parseDockerfile(t *testing.T) *buildStage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := &buildStage{args: map[string]string{}}
	stages := 0
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		instruction, rest, _ := strings.Cut(line, " ")
		switch {
		case instruction == "FROM":
			stages++
			s.lastFrom, s.user = line, ""
		case stages > 1:
			if instruction == "USER" {
				s.user = rest
			}
		case instruction == "ARG":
			name, def, _ := strings.Cut(rest, "=")
			s.args[name] = def
		case instruction == "WORKDIR":
			s.workdir = rest
		case instruction == "COPY":
			s.copies = append(s.copies, strings.Fields(rest))
		case instruction == "RUN" && strings.Contains(rest, "go build"):
			s.buildLine = rest
		}
	}
	if len(s.copies) == 0 || s.workdir == "" {
		t.Fatalf("the Dockerfile's build stage has no COPY or no WORKDIR: %+v", s)
	}
	return s
}

// build replays the stage: it copies what the COPYs take from context (with buildArgs over the ARG
// defaults) into a fresh work directory, and runs the build line there, writing the binary into
// the test's temporary directory instead of /manager. It returns the binary's path.
func (s *buildStage) build(t *testing.T, context string, buildArgs map[string]string) string {
	t.Helper()
	args := map[string]string{}
	for k, v := range s.args {
		args[k] = v
	}
	for k, v := range buildArgs {
		args[k] = v
	}
	expand := func(word string) string {
		return regexp.MustCompile(`\$\{?(\w+)\}?`).ReplaceAllStringFunc(word, func(ref string) string {
			return args[strings.Trim(ref, "${}")]
		})
	}
	work := t.TempDir()
	for _, c := range s.copies {
		dest := expand(c[len(c)-1])
		if filepath.IsAbs(dest) {
			t.Fatalf("COPY %v: the test replays destinations relative to WORKDIR only", c)
		}
		for _, src := range c[:len(c)-1] {
			// As Docker does, a source is a path in the context, whatever dots or slashes it starts with.
			from := filepath.Join(context, filepath.Clean("/"+expand(src)))
			to := filepath.Join(work, dest)
			if info, err := os.Stat(from); err == nil && !info.IsDir() && strings.HasSuffix(dest, "/") {
				to = filepath.Join(to, filepath.Base(from))
			}
			if err := copyTree(from, to); err != nil {
				t.Fatalf("COPY %v from context %s: %v", c, context, err)
			}
		}
	}
	out := filepath.Join(t.TempDir(), "manager")
	cmd := exec.Command("sh", "-c", strings.Replace(s.buildLine, "-o /manager", "-o "+out, 1))
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s in what the COPYs took from %s: %v\n%s", s.buildLine, context, err, b)
	}
	return out
}

// copyTree copies a file, or a directory's contents, as COPY does.
func copyTree(from, to string) error {
	info, err := os.Stat(from)
	if err != nil {
		return err
	}
	if info.IsDir() {
		return os.CopyFS(to, os.DirFS(from))
	}
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}

// requireStaticManager checks that the binary is static and runs.
func requireStaticManager(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is dynamically linked")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	help := exec.Command(path, "--help")
	help.Stdout = io.Discard
	var stderr strings.Builder
	help.Stderr = &stderr
	if err := help.Run(); err != nil || !strings.Contains(stderr.String(), "-watch-namespaces") {
		t.Errorf("the built binary's --help: %v\n%s", err, stderr.String())
	}
}

package deploy

import (
	"bufio"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The image cannot be built here (no Docker engine), so this runs the Dockerfile's own build line
// and checks what it produces: a static binary (no ELF interpreter, no shared libraries) that
// runs, on a distroless nonroot base.
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var buildLine, lastFrom, user string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build"):
			buildLine = strings.TrimPrefix(line, "RUN ")
		case strings.HasPrefix(line, "FROM "):
			lastFrom, user = line, ""
		case strings.HasPrefix(line, "USER "):
			user = strings.TrimPrefix(line, "USER ")
		}
	}
	if !strings.Contains(buildLine, "CGO_ENABLED=0") || !strings.Contains(buildLine, "-o /manager") {
		t.Fatalf("Dockerfile build line %q: want CGO_ENABLED=0 ... -o /manager", buildLine)
	}
	if lastFrom != "FROM gcr.io/distroless/static:nonroot" || user != "65532:65532" {
		t.Errorf("runtime stage %q as user %q: want distroless static nonroot as 65532:65532", lastFrom, user)
	}

	out := filepath.Join(t.TempDir(), "manager")
	cmd := exec.Command("sh", "-c", strings.Replace(buildLine, "-o /manager", "-o "+out, 1))
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "TARGETOS="+runtime.GOOS, "TARGETARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", buildLine, err, b)
	}
	f, err := elf.Open(out)
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
	help := exec.Command(out, "--help")
	help.Stdout = io.Discard
	var stderr strings.Builder
	help.Stderr = &stderr
	if err := help.Run(); err != nil || !strings.Contains(stderr.String(), "-watch-namespaces") {
		t.Errorf("the built binary's --help: %v\n%s", err, stderr.String())
	}
}

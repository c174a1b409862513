package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// The manager follows its container's memory limit (cgroup v2 or v1) with 90% of it as the Go
// runtime's soft limit; GOMEMLIMIT, no limit ("max", v1's huge number) or no cgroup file leave
// the runtime as it is.
func TestSetMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1)) // restore the test binary's limit
	noEnv := func(string) string { return "" }
	for _, tc := range []struct {
		name, file, content string
		env                 func(string) string
		want                int64 // the soft limit set; 0: none
		says                string
	}{
		{"cgroup v2", "memory.max", "268435456\n", noEnv, 241591910, "Go memory limit 230 MiB, 90% of the container's 256 MiB"},
		{"cgroup v1", "memory/memory.limit_in_bytes", "536870912\n", noEnv, 483183820, "Go memory limit 460 MiB, 90% of the container's 512 MiB"},
		{"no limit", "memory.max", "max\n", noEnv, 0, ""},
		{"v1 without limit", "memory/memory.limit_in_bytes", "9223372036854771712\n", noEnv, 0, ""},
		{"no cgroup file", "", "", noEnv, 0, ""},
		{"GOMEMLIMIT set", "memory.max", "268435456\n", func(k string) string {
			if k == "GOMEMLIMIT" {
				return "100MiB"
			}
			return ""
		}, 0, "Go memory limit 100MiB (GOMEMLIMIT)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != "" {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, tc.file)), 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, tc.file), []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			const untouched = int64(1) << 50
			debug.SetMemoryLimit(untouched)
			says := setMemoryLimit(root, tc.env)
			got := debug.SetMemoryLimit(-1)
			if tc.want == 0 && got != untouched || tc.want != 0 && got != tc.want {
				t.Errorf("the runtime's limit is %d, want %d (%d: untouched)", got, tc.want, untouched)
			}
			if !strings.HasPrefix(says, tc.says) || (tc.says == "") != (says == "") {
				t.Errorf("it says %q, want %q", says, tc.says)
			}
		})
	}
}

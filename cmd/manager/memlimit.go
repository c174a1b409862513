package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitShare is the share of the container's memory limit the Go runtime keeps the manager's
// memory under (its soft limit, GOMEMLIMIT): the rest is room for what the runtime does not count
// (thread stacks outside the heap, the binary's pages) before the kernel's OOM killer acts.
const memoryLimitShare = 0.9

// cgroupMemoryFiles are where a container's memory limit is read: cgroup v2's memory.max, then
// cgroup v1's memory.limit_in_bytes.
var cgroupMemoryFiles = []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")}

// setMemoryLimit gives the Go runtime a soft memory limit of memoryLimitShare of the container's
// memory limit (read under cgroupRoot), unless GOMEMLIMIT sets one. Without it the runtime lets
// the heap grow to twice what is live before collecting (GOGC=100): with thousands of machines
// cached, that alone can pass the limit of the Deployment (the chart's 256Mi) and get the manager
// OOM-killed, where collecting sooner keeps it running. It returns what it did, for the log ("" if
// there is no limit to follow).
func setMemoryLimit(cgroupRoot string, getenv func(string) string) string {
	if v := getenv("GOMEMLIMIT"); v != "" {
		return "Go memory limit " + v + " (GOMEMLIMIT)"
	}
	limit, file := containerMemoryLimit(cgroupRoot)
	if limit <= 0 {
		return ""
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	return fmt.Sprintf("Go memory limit %d MiB, %.0f%% of the container's %d MiB (%s)", soft>>20, 100*memoryLimitShare, limit>>20, file)
}

// containerMemoryLimit reads the container's memory limit in bytes, and the file it was read from;
// 0 when there is none (no cgroup file, "max", or a value no container would have).
func containerMemoryLimit(cgroupRoot string) (int64, string) {
	for _, name := range cgroupMemoryFiles {
		file := filepath.Join(cgroupRoot, name)
		data, err := os.ReadFile(file) //nolint:gosec // G304: the cgroup filesystem's own files
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		// cgroup v1 says "no limit" with a page-rounded MaxInt64.
		if err != nil || v <= 0 || v >= math.MaxInt64/2 {
			return 0, ""
		}
		return v, file
	}
	return 0, ""
}

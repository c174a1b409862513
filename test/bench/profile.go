package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// profiler takes Go profiles of every process of a run, for -profile-dir: CPU profiles of both
// API servers, the manager and the benchmark process (which runs the simulator) over the same
// window while the machines are created (cpu-create-*.pprof) and again while they are deleted
// (cpu-delete-*.pprof), and the manager's heap when all are Running and when all are deleted. The
// figures in docs/performance.md say where the time goes; these say why, function by function
// (go tool pprof <file>).
type profiler struct {
	dir       string
	tb        *testbed.Testbed
	pprofAddr string // the manager's --pprof-bind-address
	wg        sync.WaitGroup
	// cpuInFlight are the CPU profiles of the last startCPU: a process takes one at a time, so
	// the next window waits for them (at small N, deletion starts before the first ends).
	cpuInFlight *sync.WaitGroup
	mu          sync.Mutex
	errs        []error
}

// cpuWindow is when the CPU profiles are taken, from the first create (after the creates have
// started and while the work queue is deepest) and from the deletion.
const (
	cpuWindowStart = 5 * time.Second
	cpuWindowSpan  = 30 * time.Second
)

func newProfiler(dir string, tb *testbed.Testbed, pprofAddr string) (*profiler, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	return &profiler{dir: dir, tb: tb, pprofAddr: pprofAddr}, nil
}

// startCPU takes the CPU profiles in the background, starting cpuWindowStart from now, as
// cpu-<phase>-<process>.pprof.
func (p *profiler) startCPU(ctx context.Context, phase string) {
	seconds := int(cpuWindowSpan.Seconds())
	prefix := "cpu-" + phase + "-"
	fetches := map[string]func(name string) error{
		prefix + "management-apiserver.pprof": func(name string) error {
			return p.fetchAPIServer(ctx, p.tb.MgmtConfig, seconds, name)
		},
		prefix + "harvester-apiserver.pprof": func(name string) error {
			return p.fetchAPIServer(ctx, p.tb.Harvester.Config, seconds, name)
		},
		prefix + "manager.pprof":             func(name string) error { return p.fetchManagerCPU(ctx, cpuWindowSpan, name) },
		prefix + "bench-and-simulator.pprof": func(name string) error { return p.profileSelf(ctx, name) },
	}
	previous, current := p.cpuInFlight, &sync.WaitGroup{}
	p.cpuInFlight = current
	startAt := time.Now().Add(cpuWindowStart)
	for name, fetch := range fetches {
		current.Add(1)
		p.wg.Go(func() {
			defer current.Done()
			if previous != nil {
				previous.Wait()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(startAt)):
			}
			if err := fetch(name); err != nil {
				p.fail(fmt.Errorf("%s: %w", name, err))
			}
		})
	}
}

// heap saves the manager's heap profile now, as heap-manager-<when>.pprof. Two of them tell
// what was allocated in between: go tool pprof -sample_index=alloc_space -base <first> <second>.
func (p *profiler) heap(ctx context.Context, when string) {
	name := "heap-manager-" + when + ".pprof"
	if err := p.fetch(ctx, http.DefaultClient, "http://"+p.pprofAddr+"/debug/pprof/heap", name); err != nil {
		p.fail(fmt.Errorf("%s: %w", name, err))
	}
}

// managerCPU takes the manager's CPU profile for the given time, now, as name.
func (p *profiler) managerCPU(ctx context.Context, name string, span time.Duration) {
	if err := p.fetchManagerCPU(ctx, span, name); err != nil {
		p.fail(fmt.Errorf("%s: %w", name, err))
	}
}

// fetchManagerCPU reads the manager's CPU profile over span into name.
func (p *profiler) fetchManagerCPU(ctx context.Context, span time.Duration, name string) error {
	return p.fetch(ctx, http.DefaultClient, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.pprofAddr, int(span.Seconds())), name)
}

// wait waits for the CPU profiles and returns what failed.
func (p *profiler) wait() error {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.errs) > 0 {
		return fmt.Errorf("profiles: %v", p.errs)
	}
	fmt.Printf("profiles in %s\n", p.dir)
	return nil
}

func (p *profiler) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errs = append(p.errs, err)
}

// fetchAPIServer reads kube-apiserver's own /debug/pprof (on by default: --profiling) as the
// administrator of that test API server.
func (p *profiler) fetchAPIServer(ctx context.Context, cfg *rest.Config, seconds int, name string) error {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	return p.fetch(ctx, httpClient, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(cfg.Host, "/"), seconds), name)
}

func (p *profiler) fetch(ctx context.Context, c *http.Client, url, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := p.create(name)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// profileSelf profiles this process (the benchmark's clients and the simulator) for the window.
func (p *profiler) profileSelf(ctx context.Context, name string) error {
	f, err := p.create(name)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(cpuWindowSpan):
	}
	pprof.StopCPUProfile()
	return f.Close()
}

// create creates a profile file in the profile directory.
func (p *profiler) create(name string) (*os.File, error) {
	return os.Create(filepath.Join(p.dir, name)) //nolint:gosec // G304: a file of the directory the benchmark was told to write profiles to, under a name of its own
}

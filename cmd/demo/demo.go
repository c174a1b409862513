package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/sim"
)

const (
	mrNamespace  = "butler-system"
	hvNamespace  = "default"
	networkCIDR  = "10.40.0.0/24"
	sampleSecret = "credentials-secret.yaml" // a placeholder; the demo makes the real one
)

type demo struct {
	o     options
	out   io.Writer
	work  string
	start time.Time

	mgmtEnv   *envtest.Environment
	mgmtCfg   *rest.Config
	mgmt      client.Client
	harvester *sim.Harvester
	manager   *exec.Cmd
	exited    chan error // receives the manager's exit
	cancelSim context.CancelFunc
	expected  int
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) path(name string) string { return filepath.Join(d.work, name) }

func (d *demo) startManagement(context.Context) error {
	d.mgmtEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(d.o.repoRoot, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	if d.mgmtCfg, err = d.mgmtEnv.Start(); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	if d.mgmt, err = client.New(d.mgmtCfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	return os.WriteFile(d.path("management.kubeconfig"), sim.KubeconfigFor(d.mgmtCfg), 0o600)
}

func (d *demo) startHarvester(ctx context.Context) error {
	simCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancelSim = cancel
	var err error
	d.harvester, err = sim.StartHarvester(simCtx, sim.Options{Sim: sim.Config{
		BootDelay: d.o.bootDelay, IPDelay: d.o.ipDelay, ImportDelay: time.Second,
	}})
	if err != nil {
		return err
	}
	return os.WriteFile(d.path("harvester.kubeconfig"), d.harvester.Kubeconfig, 0o600)
}

func (d *demo) startManager(context.Context) error {
	bin := d.path("manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	build.Dir, build.Stdout, build.Stderr = d.o.repoRoot, d.out, d.out
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/manager: %w", err)
	}
	logFile, err := os.Create(d.path("manager.log"))
	if err != nil {
		return err
	}
	d.manager = exec.Command(bin, "--log-format=text", "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--creating-poll-interval=1s", "--health-check-interval=30s")
	d.manager.Env = append(os.Environ(), "KUBECONFIG="+d.path("management.kubeconfig"))
	d.manager.Stdout, d.manager.Stderr = logFile, logFile
	if err := d.manager.Start(); err != nil {
		return err
	}
	d.exited = make(chan error, 1)
	go func() { d.exited <- d.manager.Wait() }()
	d.say("  manager running (pid %d), logging to %s", d.manager.Process.Pid, d.path("manager.log"))
	return nil
}

func (d *demo) prepareHarvester(ctx context.Context) error {
	nad := &unstructured.Unstructured{}
	nad.SetGroupVersionKind(sim.NetworkAttachmentDefinitionGVK)
	nad.SetNamespace(hvNamespace)
	nad.SetName("vlan40-workloads")
	nad.SetAnnotations(map[string]string{sim.AnnotationRoute: `{"mode":"auto","cidr":"` + networkCIDR + `","gateway":"10.40.0.1"}`})
	_ = unstructured.SetNestedField(nad.Object, `{"cniVersion":"0.3.1","name":"vlan40-workloads","type":"bridge","bridge":"mgmt-br","promiscMode":true,"vlan":40,"ipam":{}}`, "spec", "config")
	if err := d.harvester.Client.Create(ctx, nad); err != nil {
		return err
	}
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	img.SetNamespace(hvNamespace)
	img.SetName("talos-1-9")
	_ = unstructured.SetNestedField(img.Object, "talos-1.9-metal-amd64.raw", "spec", "displayName")
	_ = unstructured.SetNestedField(img.Object, "download", "spec", "sourceType")
	_ = unstructured.SetNestedField(img.Object, "https://factory.talos.dev/image/metal-amd64.raw.xz", "spec", "url")
	if err := d.harvester.Client.Create(ctx, img); err != nil {
		return err
	}
	// Like an operator, wait for the upload to finish before asking for machines.
	for deadline := time.Now().Add(time.Minute); ; {
		if err := d.harvester.Client.Get(ctx, client.ObjectKeyFromObject(img), img); err != nil {
			return err
		}
		conditions, _, _ := unstructured.NestedSlice(img.Object, "status", "conditions")
		for _, c := range conditions {
			if m, ok := c.(map[string]any); ok && m["type"] == "Imported" && m["status"] == "True" {
				d.say("  image default/talos-1-9 imported")
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("image default/talos-1-9 was not imported within a minute: %v", conditions)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *demo) createSamples(ctx context.Context) error {
	if err := d.mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mrNamespace}}); err != nil {
		return err
	}
	if err := d.mgmt.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "harvester-kubeconfig", Namespace: mrNamespace},
		Data:       map[string][]byte{"kubeconfig": d.harvester.Kubeconfig},
	}); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(d.o.repoRoot, "config", "samples", "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		if filepath.Base(f) == sampleSecret || filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096).Decode(&u.Object); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := d.mgmt.Create(ctx, u); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if u.GetKind() == "MachineRequest" {
			d.expected++
		}
		size := ""
		if ud, _, _ := unstructured.NestedString(u.Object, "spec", "userData"); len(ud) > 2048 {
			size = fmt.Sprintf(" (userData %d KiB)", len(ud)/1024)
		}
		d.say("  created %s %s/%s%s", u.GetKind(), u.GetNamespace(), u.GetName(), size)
	}
	if d.expected == 0 {
		return fmt.Errorf("no MachineRequest in %s", filepath.Join(d.o.repoRoot, "config", "samples"))
	}
	return nil
}

func (d *demo) list(ctx context.Context) ([]v1alpha1.MachineRequest, error) {
	list := &v1alpha1.MachineRequestList{}
	if err := d.mgmt.List(ctx, list, client.InNamespace(mrNamespace)); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// table renders the machines as `kubectl get mr` would, plus the reason of the Progressing condition.
func table(items []v1alpha1.MachineRequest) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprintln(w, "  MACHINE\tROLE\tPHASE\tIP\tSTATUS")
	for _, mr := range items {
		status := ""
		for _, c := range mr.Status.Conditions {
			if c.Type == v1alpha1.ConditionProgressing {
				status = c.Reason
			}
		}
		if mr.DeletionTimestamp != nil {
			status = "deleting"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", mr.Spec.MachineName, mr.Spec.Role, orDash(string(mr.Status.Phase)), orDash(mr.Status.IPAddress), status)
	}
	_ = w.Flush()
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// watchTable prints the table whenever it changes, until done reports true.
func (d *demo) watchTable(ctx context.Context, done func([]v1alpha1.MachineRequest) (bool, error)) error {
	deadline := time.Now().Add(d.o.timeout)
	last := ""
	for {
		select {
		case err := <-d.exited:
			d.exited = nil
			return fmt.Errorf("the manager exited (%v):\n%s", err, d.managerLogTail())
		default:
		}
		items, err := d.list(ctx)
		if err != nil {
			return err
		}
		if t := table(items); t != last {
			fmt.Fprintf(d.out, "[%6.1fs]\n%s", time.Since(d.start).Seconds(), t)
			last = t
		}
		ok, err := done(items)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s:\n%s%s", d.o.timeout, describeStuck(items), d.managerLogTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func describeStuck(items []v1alpha1.MachineRequest) string {
	var b strings.Builder
	for _, mr := range items {
		for _, c := range mr.Status.Conditions {
			fmt.Fprintf(&b, "  %s: %s=%s %s: %s\n", mr.Name, c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return b.String()
}

func (d *demo) managerLogTail() string {
	data, _ := os.ReadFile(d.path("manager.log"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "last lines of the manager log:\n  " + strings.Join(lines, "\n  ") + "\n"
}

func (d *demo) waitRunning(ctx context.Context) error {
	began := time.Now()
	err := d.watchTable(ctx, func(items []v1alpha1.MachineRequest) (bool, error) {
		running := 0
		for _, mr := range items {
			switch mr.Status.Phase {
			case v1alpha1.MachinePhaseRunning:
				running++
			case v1alpha1.MachinePhaseFailed:
				return false, fmt.Errorf("MachineRequest %s failed: %s: %s", mr.Name, mr.Status.FailureReason, mr.Status.FailureMessage)
			}
		}
		return running == d.expected && len(items) == d.expected, nil
	})
	if err != nil {
		return err
	}
	items, err := d.list(ctx)
	if err != nil {
		return err
	}
	prefix := netip.MustParsePrefix(networkCIDR)
	seen := map[string]string{}
	for _, mr := range items {
		ip, err := netip.ParseAddr(mr.Status.IPAddress)
		if err != nil || !prefix.Contains(ip) {
			return fmt.Errorf("MachineRequest %s has IP %q, not in the network's range %s", mr.Name, mr.Status.IPAddress, networkCIDR)
		}
		if other, dup := seen[ip.String()]; dup {
			return fmt.Errorf("MachineRequests %s and %s have the same IP %s", other, mr.Name, ip)
		}
		seen[ip.String()] = mr.Name
	}
	d.say("All %d machines Running with distinct IPs from %s, %s after creation.", len(items), networkCIDR, time.Since(began).Round(100*time.Millisecond))
	return nil
}

func (d *demo) deleteAll(ctx context.Context) error {
	if err := d.mgmt.DeleteAllOf(ctx, &v1alpha1.MachineRequest{}, client.InNamespace(mrNamespace)); err != nil {
		return err
	}
	began := time.Now()
	if err := d.watchTable(ctx, func(items []v1alpha1.MachineRequest) (bool, error) { return len(items) == 0, nil }); err != nil {
		return err
	}
	d.say("All MachineRequests deleted (finalizers released) in %s.", time.Since(began).Round(100*time.Millisecond))
	return nil
}

// checkHarvesterEmpty lists what is left in the Harvester namespace: nothing of the machines may remain.
func (d *demo) checkHarvesterEmpty(ctx context.Context) error {
	c := d.harvester.Client
	in := client.InNamespace(hvNamespace)
	vms, vmis, pvcs, secrets := &kubevirtv1.VirtualMachineList{}, &kubevirtv1.VirtualMachineInstanceList{}, &corev1.PersistentVolumeClaimList{}, &corev1.SecretList{}
	for _, l := range []client.ObjectList{vms, vmis, pvcs, secrets} {
		if err := c.List(ctx, l, in); err != nil {
			return err
		}
	}
	d.say("Harvester namespace %q now holds: %d VirtualMachines, %d VirtualMachineInstances, %d PersistentVolumeClaims, %d Secrets.",
		hvNamespace, len(vms.Items), len(vmis.Items), len(pvcs.Items), len(secrets.Items))
	if n := len(vms.Items) + len(vmis.Items) + len(pvcs.Items) + len(secrets.Items); n != 0 {
		return fmt.Errorf("%d objects left on Harvester after deletion", n)
	}
	return nil
}

func (d *demo) explain() {
	mk, hk := d.path("management.kubeconfig"), d.path("harvester.kubeconfig")
	fmt.Fprintf(d.out, `
Both control planes, the simulator and the manager keep running (Ctrl-C stops them).
  management cluster: %[1]s
  simulated Harvester: %[2]s
  manager log:        %[3]s
Explore with kubectl:
  kubectl --kubeconfig %[1]s -n %[4]s get mr,pc
  kubectl --kubeconfig %[1]s -n %[4]s describe mr butler-mgmt-cp-0
  kubectl --kubeconfig %[2]s -n %[5]s get virtualmachines,virtualmachineinstances,pvc,secrets
  kubectl --kubeconfig %[1]s -n %[4]s delete mr --all    # and watch Harvester empty
`, mk, hk, d.path("manager.log"), mrNamespace, hvNamespace)
}

func (d *demo) stopAll() {
	if d.exited != nil {
		_ = d.manager.Process.Signal(os.Interrupt)
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = d.manager.Process.Kill()
		}
	}
	if d.cancelSim != nil {
		d.cancelSim()
	}
	if d.harvester != nil {
		_ = d.harvester.Stop()
	}
	if d.mgmtEnv != nil {
		_ = d.mgmtEnv.Stop()
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/testbed"
)

// sampleSecret is a placeholder in config/samples; the demo makes the real Secret.
const sampleSecret = "credentials-secret.yaml"

type demo struct {
	o        options
	out      io.Writer
	start    time.Time
	tb       *testbed.Testbed
	expected int
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) createSamples(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(d.o.repoRoot, "config", "samples", "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		if filepath.Base(f) == sampleSecret || filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		objs, err := d.tb.ApplyFile(ctx, f)
		if err != nil {
			return err
		}
		for _, u := range objs {
			if u.GetKind() == "MachineRequest" {
				d.expected++
			}
			size := ""
			if ud, _ := u.Object["spec"].(map[string]any)["userData"].(string); len(ud) > 2048 {
				size = fmt.Sprintf(" (userData %d KiB)", len(ud)/1024)
			}
			d.say("  created %s %s/%s%s", u.GetKind(), u.GetNamespace(), u.GetName(), size)
		}
	}
	if d.expected == 0 {
		return fmt.Errorf("no MachineRequest in %s", filepath.Join(d.o.repoRoot, "config", "samples"))
	}
	return nil
}

func (d *demo) list(ctx context.Context) ([]v1alpha1.MachineRequest, error) {
	list := &v1alpha1.MachineRequestList{}
	if err := d.tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
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
		if err := d.tb.ManagerExited(); err != nil {
			return err
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
			return fmt.Errorf("not done after %s:\n%s%s", d.o.timeout, describeStuck(items), d.tb.ManagerLogTail())
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
	prefix := netip.MustParsePrefix(testbed.NetworkCIDR)
	seen := map[string]string{}
	for _, mr := range items {
		ip, err := netip.ParseAddr(mr.Status.IPAddress)
		if err != nil || !prefix.Contains(ip) {
			return fmt.Errorf("MachineRequest %s has IP %q, not in the network's range %s", mr.Name, mr.Status.IPAddress, testbed.NetworkCIDR)
		}
		if other, dup := seen[ip.String()]; dup {
			return fmt.Errorf("MachineRequests %s and %s have the same IP %s", other, mr.Name, ip)
		}
		seen[ip.String()] = mr.Name
	}
	d.say("All %d machines Running with distinct IPs from %s, %s after creation.", len(items), testbed.NetworkCIDR, time.Since(began).Round(100*time.Millisecond))
	return nil
}

func (d *demo) deleteAll(ctx context.Context) error {
	if err := d.tb.Mgmt.DeleteAllOf(ctx, &v1alpha1.MachineRequest{}, client.InNamespace(testbed.Namespace)); err != nil {
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
	vms, vmis, pvcs, secrets, err := d.tb.HarvesterLeft(ctx)
	if err != nil {
		return err
	}
	d.say("Harvester namespace %q now holds: %d VirtualMachines, %d VirtualMachineInstances, %d PersistentVolumeClaims, %d Secrets.",
		testbed.HarvesterNamespace, vms, vmis, pvcs, secrets)
	if n := vms + vmis + pvcs + secrets; n != 0 {
		return fmt.Errorf("%d objects left on Harvester after deletion", n)
	}
	return nil
}

func (d *demo) explain() {
	mk, hk := d.tb.Path("management.kubeconfig"), d.tb.Path("harvester.kubeconfig")
	fmt.Fprintf(d.out, `
Both control planes, the simulator and the manager keep running (Ctrl-C stops them).
  management cluster: %[1]s
  simulated Harvester: %[2]s
  manager log:        %[3]s
Explore with kubectl (no kubectl at hand? 'make kubectl' builds one and prints its path):
  kubectl --kubeconfig %[1]s -n %[4]s get machinerequests,providerconfigs
  kubectl --kubeconfig %[1]s -n %[4]s describe mr butler-mgmt-cp-0
  kubectl --kubeconfig %[2]s -n %[5]s get virtualmachines,virtualmachineinstances,pvc,secrets
  kubectl --kubeconfig %[1]s -n %[4]s delete mr --all    # and watch Harvester empty
`, mk, hk, d.tb.Path("manager.log"), testbed.Namespace, testbed.HarvesterNamespace)
}

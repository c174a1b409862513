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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
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

// createSamples creates the samples of config/samples whose kind keep accepts, with mutate
// applied to each first.
func (d *demo) createSamples(ctx context.Context, keep func(kind string) bool, mutate func(*unstructured.Unstructured)) error {
	files, err := filepath.Glob(filepath.Join(d.o.repoRoot, "config", "samples", "*.yaml"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, f := range files {
		if filepath.Base(f) == sampleSecret || filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		objs, err := d.tb.DecodeFile(f)
		if err != nil {
			return err
		}
		for _, u := range objs {
			if !keep(u.GetKind()) {
				continue
			}
			mutate(u)
			if err := d.tb.Mgmt.Create(ctx, u); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
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
	return nil
}

// syncImage creates the ProviderConfig and the ImageSync of the samples, as the Butler bootstrap
// does, and waits until the image is Ready: it returns status.providerImageRef.
func (d *demo) syncImage(ctx context.Context) (string, error) {
	if err := d.createSamples(ctx, func(kind string) bool { return kind != "MachineRequest" }, func(*unstructured.Unstructured) {}); err != nil {
		return "", err
	}
	list := &v1alpha1.ImageSyncList{}
	deadline := time.Now().Add(d.o.timeout)
	last := ""
	for {
		if err := d.tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
			return "", err
		}
		if len(list.Items) != 1 {
			return "", fmt.Errorf("want one ImageSync in config/samples, found %d", len(list.Items))
		}
		is := list.Items[0]
		if line := imageSyncTable(&is); line != last {
			fmt.Fprintf(d.out, "[%6.1fs]\n%s", time.Since(d.start).Seconds(), line)
			last = line
		}
		switch {
		case is.Status.Phase == v1alpha1.ImageSyncPhaseReady && is.Status.ProviderImageRef != "":
			return is.Status.ProviderImageRef, nil
		case is.Status.Phase == v1alpha1.ImageSyncPhaseFailed:
			return "", fmt.Errorf("ImageSync %s failed: %s: %s", is.Name, is.Status.FailureReason, is.Status.FailureMessage)
		case time.Now().After(deadline):
			return "", fmt.Errorf("ImageSync %s not Ready after %s: %s", is.Name, d.o.timeout, describeConditions(is.Status.Conditions))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// imageSyncTable renders an ImageSync as `kubectl get is` would.
func imageSyncTable(is *v1alpha1.ImageSync) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprintln(w, "  IMAGESYNC\tPHASE\tVERSION\tPROVIDER\tIMAGE REF")
	fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", is.Name, orDash(string(is.Status.Phase)), is.Spec.FactoryRef.Version, is.Spec.ProviderConfigRef.Name, orDash(is.Status.ProviderImageRef))
	_ = w.Flush()
	return b.String()
}

// showAll prints what `kubectl get is,mr` shows.
func (d *demo) showAll(ctx context.Context) error {
	syncs := &v1alpha1.ImageSyncList{}
	if err := d.tb.Mgmt.List(ctx, syncs, client.InNamespace(testbed.Namespace)); err != nil {
		return err
	}
	items, err := d.list(ctx)
	if err != nil {
		return err
	}
	d.say("kubectl get is,mr -n %s:", testbed.Namespace)
	for i := range syncs.Items {
		fmt.Fprint(d.out, imageSyncTable(&syncs.Items[i]))
	}
	fmt.Fprint(d.out, table(items))
	return nil
}

// createMachines creates the MachineRequests of the samples with spec.image from the ImageSync, as
// the bootstrap does.
func (d *demo) createMachines(ctx context.Context, image string) error {
	if err := d.createSamples(ctx, func(kind string) bool { return kind == "MachineRequest" }, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, image, "spec", "image")
	}); err != nil {
		return err
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
		for _, line := range strings.Split(strings.TrimSpace(describeConditions(mr.Status.Conditions)), "\n") {
			fmt.Fprintf(&b, "  %s: %s\n", mr.Name, line)
		}
	}
	return b.String()
}

func describeConditions(conditions []metav1.Condition) string {
	var b strings.Builder
	for _, c := range conditions {
		fmt.Fprintf(&b, "%s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
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
		if mr.Spec.NetworkData == "" {
			continue
		}
		static, err := staticAddress(mr.Spec.NetworkData)
		if err != nil {
			return fmt.Errorf("MachineRequest %s: %w", mr.Name, err)
		}
		if ip != static {
			return fmt.Errorf("MachineRequest %s has IP %s, not %s, the static address of its networkData", mr.Name, ip, static)
		}
		d.say("MachineRequest %s runs at %s, the static address its networkData gives (no DHCP lease), as its guest agent reports it.", mr.Name, ip)
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
	if err := d.tb.Mgmt.DeleteAllOf(ctx, &v1alpha1.ImageSync{}, client.InNamespace(testbed.Namespace)); err != nil {
		return err
	}
	for deadline := time.Now().Add(d.o.timeout); ; {
		list := &v1alpha1.ImageSyncList{}
		if err := d.tb.Mgmt.List(ctx, list, client.InNamespace(testbed.Namespace)); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ImageSync %s not deleted after %s", list.Items[0].Name, d.o.timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.say("ImageSync deleted; its image stays on Harvester (VM disks are cloned from it).")
	return nil
}

// checkHarvesterEmpty lists what is left in the Harvester namespace: nothing of the machines may remain.
func (d *demo) checkHarvesterEmpty(ctx context.Context) error {
	vms, vmis, pvcs, secrets, err := d.tb.HarvesterLeft(ctx)
	if err != nil {
		return err
	}
	images, err := d.tb.HarvesterImages(ctx)
	if err != nil {
		return err
	}
	d.say("Harvester namespace %q now holds: %d VirtualMachines, %d VirtualMachineInstances, %d PersistentVolumeClaims, %d Secrets; images %s.",
		testbed.HarvesterNamespace, vms, vmis, pvcs, secrets, strings.Join(images, ", "))
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
  kubectl --kubeconfig %[1]s -n %[4]s get imagesyncs,machinerequests,providerconfigs
  kubectl --kubeconfig %[1]s -n %[4]s describe mr butler-mgmt-cp-0
  kubectl --kubeconfig %[2]s -n %[5]s get virtualmachines,virtualmachineinstances,pvc,secrets
  kubectl --kubeconfig %[1]s -n %[4]s delete mr --all    # and watch Harvester empty
`, mk, hk, d.tb.Path("manager.log"), testbed.Namespace, testbed.HarvesterNamespace)
}

// staticAddress is the first static address of a cloud-init network configuration (version 2).
func staticAddress(networkData string) (netip.Addr, error) {
	var config struct {
		Ethernets map[string]struct {
			Addresses []string `json:"addresses"`
		} `json:"ethernets"`
	}
	if err := yaml.Unmarshal([]byte(networkData), &config); err != nil {
		return netip.Addr{}, fmt.Errorf("networkData: %w", err)
	}
	for _, nic := range config.Ethernets {
		for _, a := range nic.Addresses {
			if p, err := netip.ParsePrefix(a); err == nil {
				return p.Addr(), nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("networkData names no static address")
}

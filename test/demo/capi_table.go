package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// machineRow is one Machine of the tenant cluster with its HarvesterMachine and VM.
type machineRow struct {
	Machine string
	// Phase is the Machine's status.phase.
	Phase string
	// Infra is the HarvesterMachine's state: Provisioned, or the reason of its Ready condition.
	Infra string
	// VM is the VM's printable status on Harvester ("" when there is none), VMUID its UID.
	VM, VMUID string
	// IP is the Machine's first InternalIP, Node its nodeRef, ProviderID its spec.providerID.
	IP, Node, ProviderID string
	Deleting             bool
}

// capiTable renders the rows as the demo prints them.
func capiTable(rows []machineRow) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	fmt.Fprintln(w, "  MACHINE\tPHASE\tHARVESTERMACHINE\tVM\tIP\tNODE\tPROVIDERID")
	for _, r := range rows {
		phase := orDash(r.Phase)
		if r.Deleting && r.Phase != "Deleting" {
			phase += " (deleting)"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Machine, phase, orDash(r.Infra), orDash(r.VM), orDash(r.IP), orDash(r.Node), orDash(r.ProviderID))
	}
	_ = w.Flush()
	if len(rows) == 0 {
		b.WriteString("  (no Machines)\n")
	}
	return b.String()
}

// rows reads the tenant cluster's Machines, their HarvesterMachines and their VMs.
func (c *capiDemo) rows(ctx context.Context) ([]machineRow, error) {
	machines := &unstructured.UnstructuredList{}
	machines.SetGroupVersionKind(testbed.MachineGVK.GroupVersion().WithKind("MachineList"))
	if err := c.tb.Mgmt.List(ctx, machines, client.InNamespace(testbed.Namespace), client.MatchingLabels{testbed.ClusterNameLabel: capiCluster}); err != nil {
		return nil, err
	}
	rows := make([]machineRow, 0, len(machines.Items))
	for _, m := range machines.Items {
		r := machineRow{Machine: m.GetName(), Deleting: m.GetDeletionTimestamp() != nil}
		r.Phase, _, _ = unstructured.NestedString(m.Object, "status", "phase")
		r.Node, _, _ = unstructured.NestedString(m.Object, "status", "nodeRef", "name")
		r.ProviderID, _, _ = unstructured.NestedString(m.Object, "spec", "providerID")
		addresses, _, _ := unstructured.NestedSlice(m.Object, "status", "addresses")
		for _, a := range addresses {
			if am, _ := a.(map[string]any); am["type"] == "InternalIP" && r.IP == "" {
				r.IP, _ = am["address"].(string)
			}
		}
		infraName, _, _ := unstructured.NestedString(m.Object, "spec", "infrastructureRef", "name")
		if infraName != "" {
			hm := &infrav1.HarvesterMachine{}
			switch err := c.tb.Mgmt.Get(ctx, client.ObjectKey{Namespace: testbed.Namespace, Name: infraName}, hm); {
			case err == nil:
				r.Infra = harvesterMachineState(hm)
				vm := &kubevirtv1.VirtualMachine{}
				switch err := c.tb.Harvester.Client.Get(ctx, client.ObjectKey{Namespace: testbed.HarvesterNamespace, Name: infraName}, vm); {
				case err == nil:
					r.VM, r.VMUID = string(vm.Status.PrintableStatus), string(vm.UID)
					if r.VM == "" {
						r.VM = "Created"
					}
					if vm.DeletionTimestamp != nil {
						r.VM = "Terminating"
					}
				case client.IgnoreNotFound(err) != nil:
					return nil, err
				}
			case client.IgnoreNotFound(err) != nil:
				return nil, err
			}
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Machine < rows[j].Machine })
	return rows, nil
}

// harvesterMachineState is Provisioned, or the reason of the HarvesterMachine's Ready condition.
func harvesterMachineState(hm *infrav1.HarvesterMachine) string {
	if hm.DeletionTimestamp != nil {
		return "Deleting"
	}
	if p := hm.Status.Initialization.Provisioned; p != nil && *p {
		return "Provisioned"
	}
	for _, cond := range hm.Status.Conditions {
		if cond.Type == infrav1.ConditionReady && cond.Status != metav1.ConditionTrue {
			return cond.Reason
		}
	}
	return ""
}

// waitTable prints the table whenever it changes, until done reports true.
func (c *capiDemo) waitTable(ctx context.Context, done func([]machineRow) (bool, error)) error {
	deadline := time.Now().Add(c.o.timeout)
	last := ""
	for {
		if err := c.tb.ManagerExited(); err != nil {
			return err
		}
		if err := c.tb.ClusterAPI.Exited(); err != nil {
			return err
		}
		rows, err := c.rows(ctx)
		if err != nil {
			return err
		}
		if t := capiTable(rows); t != last {
			fmt.Fprintf(c.out, "[%6.1fs]\n%s", time.Since(c.start).Seconds(), t)
			last = t
		}
		ok, err := done(rows)
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("not done after %s\n%s%s", c.o.timeout, c.tb.ManagerLogTail(), c.tb.ClusterAPI.LogTail()), c.steward.Err())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// allRunning says whether rows are want Machines, each Running with its Node and providerID, not
// being deleted, with a running VM.
func allRunning(rows []machineRow, want int) bool {
	if len(rows) != want {
		return false
	}
	for _, r := range rows {
		if r.Phase != "Running" || r.Node == "" || r.ProviderID == "" || r.Deleting || r.VM != string(kubevirtv1.VirtualMachineStatusRunning) {
			return false
		}
	}
	return true
}

// waitMachines waits until want Machines are Running and Harvester holds exactly their VMs.
func (c *capiDemo) waitMachines(ctx context.Context, want int) error {
	return c.waitTable(ctx, func(rows []machineRow) (bool, error) {
		for _, r := range rows {
			if r.Phase == "Failed" {
				return false, fmt.Errorf("the Machine %s failed (HarvesterMachine: %s)", r.Machine, r.Infra)
			}
		}
		if !allRunning(rows, want) {
			return false, nil
		}
		vms, _, _, _, err := c.tb.HarvesterLeft(ctx)
		return vms == want, err
	})
}

// checkRunning checks the Running machines: each Machine's providerID names its VM's UID (set on
// its Node by the played cloud provider, from the delivered credentials) and the IPs are distinct
// addresses of the VM network.
func (c *capiDemo) checkRunning(ctx context.Context, want int) error {
	rows, err := c.rows(ctx)
	if err != nil {
		return err
	}
	if len(rows) != want {
		return fmt.Errorf("%d Machines, want %d", len(rows), want)
	}
	prefix := netip.MustParsePrefix(testbed.NetworkCIDR)
	seen := map[string]string{}
	for _, r := range rows {
		if r.ProviderID != harvester.ProviderIDPrefix+r.VMUID {
			return fmt.Errorf("the Machine %s has providerID %q, its VM's UID is %s", r.Machine, r.ProviderID, r.VMUID)
		}
		if r.Node != r.Machine {
			return fmt.Errorf("the Machine %s has Node %s: the VM (the guest's hostname) is named after the machine", r.Machine, r.Node)
		}
		ip, err := netip.ParseAddr(r.IP)
		if err != nil || !prefix.Contains(ip) {
			return fmt.Errorf("the Machine %s has IP %q, not in the network's range %s", r.Machine, r.IP, testbed.NetworkCIDR)
		}
		if other, dup := seen[r.IP]; dup {
			return fmt.Errorf("the Machines %s and %s have the same IP %s", other, r.Machine, r.IP)
		}
		seen[r.IP] = r.Machine
	}
	return nil
}

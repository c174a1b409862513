package capi

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

var (
	clusterClassGVK      = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "ClusterClass"}
	machineDeploymentGVK = schema.GroupVersionKind{Group: "cluster.x-k8s.io", Version: "v1beta2", Kind: "MachineDeployment"}
	kubeadmCPGVK         = schema.GroupVersionKind{Group: "controlplane.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmControlPlane"}
)

// templateLabel is a label the tests give a worker template's VMs (spec.template.spec.labels), to
// tell by a VM which template made it.
const templateLabel = "tenants.example/template"

// checkClassFlavour checks a ClusterClass flavour as clusterctl renders it: its Cluster's topology
// names ClusterClass class, which clusterctl added from clusterclass-<class>.yaml; every template
// the class names is in the output, in the Cluster's namespace; every variable the Cluster sets is
// one the class declares, once; and every variable the class requires without a default is set.
func checkClassFlavour(t *testing.T, flavour string, objs []*unstructured.Unstructured, class string) {
	t.Helper()
	cluster := only(t, flavour, objs, "Cluster")
	cc := only(t, flavour, objs, "ClusterClass")
	if name, _, _ := unstructured.NestedString(cluster.Object, "spec", "topology", "classRef", "name"); name != class || cc.GetName() != class {
		t.Fatalf("%s: the Cluster's topology names class %q and clusterctl added ClusterClass %q; want %q", flavour, name, cc.GetName(), class)
	}
	if cc.GetNamespace() != cluster.GetNamespace() {
		t.Errorf("%s: ClusterClass %s is in namespace %q, the Cluster in %q", flavour, class, cc.GetNamespace(), cluster.GetNamespace())
	}
	have := sets.New[string]()
	for _, o := range objs {
		have.Insert(o.GetAPIVersion() + "/" + o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName())
	}
	for _, ref := range classTemplateRefs(cc) {
		if key := ref["apiVersion"] + "/" + ref["kind"] + "/" + cc.GetNamespace() + "/" + ref["name"]; !have.Has(key) {
			t.Errorf("%s: ClusterClass %s names %s %s (%s), which is not in the output", flavour, class, ref["kind"], ref["name"], ref["apiVersion"])
		}
	}
	declared := map[string]map[string]any{}
	variables, _, _ := unstructured.NestedSlice(cc.Object, "spec", "variables")
	for _, v := range variables {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		declared[name] = m
	}
	set := sets.New[string]()
	values, _, _ := unstructured.NestedSlice(cluster.Object, "spec", "topology", "variables")
	for _, v := range values {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if _, ok := declared[name]; !ok || set.Has(name) {
			t.Errorf("%s: the Cluster sets variable %q, which class %s does not declare or which it sets twice", flavour, name, class)
		}
		set.Insert(name)
	}
	for name, v := range declared {
		required, _ := v["required"].(bool)
		_, defaulted, _ := unstructured.NestedFieldNoCopy(v, "schema", "openAPIV3Schema", "default")
		if required && !defaulted && !set.Has(name) {
			t.Errorf("%s: class %s requires variable %q, which has no default and which the Cluster does not set", flavour, class, name)
		}
	}
}

// classTemplateRefs are the templateRefs of a ClusterClass: its infrastructure, control plane and
// control plane machines, and each MachineDeployment class's bootstrap and infrastructure.
func classTemplateRefs(cc *unstructured.Unstructured) []map[string]string {
	var refs []map[string]string
	for _, path := range [][]string{
		{"spec", "infrastructure", "templateRef"}, {"spec", "controlPlane", "templateRef"},
		{"spec", "controlPlane", "machineInfrastructure", "templateRef"},
	} {
		if ref, found, _ := unstructured.NestedStringMap(cc.Object, path...); found {
			refs = append(refs, ref)
		}
	}
	classes, _, _ := unstructured.NestedSlice(cc.Object, "spec", "workers", "machineDeployments")
	for _, c := range classes {
		m, _ := c.(map[string]any)
		for _, part := range []string{"bootstrap", "infrastructure"} {
			if ref, found, _ := unstructured.NestedStringMap(m, part, "templateRef"); found {
				refs = append(refs, ref)
			}
		}
	}
	return refs
}

// TestClusterAPIClusterClassHostedRollsWorkers creates a tenant cluster from the hosted-topology
// flavour as `clusterctl generate cluster` renders it, with ClusterClass harvester-hosted added
// by clusterctl, on a management cluster with the real Cluster API core manager (ClusterTopology
// on: its topology controller and webhooks), its kubeadm bootstrap provider, this provider and
// the templates' immutability policy of its components; Steward, the kubelets and Harvester's
// cloud provider are played. The topology controller makes the HarvesterCluster, the
// StewardControlPlane and the MachineDeployment with the variables patched in; the Cluster
// reaches Available with its two workers Running. Then the workers roll three times, each time
// onto machines whose VMs show the change, with the old VMs gone: a variable changed (workerCPU);
// the class pointed at a new worker template; the Cluster rebased onto a second class. Deleting
// the Cluster leaves nothing on Harvester.
func TestClusterAPIClusterClassHostedRollsWorkers(t *testing.T) {
	t.Parallel()
	assets := requireAssets(t)
	kubeadmCRDs, err := testbed.KubeadmCRDs(assets, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := startCAPIWorldWithin(t, 8*time.Minute, nil, kubeadmCRDs, stewardCRDs())
	ctx, c := w.ctx, w.c
	w.installTemplatePolicy()
	bootstrap, err := testbed.StartKubeadmBootstrap(ctx, testbed.ClusterAPIOptions{Assets: assets, Config: w.cfg, WorkDir: t.TempDir()})
	t.Cleanup(bootstrap.Stop)
	w.must(err)
	tenantAPI, cloudProvider := w.playTenant()
	w.must(tenantAPI.WriteClusterCA(ctx, c, ns, tenant.Name))
	steward := testbed.PlaySteward(ctx, c, ns, tenant.Name, tenantAPI.Config.Host, nil)
	t.Cleanup(steward.Stop)

	_, config := clusterctlRepository(ctx, t)
	objs := generateFlavour(ctx, t, assets, config, "hosted-topology", "HARVESTER_WORKER_MEMORY=2Gi", "HARVESTER_DISK_SIZE=10Gi")
	cluster := w.createFromClass(objs)
	waitFor(ctx, t, w.capi, "the Cluster of class harvester-hosted to be Available with 2 workers Running", func() error {
		if err := errors.Join(steward.Err(), cloudProvider.Err()); err != nil {
			return err
		}
		if err := w.clusterAvailable(cluster); err != nil {
			return err
		}
		_, err := w.topologyWorkers(2, func(*kubevirtv1.VirtualMachine) error { return nil })
		return err
	})
	hc := w.topologyObject(infrav1.GroupVersion.WithKind("HarvesterCluster"), cluster, "spec", "infrastructureRef")
	if ref, _, _ := unstructured.NestedString(hc.Object, "spec", "providerConfigRef", "name"); ref != "harvester" {
		t.Errorf("the topology's HarvesterCluster %s names ProviderConfig %q, want the providerConfig variable's harvester", hc.GetName(), ref)
	}
	scp := w.topologyObject(testbed.StewardControlPlaneGVK, cluster, "spec", "controlPlaneRef")
	if replicas, _, _ := unstructured.NestedInt64(scp.Object, "spec", "replicas"); replicas != 3 {
		t.Errorf("the topology's StewardControlPlane %s has %d replicas, want the topology's 3", scp.GetName(), replicas)
	}
	first, err := w.topologyWorkers(2, func(vm *kubevirtv1.VirtualMachine) error {
		memory := vm.Spec.Template.Spec.Domain.Resources.Limits.Memory()
		if vm.Spec.Template.Spec.Domain.CPU.Cores != 2 || memory.String() != "2Gi" {
			return fmt.Errorf("VM %s has %d cores and %s, want the variables' 2 and 2Gi", vm.Name, vm.Spec.Template.Spec.Domain.CPU.Cores, memory.String())
		}
		return nil
	})
	w.must(err)

	// A variable: the MachineDeployment gets a new HarvesterMachineTemplate, and its machines roll.
	w.setTopologyVariable(cluster, "workerCPU", 3)
	second := w.rolled(cluster, first, "the workers to roll onto 3 vCPUs", func(vm *kubevirtv1.VirtualMachine) error {
		if vm.Spec.Template.Spec.Domain.CPU.Cores != 3 {
			return fmt.Errorf("VM %s has %d cores, want 3", vm.Name, vm.Spec.Template.Spec.Domain.CPU.Cores)
		}
		return nil
	})

	// The class pointed at a new worker template.
	class := only(t, "hosted-topology flavour", objs, "ClusterClass").DeepCopy() // objs stay as rendered
	workerTemplate := classWorkerTemplate(t, objs, class)
	v2 := copyWithLabel(workerTemplate, workerTemplate.GetName()+"-v2", "v2")
	w.must(c.Create(ctx, v2))
	w.must(c.Patch(ctx, class, client.RawPatch(types.JSONPatchType,
		fmt.Appendf(nil, `[{"op":"replace","path":"/spec/workers/machineDeployments/0/infrastructure/templateRef/name","value":%q}]`, v2.GetName()))))
	third := w.rolled(cluster, second, "the workers to roll onto the class's new template", vmLabelled("v2"))

	// A second class, its templates copies of the first's but for the workers' label: the Cluster
	// rebased onto it.
	w.createClassCopy(objs, class.GetName()+"-v2", "v3")
	w.must(c.Patch(ctx, cluster, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"topology":{"classRef":{"name":%q}}}}`, class.GetName()+"-v2"))))
	w.rolled(cluster, third, "the workers to roll onto the second class", vmLabelled("v3"))

	w.must(c.Delete(ctx, cluster))
	waitFor(ctx, t, w.capi, "the Cluster and everything on Harvester to go", func() error {
		return w.clusterAndMachinesGone(cluster)
	})
}

// TestClusterAPIClusterClassKubeadmPatchesTheTopology creates a tenant cluster from the topology
// flavour (ClusterClass harvester-kubeadm) as `clusterctl generate cluster` renders it, with every
// kind of variable set, on a management cluster with the real Cluster API core manager
// (ClusterTopology on) and this provider: the topology controller makes the HarvesterCluster with
// the endpoint, ProviderConfig and failure domains of the variables, the KubeadmControlPlane with
// kube-vip's manifest for that endpoint and the SSH keys as a kubeadm user, its
// HarvesterMachineTemplate of the control plane's size, and the MachineDeployment with the
// workers' size and keys. Cluster API's kubeadm control plane provider does not run here: it
// needs etcd members reached through the workload cluster's API server.
func TestClusterAPIClusterClassKubeadmPatchesTheTopology(t *testing.T) {
	t.Parallel()
	assets := requireAssets(t)
	kubeadmCRDs, err := testbed.KubeadmCRDs(assets, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w := startCAPIWorld(t, kubeadmCRDs)
	ctx := w.ctx
	w.installTemplatePolicy()
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGtest tenant@example"
	_, config := clusterctlRepository(ctx, t)
	objs := generateFlavour(ctx, t, assets, config, "topology",
		"HARVESTER_CONTROL_PLANE_CPU=4", "HARVESTER_WORKER_MEMORY=8Gi", "KUBE_VIP_VERSION=v0.9.0", "HARVESTER_NETWORKS=[vms/vlan40]",
		`HARVESTER_SSH_AUTHORIZED_KEYS=["`+key+`"]`, "HARVESTER_SSH_USER=ops",
		`HARVESTER_FAILURE_DOMAINS=[{name: rack-1, controlPlane: true, nodeSelector: {topology.kubernetes.io/zone: rack-1}}]`)
	cluster := w.createFromClass(objs)

	var hc, kcp, md *unstructured.Unstructured
	waitFor(ctx, t, w.capi, "the topology controller to make the HarvesterCluster, KubeadmControlPlane and MachineDeployment", func() error {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
			return err
		}
		var err error
		if hc, err = w.referenced(infrav1.GroupVersion.WithKind("HarvesterCluster"), cluster, "spec", "infrastructureRef"); err != nil {
			return err
		}
		if kcp, err = w.referenced(kubeadmCPGVK, cluster, "spec", "controlPlaneRef"); err != nil {
			return err
		}
		mds := &unstructured.UnstructuredList{}
		mds.SetGroupVersionKind(machineDeploymentGVK)
		if err := w.c.List(ctx, mds, client.InNamespace(ns), client.MatchingLabels{testbed.ClusterNameLabel: tenant.Name}); err != nil {
			return err
		}
		if len(mds.Items) != 1 {
			return fmt.Errorf("%d MachineDeployments, want the topology's one", len(mds.Items))
		}
		md = &mds.Items[0]
		return nil
	})

	endpoint, _, _ := unstructured.NestedMap(hc.Object, "spec", "controlPlaneEndpoint")
	if fmt.Sprint(endpoint) != "map[host:10.40.0.250 port:6443]" {
		t.Errorf("HarvesterCluster %s endpoint %v, want controlPlaneEndpointIP 10.40.0.250:6443", hc.GetName(), endpoint)
	}
	if ref, _, _ := unstructured.NestedString(hc.Object, "spec", "providerConfigRef", "name"); ref != "harvester" {
		t.Errorf("HarvesterCluster %s names ProviderConfig %q, want harvester", hc.GetName(), ref)
	}
	domains, _, _ := unstructured.NestedSlice(hc.Object, "spec", "failureDomains")
	if want := `[{"controlPlane":true,"name":"rack-1","nodeSelector":{"topology.kubernetes.io/zone":"rack-1"}}]`; mustJSON(t, domains) != want {
		t.Errorf("HarvesterCluster %s failure domains %s, want %s", hc.GetName(), mustJSON(t, domains), want)
	}

	spec, _, _ := unstructured.NestedMap(kcp.Object, "spec")
	files, _, _ := unstructured.NestedSlice(spec, "kubeadmConfigSpec", "files")
	var kubeVIP string
	for _, f := range files {
		if m, _ := f.(map[string]any); m["path"] == "/etc/kubernetes/manifests/kube-vip.yaml" {
			kubeVIP, _ = m["content"].(string)
		}
	}
	for _, want := range []string{`{name: address, value: "10.40.0.250"}`, "image: ghcr.io/kube-vip/kube-vip:v0.9.0", `{name: vip_interface, value: "eth0"}`} {
		if !strings.Contains(kubeVIP, want) {
			t.Errorf("KubeadmControlPlane %s: kube-vip's manifest lacks %q:\n%s", kcp.GetName(), want, kubeVIP)
		}
	}
	wantUsers := `[{"name":"ops","sshAuthorizedKeys":["` + key + `"],"sudo":"ALL=(ALL) NOPASSWD:ALL"}]`
	if users, _, _ := unstructured.NestedSlice(spec, "kubeadmConfigSpec", "users"); mustJSON(t, users) != wantUsers {
		t.Errorf("KubeadmControlPlane %s users %s, want %s", kcp.GetName(), mustJSON(t, users), wantUsers)
	}
	if replicas, _, _ := unstructured.NestedInt64(spec, "replicas"); replicas != 3 || spec["version"] != "v1.33.1" {
		t.Errorf("KubeadmControlPlane %s: %d replicas of %v, want 3 of v1.33.1", kcp.GetName(), replicas, spec["version"])
	}
	cpTemplate := &infrav1.HarvesterMachineTemplate{}
	w.must(w.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: nestedString(kcp, "spec", "machineTemplate", "spec", "infrastructureRef", "name")}, cpTemplate))
	if s := cpTemplate.Spec.Template.Spec; s.CPU != 4 || s.Memory.String() != "4Gi" || s.Image != "vms/ubuntu" || !slices.Equal(s.Networks, []string{"vms/vlan40"}) {
		t.Errorf("the control plane's HarvesterMachineTemplate %s: cpu %d, memory %s, image %q, networks %v; want 4, 4Gi, vms/ubuntu, [vms/vlan40]", cpTemplate.Name, s.CPU, s.Memory.String(), s.Image, s.Networks)
	}

	workerTemplate := &infrav1.HarvesterMachineTemplate{}
	w.must(w.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: nestedString(md, "spec", "template", "spec", "infrastructureRef", "name")}, workerTemplate))
	if s := workerTemplate.Spec.Template.Spec; s.CPU != 2 || s.Memory.String() != "8Gi" || s.RootDisk.Size.String() != "40Gi" || s.Image != "vms/ubuntu" {
		t.Errorf("the workers' HarvesterMachineTemplate %s: cpu %d, memory %s, disk %s, image %q; want 2, 8Gi, 40Gi, vms/ubuntu", workerTemplate.Name, s.CPU, s.Memory.String(), s.RootDisk.Size.String(), s.Image)
	}
	workerBootstrap := &unstructured.Unstructured{}
	workerBootstrap.SetGroupVersionKind(kubeadmConfigTemplateGVK)
	w.must(w.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: nestedString(md, "spec", "template", "spec", "bootstrap", "configRef", "name")}, workerBootstrap))
	if users, _, _ := unstructured.NestedSlice(workerBootstrap.Object, "spec", "template", "spec", "users"); mustJSON(t, users) != wantUsers {
		t.Errorf("the workers' KubeadmConfigTemplate %s users %s, want %s", workerBootstrap.GetName(), mustJSON(t, users), wantUsers)
	}
	if replicas, _, _ := unstructured.NestedInt64(md.Object, "spec", "replicas"); replicas != 2 {
		t.Errorf("MachineDeployment %s has %d replicas, want the topology's 2", md.GetName(), replicas)
	}
}

// installTemplatePolicy installs the templates' immutability policy of this provider's components
// (config/capi), which must let the topology controller's dry runs through.
func (w *capiWorld) installTemplatePolicy() {
	w.t.Helper()
	objs, err := w.decodeFile(filepath.Join(repoRoot(), "config", "capi", "template_immutability_policy.yaml"))
	w.must(err)
	for _, o := range objs {
		w.must(w.c.Create(w.ctx, o))
	}
}

// createFromClass creates a ClusterClass flavour's objects as rendered: the class and its
// templates first, then, once Cluster API has reconciled the class (its webhooks check a Cluster's
// variables against the class's status), the rest. It returns the Cluster.
func (w *capiWorld) createFromClass(objs []*unstructured.Unstructured) *unstructured.Unstructured {
	w.t.Helper()
	class := only(w.t, "the flavour", objs, "ClusterClass")
	inClass := sets.New[string]()
	for _, ref := range classTemplateRefs(class) {
		inClass.Insert(ref["kind"] + "/" + ref["name"])
	}
	var rest []client.Object
	for _, o := range objs {
		if o.GetKind() == "ClusterClass" || inClass.Has(o.GetKind()+"/"+o.GetName()) {
			w.must(w.c.Create(w.ctx, o, client.FieldValidation("Strict")))
		} else if o.GetKind() != "Cluster" {
			rest = append(rest, o)
		}
	}
	w.waitClassReconciled(class.GetName())
	w.must(testbed.CreateAll(w.ctx, w.c, rest...))
	cluster := only(w.t, "the flavour", objs, "Cluster")
	w.must(w.c.Create(w.ctx, cluster, client.FieldValidation("Strict")))
	return cluster
}

// waitClassReconciled waits until Cluster API has reconciled the current generation of
// ClusterClass name and found its variables.
func (w *capiWorld) waitClassReconciled(name string) {
	w.t.Helper()
	waitFor(w.ctx, w.t, w.capi, "ClusterClass "+name+" to be reconciled", func() error {
		cc := &unstructured.Unstructured{}
		cc.SetGroupVersionKind(clusterClassGVK)
		if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: name}, cc); err != nil {
			return err
		}
		if observed, _, _ := unstructured.NestedInt64(cc.Object, "status", "observedGeneration"); observed != cc.GetGeneration() {
			return fmt.Errorf("observed generation %d of %d", observed, cc.GetGeneration())
		}
		if conditionStatus(cc, "VariablesReady") != "True" {
			return fmt.Errorf("conditions %v", cc.Object["status"])
		}
		return nil
	})
}

// clusterAvailable says why the Cluster is not Available, if it is not.
func (w *capiWorld) clusterAvailable(cluster *unstructured.Unstructured) error {
	if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(cluster), cluster); err != nil {
		return err
	}
	if conditionStatus(cluster, "Available") != "True" {
		conditions, _, _ := unstructured.NestedSlice(cluster.Object, "status", "conditions")
		return fmt.Errorf("Cluster %s not Available: %v", cluster.GetName(), conditions)
	}
	return nil
}

// topologyWorkers checks that the tenant cluster has exactly want Machines, each Running with its
// Node and its VM on Harvester passing check, and that Harvester holds no other VM of a worker;
// it returns the Machines' names.
func (w *capiWorld) topologyWorkers(want int, check func(*kubevirtv1.VirtualMachine) error) (sets.Set[string], error) {
	machines := &unstructured.UnstructuredList{}
	machines.SetGroupVersionKind(testbed.MachineGVK.GroupVersion().WithKind("MachineList"))
	if err := w.c.List(w.ctx, machines, client.InNamespace(ns), client.MatchingLabels{testbed.ClusterNameLabel: tenant.Name}); err != nil {
		return nil, err
	}
	names := sets.New[string]()
	for _, m := range machines.Items {
		phase, _, _ := unstructured.NestedString(m.Object, "status", "phase")
		node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name")
		if phase != "Running" || node == "" || m.GetDeletionTimestamp() != nil {
			return nil, fmt.Errorf("Machine %s: phase %q, nodeRef %q, deleting %v", m.GetName(), phase, node, m.GetDeletionTimestamp() != nil)
		}
		vm := &kubevirtv1.VirtualMachine{}
		if err := w.hv.Client.Get(w.ctx, client.ObjectKey{Namespace: "vms", Name: m.GetName()}, vm); err != nil {
			return nil, fmt.Errorf("the VM of Machine %s: %w", m.GetName(), err)
		}
		if err := check(vm); err != nil {
			return nil, err
		}
		names.Insert(m.GetName())
	}
	if names.Len() != want {
		return nil, fmt.Errorf("%d Machines %v, want %d", names.Len(), sets.List(names), want)
	}
	if vms, disks, secrets := w.harvesterLeft(); vms != want || disks != want || secrets != want {
		return nil, fmt.Errorf("%d VMs, %d disks and %d cloud-init Secrets on Harvester, want %d of each", vms, disks, secrets, want)
	}
	return names, nil
}

// rolled waits until the tenant cluster's workers are as many as before, all new (none of
// before), Running, with VMs passing check and the old VMs gone, and the Cluster Available; it
// returns the new workers' names.
func (w *capiWorld) rolled(cluster *unstructured.Unstructured, before sets.Set[string], what string, check func(*kubevirtv1.VirtualMachine) error) sets.Set[string] {
	w.t.Helper()
	var after sets.Set[string]
	waitFor(w.ctx, w.t, w.capi, what, func() error {
		var err error
		if after, err = w.topologyWorkers(before.Len(), check); err != nil {
			return err
		}
		if kept := before.Intersection(after); kept.Len() > 0 {
			return fmt.Errorf("Machines %v not rolled yet", sets.List(kept))
		}
		return w.clusterAvailable(cluster)
	})
	return after
}

// setTopologyVariable sets variable name of the Cluster's topology to value.
func (w *capiWorld) setTopologyVariable(cluster *unstructured.Unstructured, name string, value any) {
	w.t.Helper()
	w.must(w.c.Get(w.ctx, client.ObjectKeyFromObject(cluster), cluster))
	variables, _, _ := unstructured.NestedSlice(cluster.Object, "spec", "topology", "variables")
	for i, v := range variables {
		if m, _ := v.(map[string]any); m["name"] == name {
			patch := fmt.Appendf(nil, `[{"op":"test","path":"/spec/topology/variables/%d/name","value":%q},{"op":"replace","path":"/spec/topology/variables/%d/value","value":%s}]`,
				i, name, i, mustJSON(w.t, value))
			w.must(w.c.Patch(w.ctx, cluster, client.RawPatch(types.JSONPatchType, patch)))
			return
		}
	}
	w.t.Fatalf("the Cluster has no variable %s", name)
}

// topologyObject returns the object of kind gvk that the Cluster's reference at path names.
func (w *capiWorld) topologyObject(gvk schema.GroupVersionKind, cluster *unstructured.Unstructured, path ...string) *unstructured.Unstructured {
	w.t.Helper()
	w.must(w.c.Get(w.ctx, client.ObjectKeyFromObject(cluster), cluster))
	o, err := w.referenced(gvk, cluster, path...)
	w.must(err)
	return o
}

// referenced reads the object of kind gvk that the reference at path of from names.
func (w *capiWorld) referenced(gvk schema.GroupVersionKind, from *unstructured.Unstructured, path ...string) (*unstructured.Unstructured, error) {
	name := nestedString(from, append(path, "name")...)
	if name == "" {
		return nil, fmt.Errorf("%s %s has no %s", from.GetKind(), from.GetName(), strings.Join(path, "."))
	}
	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(gvk)
	return o, w.c.Get(w.ctx, client.ObjectKey{Namespace: from.GetNamespace(), Name: name}, o)
}

// classWorkerTemplate is the HarvesterMachineTemplate of the class's MachineDeployment class, as
// rendered.
func classWorkerTemplate(t *testing.T, objs []*unstructured.Unstructured, class *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	name := nestedString(class, "spec", "workers", "machineDeployments", "0", "infrastructure", "templateRef", "name")
	for _, o := range objs {
		if o.GetKind() == "HarvesterMachineTemplate" && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no HarvesterMachineTemplate %q, the class's workers'", name)
	return nil
}

// copyWithLabel is a copy of template, named name, whose VMs carry templateLabel=value.
func copyWithLabel(template *unstructured.Unstructured, name, value string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": template.GetAPIVersion(), "kind": template.GetKind(), "spec": template.Object["spec"]}}
	o = o.DeepCopy()
	o.SetNamespace(template.GetNamespace())
	o.SetName(name)
	_ = unstructured.SetNestedStringMap(o.Object, map[string]string{templateLabel: value}, "spec", "template", "spec", "labels")
	return o
}

// createClassCopy creates ClusterClass name, a copy of the rendered class with copies of its
// templates (each named after the new class, as Cluster API advises: a template belongs to one
// class), its workers' VMs labelled templateLabel=value, and waits until it is reconciled.
func (w *capiWorld) createClassCopy(objs []*unstructured.Unstructured, name, value string) {
	w.t.Helper()
	class := only(w.t, "the flavour", objs, "ClusterClass")
	copied := class.DeepCopy()
	copied.SetName(name)
	copied.SetResourceVersion("")
	copied.SetUID("")
	delete(copied.Object, "status")
	worker := classWorkerTemplate(w.t, objs, class)
	for _, o := range objs {
		for _, ref := range classTemplateRefs(class) {
			if o.GetKind() != ref["kind"] || o.GetName() != ref["name"] {
				continue
			}
			newName := strings.Replace(o.GetName(), class.GetName(), name, 1)
			var t *unstructured.Unstructured
			if o == worker {
				t = copyWithLabel(o, newName, value)
			} else {
				t = &unstructured.Unstructured{Object: map[string]any{"apiVersion": o.GetAPIVersion(), "kind": o.GetKind(), "spec": o.Object["spec"]}}
				t = t.DeepCopy()
				t.SetNamespace(o.GetNamespace())
				t.SetName(newName)
			}
			w.must(w.c.Create(w.ctx, t))
		}
	}
	// The new class names the copies: every templateRef of its spec, renamed as they are.
	spec, err := json.Marshal(copied.Object["spec"])
	w.must(err)
	var renamed map[string]any
	w.must(json.Unmarshal([]byte(strings.ReplaceAll(string(spec), `"name":"`+class.GetName(), `"name":"`+name)), &renamed))
	copied.Object["spec"] = renamed
	w.must(w.c.Create(w.ctx, copied))
	w.waitClassReconciled(name)
}

// vmLabelled checks that a VM carries templateLabel=value.
func vmLabelled(value string) func(*kubevirtv1.VirtualMachine) error {
	return func(vm *kubevirtv1.VirtualMachine) error {
		if got := vm.Labels[templateLabel]; got != value {
			return fmt.Errorf("VM %s has %s=%q, want %q", vm.Name, templateLabel, got, value)
		}
		return nil
	}
}

// nestedString reads a string at path of o; a path element that is a number indexes a list.
func nestedString(o *unstructured.Unstructured, path ...string) string {
	var v any = o.Object
	for _, p := range path {
		switch node := v.(type) {
		case map[string]any:
			v = node[p]
		case []any:
			var i int
			if _, err := fmt.Sscan(p, &i); err != nil || i < 0 || i >= len(node) {
				return ""
			}
			v = node[i]
		default:
			return ""
		}
	}
	s, _ := v.(string)
	return s
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// conditionStatus is the status of condition t of o, "" if it has none.
func conditionStatus(o *unstructured.Unstructured, t string) string {
	conditions, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conditions {
		if m, _ := c.(map[string]any); m["type"] == t {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

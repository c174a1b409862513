package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The tenant cluster of the Cluster API demo, as `clusterctl generate cluster` renders it from the
// hosted flavour (templates/cluster-template-hosted.yaml).
const (
	capiCluster  = "demo"
	capiFlavour  = "hosted"
	capiWorkers  = 3
	capiScaledTo = 1
	// capiProvider and capiVersion name this provider in the demo's clusterctl repository, as a
	// user's clusterctl.yaml does (clusterctl's built-in "harvester" is another provider's).
	capiProvider = "butler-harvester"
	capiVersion  = "v0.3.0"
	// capiKubernetes is the flavour's KUBERNETES_VERSION; capiImage the worker image it names
	// (HARVESTER_IMAGE), which the demo uploads to the simulated Harvester.
	capiKubernetes = "v1.33.1"
	capiImage      = "ubuntu-2404-kubeadm-v1-33"
	// capiProviderConfig is the ProviderConfig of config/samples (HARVESTER_PROVIDER_CONFIG).
	capiProviderConfig = "harvester-config"
)

// capiDemo is the Cluster API demo's state beside the shared demo's.
type capiDemo struct {
	*demo
	assets     string // what hack/tools/capi.sh prints (CAPI_ASSETS)
	clusterctl string // the clusterctl configuration naming the demo's repository
	tenant     *testbed.Tenant
	objs       []*unstructured.Unstructured // the flavour as clusterctl rendered it
	steward    *testbed.Steward
}

// runCAPI is `make demo-capi`: the Cluster API door end to end on the simulated Harvester.
func runCAPI(ctx context.Context, o options, d *demo) error {
	assets, err := testbed.ClusterAPIAssets()
	if err != nil {
		return fmt.Errorf("%w (make demo-capi builds Cluster API and sets it)", err)
	}
	work, err := filepath.Abs(o.workDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o750); err != nil {
		return err
	}
	c := &capiDemo{demo: d, assets: assets}
	crdDirectories := []string{filepath.Join(o.repoRoot, "test", "testdata", "steward", "crd")}
	if o.static {
		crdDirectories = append(crdDirectories, testbed.InClusterIPPoolCRDs(o.repoRoot)) // the in-cluster IPAM provider's
	}
	d.say("Cluster API %s from %s (built by hack/tools/capi.sh)", clusterAPIVersion(assets), assets)
	d.tb, err = testbed.Start(ctx, testbed.Options{
		RepoRoot: o.repoRoot, WorkDir: work, ClusterAPI: assets, KubeadmBootstrap: true,
		// Besides Cluster API core's CRDs (the ClusterResourceSet's among them), the kubeadm
		// providers' (KubeadmBootstrap) and this provider's: Steward's StewardControlPlane CRD as
		// its release installs it.
		CRDDirectories: crdDirectories,
		Sim:            sim.Config{BootDelay: o.bootDelay, IPDelay: o.ipDelay, ImportDelay: time.Second, CloneDelay: o.cloneDelay, GCDelay: o.gcDelay},
		ManagerArgs:    []string{"--metrics-bind-address=0"},
		Progress:       d.say,
	})
	defer d.tb.Stop()
	if err != nil {
		return err
	}
	d.say("  Cluster API core manager running (pid %d), logging to %s", d.tb.ClusterAPI.PID(), d.tb.ClusterAPI.LogPath)
	d.say("  Cluster API's kubeadm bootstrap provider running (pid %d), logging to %s", d.tb.KubeadmBootstrap.PID(), d.tb.KubeadmBootstrap.LogPath)
	d.say("Creating the Harvester side (network, images), the credentials Secret and the ProviderConfig of config/samples ...")
	if err := d.tb.Seed(ctx); err != nil {
		return err
	}
	if err := c.uploadWorkerImage(ctx); err != nil {
		return err
	}
	if _, err := d.tb.ApplyFile(ctx, filepath.Join(o.repoRoot, "config", "samples", "providerconfig.yaml")); err != nil {
		return err
	}

	d.say("Rendering the %s flavour with the real clusterctl from the project's clusterctl repository ...", capiFlavour)
	if err := c.render(ctx, work); err != nil {
		return err
	}

	if o.static {
		if err := c.useStaticAddresses(); err != nil {
			return err
		}
		if err := d.tb.Mgmt.Create(ctx, demoPool()); err != nil {
			return err
		}
		ipam, err := testbed.PlayIPAM(ctx, d.tb.MgmtConfig)
		if err != nil {
			return err
		}
		defer ipam.Stop()
		d.say("  InClusterIPPool %s/%s created; Cluster API's in-cluster IPAM provider is played (testbed.PlayIPAM)", testbed.Namespace, demoPoolName)
	}
	d.say("Starting the tenant cluster's API server (what Steward would host), and playing its kubelets and Harvester's cloud provider ...")
	if c.tenant, err = testbed.StartTenant(ctx, d.tb.Mgmt, testbed.Namespace, capiCluster); err != nil {
		return err
	}
	defer func() { _ = c.tenant.Stop() }()
	// Steward keeps the hosted control plane's CA and hands it to Cluster API as <cluster>-ca, as
	// it hands over <cluster>-kubeconfig: the kubeadm bootstrap provider pins it in the workers'
	// bootstrap data.
	if err := c.tenant.WriteClusterCA(ctx, d.tb.Mgmt, testbed.Namespace, capiCluster); err != nil {
		return err
	}
	if err := os.WriteFile(d.tb.Path("tenant.kubeconfig"), sim.KubeconfigFor(c.tenant.Config), 0o600); err != nil {
		return err
	}
	kubelets, err := testbed.PlayKubelets(ctx, d.tb.Harvester.Config, testbed.HarvesterNamespace, c.tenant)
	if err != nil {
		return err
	}
	defer kubelets.Stop()
	cloudProvider := testbed.PlayCloudProvider(ctx, d.tb.Mgmt, testbed.Namespace, capiCluster, c.tenant)
	defer cloudProvider.Stop()
	c.steward = testbed.PlaySteward(ctx, d.tb.Mgmt, testbed.Namespace, capiCluster, c.tenant.Config.Host, d.say)
	defer c.steward.Stop()
	d.say("  played here (Cluster API core and its kubeadm bootstrap provider run): Steward (the cluster CA and kubeconfig Secrets, the endpoint patch and the StewardControlPlane's status), the workers' kubelets, and Harvester's cloud provider in the tenant (from the credentials the provider delivers)")

	d.say("Creating the tenant cluster %s/%s as rendered (%s) ...", testbed.Namespace, capiCluster, kindsOf(c.objs))
	d.say("  (Cluster API's own webhooks default and validate them, as on any management cluster)")
	began := time.Now()
	if err := c.create(ctx); err != nil {
		return err
	}
	d.say("Waiting for the %d workers to be Running", capiWorkers)
	if err := c.waitMachines(ctx, capiWorkers); err != nil {
		return errors.Join(err, cloudProvider.Err(), c.steward.Err())
	}
	if err := c.checkRunning(ctx, capiWorkers); err != nil {
		return err
	}
	d.say("All %d Machines Running with their Nodes, providerIDs and distinct IPs from %s, %s after creation.", capiWorkers, testbed.NetworkCIDR, time.Since(began).Round(100*time.Millisecond))
	if err := c.checkJoinData(ctx); err != nil {
		return err
	}
	if o.static {
		if err := c.checkStaticAddresses(ctx); err != nil {
			return err
		}
	}
	if err := c.waitClusterAvailable(ctx); err != nil {
		return err
	}
	if err := c.showCluster(ctx); err != nil {
		return err
	}
	if o.keep {
		c.explain()
		<-ctx.Done()
		return nil
	}

	if err := c.scale(ctx); err != nil {
		return err
	}
	if err := c.deleteCluster(ctx); err != nil {
		return err
	}
	if o.static {
		// Deleted with their machines, the claims go once the IPAM provider lets their addresses go.
		var left int
		deadline := time.Now().Add(30 * time.Second)
		for left, err = c.claimsLeft(ctx); err == nil && left > 0 && time.Now().Before(deadline); left, err = c.claimsLeft(ctx) {
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		if left > 0 {
			return fmt.Errorf("%d IPAddressClaims left 30s after the Cluster was deleted", left)
		}
		d.say("No IPAddressClaim is left: each was released once its machine's VM was gone.")
	}
	d.say("Demo passed in %s.", time.Since(d.start).Round(100*time.Millisecond))
	return nil
}

// clusterAPIVersion is the version clusterctl reports (the pinned one).
func clusterAPIVersion(assets string) string {
	cmd := exec.Command(filepath.Join(assets, "clusterctl"), "version", "-o", "short") //nolint:gosec // G204: the clusterctl hack/tools/capi.sh built
	cmd.Env = append(os.Environ(), "CLUSTERCTL_DISABLE_VERSIONCHECK=true")
	out, err := cmd.Output()
	if err != nil {
		return "(clusterctl version: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

// uploadWorkerImage uploads the image the flavour's workers boot (an image-builder image with
// kubeadm; the simulator downloads nothing) and waits until it is imported.
func (c *capiDemo) uploadWorkerImage(ctx context.Context) error {
	img := &unstructured.Unstructured{}
	img.SetGroupVersionKind(sim.VirtualMachineImageGVK)
	img.SetNamespace(testbed.HarvesterNamespace)
	img.SetName(capiImage)
	_ = unstructured.SetNestedField(img.Object, "ubuntu-2404-kube-v1.33.1.qcow2", "spec", "displayName")
	_ = unstructured.SetNestedField(img.Object, "download", "spec", "sourceType")
	_ = unstructured.SetNestedField(img.Object, "https://images.example/ubuntu-2404-kube-v1.33.1.qcow2", "spec", "url")
	hv := c.tb.Harvester.Client
	if err := hv.Create(ctx, img); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if err := hv.Get(ctx, client.ObjectKeyFromObject(img), img); err != nil {
			return err
		}
		conditions, _, _ := unstructured.NestedSlice(img.Object, "status", "conditions")
		for _, cond := range conditions {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Imported" && m["status"] == "True" {
				c.say("  image %s/%s imported (the workers' HARVESTER_IMAGE)", testbed.HarvesterNamespace, capiImage)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("image %s was not imported within a minute: %v", capiImage, conditions)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// render builds the project's clusterctl repository in the work directory as `make
// infrastructure-components` does (testbed.WriteClusterctlRepository), and has the real clusterctl
// generate the tenant cluster from the hosted flavour; the result is kept as cluster-demo.yaml.
func (c *capiDemo) render(ctx context.Context, work string) error {
	var err error
	if _, c.clusterctl, err = testbed.WriteClusterctlRepository(ctx, c.o.repoRoot, filepath.Join(work, "clusterctl"), capiProvider, capiVersion); err != nil {
		return err
	}
	args := []string{"generate", "cluster", capiCluster, "--infrastructure", capiProvider + ":" + capiVersion, "--flavor", capiFlavour,
		"--kubernetes-version", capiKubernetes, "--control-plane-machine-count", "1", "--worker-machine-count", fmt.Sprint(capiWorkers),
		"--target-namespace", testbed.Namespace, "--config", c.clusterctl}
	vars := []string{"HARVESTER_PROVIDER_CONFIG=" + capiProviderConfig, "HARVESTER_IMAGE=" + testbed.HarvesterNamespace + "/" + capiImage}
	cmd := exec.CommandContext(ctx, filepath.Join(c.assets, "clusterctl"), args...) //nolint:gosec // G204: the clusterctl hack/tools/capi.sh built, fixed arguments
	// No update check (it would ask GitHub) and no configuration but the demo's own.
	cmd.Env = append(append(os.Environ(), "CLUSTERCTL_DISABLE_VERSIONCHECK=true", "XDG_CONFIG_HOME="+filepath.Join(work, "clusterctl", "home")), vars...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("clusterctl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if bytes.Contains(out, []byte("${")) {
		return fmt.Errorf("clusterctl left a variable of the %s flavour unset", capiFlavour)
	}
	rendered := filepath.Join(work, "cluster-"+capiCluster+".yaml")
	if err := os.WriteFile(rendered, out, 0o600); err != nil {
		return err
	}
	if c.objs, err = testbed.DecodeManifests(out); err != nil {
		return err
	}
	c.say("  %s %s > %s", strings.Join(vars, " "), "clusterctl "+strings.Join(args[:len(args)-2], " "), rendered)
	return nil
}

// kindsOf names the kinds of objs in order, with counts.
func kindsOf(objs []*unstructured.Unstructured) string {
	var kinds []string
	count := map[string]int{}
	for _, o := range objs {
		if count[o.GetKind()] == 0 {
			kinds = append(kinds, o.GetKind())
		}
		count[o.GetKind()]++
	}
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		if count[k] > 1 {
			parts = append(parts, fmt.Sprintf("%d %ss", count[k], k))
		} else {
			parts = append(parts, k)
		}
	}
	return strings.Join(parts, ", ")
}

// create creates the rendered objects under strict field validation; Cluster API's webhooks
// default and validate them (see testbed.StartClusterAPI), as on any management cluster.
func (c *capiDemo) create(ctx context.Context) error {
	for _, o := range c.objs {
		if err := c.tb.Mgmt.Create(ctx, o, client.FieldValidation("Strict")); err != nil {
			return fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// machineDeployment returns the flavour's MachineDeployment.
func (c *capiDemo) machineDeployment() (*unstructured.Unstructured, error) {
	for _, o := range c.objs {
		if o.GetKind() == "MachineDeployment" {
			return o, nil
		}
	}
	return nil, fmt.Errorf("the %s flavour has no MachineDeployment", capiFlavour)
}

// scale scales the MachineDeployment to capiScaledTo and shows which VMs went.
func (c *capiDemo) scale(ctx context.Context) error {
	md, err := c.machineDeployment()
	if err != nil {
		return err
	}
	before, err := c.rows(ctx)
	if err != nil {
		return err
	}
	c.say("Scaling MachineDeployment %s to %d", md.GetName(), capiScaledTo)
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, capiScaledTo)
	if err := c.tb.Mgmt.Patch(ctx, md, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return err
	}
	began := time.Now()
	if err := c.waitMachines(ctx, capiScaledTo); err != nil {
		return err
	}
	if err := c.checkRunning(ctx, capiScaledTo); err != nil {
		return err
	}
	after, err := c.rows(ctx)
	if err != nil {
		return err
	}
	kept := map[string]bool{}
	for _, r := range after {
		kept[r.Machine] = true
	}
	var went, stayed []string
	for _, r := range before {
		if kept[r.Machine] {
			stayed = append(stayed, r.Machine)
		} else {
			went = append(went, r.Machine)
		}
	}
	if len(stayed) != capiScaledTo || len(went) != capiWorkers-capiScaledTo {
		return fmt.Errorf("scaling to %d: machines %v before, %v after: want %d of the first kept", capiScaledTo, names(before), names(after), capiScaledTo)
	}
	for _, vm := range went {
		vms, vmis, pvcs, secrets, err := c.tb.HarvesterLeftOf(ctx, vm)
		if err != nil {
			return err
		}
		if vms+vmis+pvcs+secrets != 0 {
			return fmt.Errorf("VM %s was scaled away but %d VMs, %d VMIs, %d disks and %d Secrets of it are left on Harvester", vm, vms, vmis, pvcs, secrets)
		}
	}
	c.say("Scaled to %d in %s: VMs %s went from Harvester with their disks and cloud-init Secrets; %s stays.",
		capiScaledTo, time.Since(began).Round(100*time.Millisecond), strings.Join(went, ", "), strings.Join(stayed, ", "))
	return nil
}

func names(rows []machineRow) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.Machine)
	}
	return out
}

// deleteCluster deletes the Cluster, waits until it is gone, and shows what is left on Harvester:
// it fails unless the VMs, VMIs, disks, Secrets and the guest credentials' ServiceAccount and
// bindings are all gone.
func (c *capiDemo) deleteCluster(ctx context.Context) error {
	cluster := testbed.ClusterAPIObject(testbed.ClusterGVK, testbed.Namespace, capiCluster, nil)
	c.say("Deleting Cluster %s/%s", testbed.Namespace, capiCluster)
	if err := c.tb.Mgmt.Delete(ctx, cluster); err != nil {
		return err
	}
	began := time.Now()
	gone := func(rows []machineRow) (bool, error) {
		err := c.tb.Mgmt.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)
		switch {
		case apierrors.IsNotFound(err):
			return len(rows) == 0, nil
		case err != nil:
			return false, err
		}
		return false, nil
	}
	if err := c.waitTable(ctx, gone); err != nil {
		return err
	}
	c.say("Cluster %s, its Machines, HarvesterMachines and HarvesterCluster deleted in %s.", capiCluster, time.Since(began).Round(100*time.Millisecond))
	var left harvesterLeft
	for deadline := time.Now().Add(c.o.timeout); ; {
		var err error
		if left, err = c.harvesterLeft(ctx); err != nil {
			return err
		}
		if left.total() == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	images, err := c.tb.HarvesterImages(ctx)
	if err != nil {
		return err
	}
	c.say("Harvester namespace %q now holds: %s; images %s.", testbed.HarvesterNamespace, left, strings.Join(images, ", "))
	if n := left.total(); n != 0 {
		return fmt.Errorf("%d objects left on Harvester after the Cluster's deletion", n)
	}
	return nil
}

// harvesterLeft is what is left on Harvester of the tenant cluster.
type harvesterLeft struct {
	vms, vmis, pvcs, secrets, serviceAccounts, roleBindings, clusterRoleBindings int
}

func (l harvesterLeft) total() int {
	return l.vms + l.vmis + l.pvcs + l.secrets + l.serviceAccounts + l.roleBindings + l.clusterRoleBindings
}

func (l harvesterLeft) String() string {
	return fmt.Sprintf("%d VirtualMachines, %d VirtualMachineInstances, %d PersistentVolumeClaims, %d Secrets; guest credentials: %d ServiceAccounts, %d RoleBindings, %d ClusterRoleBindings",
		l.vms, l.vmis, l.pvcs, l.secrets, l.serviceAccounts, l.roleBindings, l.clusterRoleBindings)
}

func (c *capiDemo) harvesterLeft(ctx context.Context) (harvesterLeft, error) {
	var l harvesterLeft
	var err error
	if l.vms, l.vmis, l.pvcs, l.secrets, err = c.tb.HarvesterLeft(ctx); err != nil {
		return l, err
	}
	// The guest credentials' identity: labelled with this provider's owner kind HarvesterCluster,
	// in any namespace (the ServiceAccount and RoleBinding live in harvester.namespace).
	sel := client.MatchingLabels{harvester.LabelOwnerKind: "HarvesterCluster"}
	sas, rbs, crbs := &corev1.ServiceAccountList{}, &rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleBindingList{}
	for _, list := range []client.ObjectList{sas, rbs, crbs} {
		if err := c.tb.Harvester.Client.List(ctx, list, sel); err != nil {
			return l, err
		}
	}
	l.serviceAccounts, l.roleBindings, l.clusterRoleBindings = len(sas.Items), len(rbs.Items), len(crbs.Items)
	return l, nil
}

// guestIdentity names the guest credentials' ServiceAccount and bindings on Harvester.
func (c *capiDemo) guestIdentity(ctx context.Context) (string, error) {
	sel := client.MatchingLabels{harvester.LabelOwnerKind: "HarvesterCluster"}
	sas, rbs, crbs := &corev1.ServiceAccountList{}, &rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleBindingList{}
	for _, list := range []client.ObjectList{sas, rbs, crbs} {
		if err := c.tb.Harvester.Client.List(ctx, list, sel); err != nil {
			return "", err
		}
	}
	var out []string
	for _, sa := range sas.Items {
		out = append(out, "ServiceAccount "+sa.Namespace+"/"+sa.Name)
	}
	for _, rb := range rbs.Items {
		out = append(out, "RoleBinding "+rb.Namespace+"/"+rb.Name+" (to "+rb.RoleRef.Kind+" "+rb.RoleRef.Name+")")
	}
	for _, crb := range crbs.Items {
		out = append(out, "ClusterRoleBinding "+crb.Name+" (to "+crb.RoleRef.Kind+" "+crb.RoleRef.Name+")")
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "none", nil
	}
	return strings.Join(out, ", "), nil
}

// waitClusterAvailable waits until Cluster API counts the Cluster Available (its infrastructure
// ready, its control plane available, its workers available: their Nodes healthy; the tenant API
// server answering Cluster API's probe) and Cluster API's ClusterResourceSet controller has applied
// the flavour's ClusterResourceSet in the tenant cluster.
func (c *capiDemo) waitClusterAvailable(ctx context.Context) error {
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(testbed.ClusterGVK)
	for deadline := time.Now().Add(c.o.timeout); ; {
		if err := c.tb.Mgmt.Get(ctx, client.ObjectKey{Namespace: testbed.Namespace, Name: capiCluster}, cluster); err != nil {
			return err
		}
		crs, err := c.clusterResourceSet(ctx)
		if err != nil {
			return err
		}
		if conditionStatus(cluster, "Available") == "True" && conditionStatus(crs, "ResourcesApplied") == "True" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the Cluster %s is not Available after %s (%s), or its ClusterResourceSet not applied (%s)", capiCluster, c.o.timeout,
				conditionText(cluster, "Available"), conditionText(crs, "ResourcesApplied"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// showCluster prints the Cluster's side: its phase and endpoint, the HarvesterCluster, the played
// control plane, and the guest credentials' way into the tenant cluster (names only).
func (c *capiDemo) showCluster(ctx context.Context) error {
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(testbed.ClusterGVK)
	if err := c.tb.Mgmt.Get(ctx, client.ObjectKey{Namespace: testbed.Namespace, Name: capiCluster}, cluster); err != nil {
		return err
	}
	phase, _, _ := unstructured.NestedString(cluster.Object, "status", "phase")
	host, _, _ := unstructured.NestedString(cluster.Object, "spec", "controlPlaneEndpoint", "host")
	port, _, _ := unstructured.NestedInt64(cluster.Object, "spec", "controlPlaneEndpoint", "port")
	infra, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "infrastructureProvisioned")
	cp, _, _ := unstructured.NestedBool(cluster.Object, "status", "initialization", "controlPlaneInitialized")
	c.say("Cluster %s: %s, phase %s, endpoint %s:%d (the tenant API server), infrastructureProvisioned %v (HarvesterCluster), controlPlaneInitialized %v (StewardControlPlane, played)",
		capiCluster, conditionText(cluster, "Available"), phase, host, port, infra, cp)
	crs, err := c.clusterResourceSet(ctx)
	if err != nil {
		return err
	}
	applied, err := c.appliedInTenant(ctx)
	if err != nil {
		return err
	}
	c.say("ClusterResourceSet %s: %s, applied by Cluster API core in the tenant cluster: %s (their pods do not run here: Harvester's cloud provider is played)",
		crs.GetName(), conditionText(crs, "ResourcesApplied"), applied)
	identity, err := c.guestIdentity(ctx)
	if err != nil {
		return err
	}
	c.say("Guest credentials: on Harvester %s; delivered in Secret %s/%s%s for the tenant's Secret %s/%s: the Nodes' providerIDs come from them.",
		identity, testbed.Namespace, capiCluster, testbed.CloudConfigSecretSuffix, testbed.TenantCloudConfigNamespace, testbed.TenantCloudConfigName)
	return nil
}

// appliedInTenant names what the tenant cluster's kube-system holds of the ClusterResourceSet's
// resources: the credentials Secret, the cloud provider's and CSI driver's workloads.
func (c *capiDemo) appliedInTenant(ctx context.Context) (string, error) {
	var found []string
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testbed.TenantCloudConfigNamespace, Name: testbed.TenantCloudConfigName}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "harvester-cloud-provider"}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "harvester-csi-driver"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "harvester-csi-driver-controllers"}},
	} {
		switch err := c.tenant.Client.Get(ctx, client.ObjectKeyFromObject(o), o); {
		case err == nil:
			kind := strings.TrimPrefix(fmt.Sprintf("%T", o), "*v1.")
			found = append(found, kind+" "+o.GetNamespace()+"/"+o.GetName())
		case client.IgnoreNotFound(err) != nil:
			return "", err
		}
	}
	if len(found) == 0 {
		return "nothing", nil
	}
	return strings.Join(found, ", "), nil
}

// explain prints how to explore both sides with --keep.
func (c *capiDemo) explain() {
	mk, hk, tk := c.tb.Path("management.kubeconfig"), c.tb.Path("harvester.kubeconfig"), c.tb.Path("tenant.kubeconfig")
	fmt.Fprintf(c.out, `
Everything keeps running (Ctrl-C stops it).
  management cluster:  %[1]s
  simulated Harvester: %[2]s
  tenant cluster:      %[3]s
  manager log:         %[4]s
  Cluster API log:     %[5]s
  rendered flavour:    %[6]s
Explore with kubectl (no kubectl at hand? 'make kubectl' builds one and prints its path) and clusterctl:
  CLUSTERCTL_DISABLE_VERSIONCHECK=true %[7]s describe cluster %[8]s -n %[9]s --kubeconfig %[1]s
  kubectl --kubeconfig %[1]s -n %[9]s get cluster,machinedeployment,machine,harvestercluster,harvestermachine,kubeadmconfig,stewardcontrolplane
  kubectl --kubeconfig %[2]s -n %[10]s get virtualmachines,virtualmachineinstances,pvc,serviceaccounts,rolebindings
  kubectl --kubeconfig %[3]s get nodes -o wide
  kubectl --kubeconfig %[1]s -n %[9]s scale machinedeployment %[8]s-md-0 --replicas=5   # and watch VMs and Nodes come
  kubectl --kubeconfig %[1]s -n %[9]s delete cluster %[8]s                              # and watch Harvester empty
`, mk, hk, tk, c.tb.Path("manager.log"), c.tb.ClusterAPI.LogPath, c.tb.Path("cluster-"+capiCluster+".yaml"),
		filepath.Join(c.assets, "clusterctl"), capiCluster, testbed.Namespace, testbed.HarvesterNamespace)
}

// clusterResourceSet reads the flavour's ClusterResourceSet.
func (c *capiDemo) clusterResourceSet(ctx context.Context) (*unstructured.Unstructured, error) {
	for _, o := range c.objs {
		if o.GetKind() == "ClusterResourceSet" {
			crs := &unstructured.Unstructured{}
			crs.SetGroupVersionKind(o.GroupVersionKind())
			return crs, c.tb.Mgmt.Get(ctx, client.ObjectKeyFromObject(o), crs)
		}
	}
	return nil, fmt.Errorf("the %s flavour has no ClusterResourceSet", capiFlavour)
}

// conditionStatus is the status of condition t of a Cluster API object ("" if it has none).
func conditionStatus(o *unstructured.Unstructured, t string) string {
	conditions, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, cond := range conditions {
		if m, _ := cond.(map[string]any); m["type"] == t {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// conditionText renders condition t of a Cluster API object as "t=Status (Reason)".
func conditionText(o *unstructured.Unstructured, t string) string {
	conditions, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, cond := range conditions {
		if m, _ := cond.(map[string]any); m["type"] == t {
			return fmt.Sprintf("%s=%v (%v)", t, m["status"], m["reason"])
		}
	}
	return t + "=?"
}

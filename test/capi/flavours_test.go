package capi

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The credentials contract between this provider and the flavours' ClusterResourceSets: the
// provider writes, in the Cluster's namespace, Secret <cluster>-harvester-cloud-config (type
// addons.cluster.x-k8s.io/resource-set), whose key cloud-config.yaml holds the tenant cluster's
// Secret kube-system/cloud-config with key cloud-config (a kubeconfig for Harvester).
const (
	cloudConfigSecretSuffix = "-harvester-cloud-config"
	tenantCloudConfig       = "cloud-config"
)

// stewardCRDs is the directory of the StewardControlPlane CRD of Steward's release.
func stewardCRDs() string { return filepath.Join(repoRoot(), "test", "testdata", "steward", "crd") }

// checkAddons checks a flavour's ClusterResourceSet and what it applies in the tenant cluster:
// strategy Reconcile; it selects the flavour's Cluster by a label that Cluster carries, and no
// other Cluster; it lists the credentials Secret of the contract first, then every ConfigMap of the
// flavour; the manifests in those ConfigMaps are accepted by the API server under strict field
// validation, live in kube-system, and pin every image by version; Harvester's cloud provider
// mounts the Secret cloud-config at /etc/kubernetes and reads /etc/kubernetes/cloud-config,
// tolerating the taints a new Node has (uninitialized, and control-plane on kubeadm's and Talos's
// control plane nodes); the CSI plugin mounts it at /etc/csi and reads /etc/csi/cloud-config.
func checkAddons(ctx context.Context, t *testing.T, c client.Client, flavour string, objs []*unstructured.Unstructured) {
	t.Helper()
	cluster := only(t, flavour, objs, "Cluster")
	crs := only(t, flavour, objs, "ClusterResourceSet")
	if crs.GetAPIVersion() != "addons.cluster.x-k8s.io/v1beta2" || crs.GetNamespace() != cluster.GetNamespace() {
		t.Errorf("%s: ClusterResourceSet %s is %s in namespace %q, want addons.cluster.x-k8s.io/v1beta2 in the Cluster's (%q)", flavour, crs.GetName(), crs.GetAPIVersion(), crs.GetNamespace(), cluster.GetNamespace())
	}
	if strategy, _, _ := unstructured.NestedString(crs.Object, "spec", "strategy"); strategy != "Reconcile" {
		t.Errorf("%s: ClusterResourceSet strategy %q, want Reconcile", flavour, strategy)
	}
	sel := metav1.LabelSelector{}
	selMap, _, _ := unstructured.NestedMap(crs.Object, "spec", "clusterSelector")
	convert(t, &unstructured.Unstructured{Object: selMap}, &sel)
	selector, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil || selector.Empty() {
		t.Fatalf("%s: ClusterResourceSet selector %v: %v (an empty selector would take every Cluster of the namespace)", flavour, selMap, err)
	}
	if !selector.Matches(labels.Set(cluster.GetLabels())) {
		t.Errorf("%s: ClusterResourceSet selector %s does not select the flavour's Cluster (labels %v)", flavour, selector, cluster.GetLabels())
	}
	other := map[string]string{}
	for k := range cluster.GetLabels() {
		other[k] = "another-cluster"
	}
	if selector.Matches(labels.Set(other)) {
		t.Errorf("%s: ClusterResourceSet selector %s also selects another Cluster of the namespace (labels %v): it would get this cluster's credentials", flavour, selector, other)
	}

	var resources []struct{ Kind, Name string }
	list, _, _ := unstructured.NestedSlice(crs.Object, "spec", "resources")
	for _, r := range list {
		m, _ := r.(map[string]any)
		kind, _ := m["kind"].(string)
		name, _ := m["name"].(string)
		resources = append(resources, struct{ Kind, Name string }{kind, name})
	}
	if len(resources) == 0 || resources[0].Kind != "Secret" || resources[0].Name != cluster.GetName()+cloudConfigSecretSuffix {
		t.Errorf("%s: ClusterResourceSet resources %v, want Secret %s%s first (the credentials the provider writes)", flavour, resources, cluster.GetName(), cloudConfigSecretSuffix)
	}
	// Every ConfigMap of the flavour is listed, but for the cloud provider's variants
	// (<cluster>-harvester-cloud-provider-<HARVESTER_LOAD_BALANCERS>), of which it lists one.
	var configMaps []string
	variants := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			if strings.HasPrefix(o.GetName(), cluster.GetName()+cloudProviderVariant) {
				variants[o.GetName()] = true
			} else {
				configMaps = append(configMaps, o.GetName())
			}
			if o.GetNamespace() != crs.GetNamespace() {
				t.Errorf("%s: ConfigMap %s in namespace %q, want the ClusterResourceSet's %q", flavour, o.GetName(), o.GetNamespace(), crs.GetNamespace())
			}
		}
	}
	var listed []string
	chosen := 0
	for _, r := range resources[min(1, len(resources)):] {
		if r.Kind != "ConfigMap" {
			t.Errorf("%s: ClusterResourceSet lists %s %s: only the credentials Secret and the flavour's ConfigMaps belong there", flavour, r.Kind, r.Name)
		}
		if variants[r.Name] {
			chosen++
			continue
		}
		listed = append(listed, r.Name)
	}
	if slices.Sort(listed); !slices.Equal(listed, slices.Sorted(slices.Values(configMaps))) || chosen != 1 {
		t.Errorf("%s: ClusterResourceSet lists ConfigMaps %v and %d of the cloud provider's variants %v, want %v and one variant", flavour, listed, chosen, slices.Sorted(maps.Keys(variants)), configMaps)
	}

	tenant := addonObjects(t, flavour, objs)
	var ccms []*corev1.PodSpec
	var csi *corev1.PodSpec
	for _, o := range tenant {
		if o.GetNamespace() != "" && o.GetNamespace() != "kube-system" {
			t.Errorf("%s: the tenant cluster's %s %s is in namespace %q, want kube-system (where the Secret cloud-config is)", flavour, o.GetKind(), o.GetName(), o.GetNamespace())
		}
		if err := c.Create(ctx, o, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			t.Errorf("%s: the API server refuses the tenant cluster's %s %s: %v", flavour, o.GetKind(), o.GetName(), err)
		}
		var spec *corev1.PodSpec
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			convert(t, o, d)
			spec = &d.Spec.Template.Spec
		case "DaemonSet":
			d := &appsv1.DaemonSet{}
			convert(t, o, d)
			spec = &d.Spec.Template.Spec
		default:
			continue
		}
		for _, ct := range spec.Containers {
			if !pinnedImage.MatchString(ct.Image) {
				t.Errorf("%s: %s %s runs image %q: not pinned by version", flavour, o.GetKind(), o.GetName(), ct.Image)
			}
			if slices.Contains(ct.Command, "harvester-cloud-provider") {
				ccms = append(ccms, spec)
			}
			if strings.Contains(ct.Image, "/harvester-csi-driver:") {
				csi = spec
			}
		}
	}
	if len(ccms) != len(variants) || csi == nil {
		t.Fatalf("%s: the ConfigMaps hold %d Harvester cloud providers for %d variants, and a CSI plugin: %v", flavour, len(ccms), len(variants), csi != nil)
	}
	requireCloudConfig(t, flavour+": the Harvester CSI plugin", csi, "/etc/csi", "--kubeconfig=/etc/csi/cloud-config")
	for _, ccm := range ccms {
		requireCloudConfig(t, flavour+": Harvester's cloud provider", ccm, "/etc/kubernetes", "--cloud-config=/etc/kubernetes/cloud-config")
		for _, taint := range []corev1.Taint{
			{Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule},
			{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule},
		} {
			if !slices.ContainsFunc(ccm.Tolerations, func(tol corev1.Toleration) bool { return tol.ToleratesTaint(klog.Background(), &taint, false) }) {
				t.Errorf("%s: Harvester's cloud provider does not tolerate taint %s=%s:%s (tolerations %+v)", flavour, taint.Key, taint.Value, taint.Effect, ccm.Tolerations)
			}
		}
	}
}

// expandedArgs are a container's args as the kubelet gives them: $(NAME) replaced by the
// container's environment variable NAME (left as it is when there is none).
func expandedArgs(c corev1.Container) []string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	var out []string
	for _, a := range c.Args {
		out = append(out, envReference.ReplaceAllStringFunc(a, func(ref string) string {
			if v, ok := env[ref[2:len(ref)-1]]; ok {
				return v
			}
			return ref
		}))
	}
	return out
}

// envReference is a reference to an environment variable in a container's args.
var envReference = regexp.MustCompile(`\$\([A-Za-z_][A-Za-z0-9_]*\)`)

// cloudProviderVariant begins the names of the cloud provider's ConfigMaps after the cluster's:
// one per value of HARVESTER_LOAD_BALANCERS.
const cloudProviderVariant = "-harvester-cloud-provider-"

// checkLoadBalancers checks what HARVESTER_LOAD_BALANCERS chooses in a flavour generated with
// mode: off lists the variant whose cloud provider runs without its load balancer controller
// (--controllers=*,-service-lb-controller) and nothing that announces addresses; kube-vip lists
// the variant with the controller on and kube-vip's DaemonSet announcing Services, on every Node
// (no node affinity: a hosted control plane has no control plane Nodes), its metrics off the
// kubeadm flavour's control plane kube-vip's port. Both pass the cluster's address variables to the
// cloud provider: want are the flags expected.
func checkLoadBalancers(t *testing.T, flavour, mode string, objs []*unstructured.Unstructured, want ...string) {
	t.Helper()
	cluster := only(t, flavour, objs, "Cluster")
	crs := only(t, flavour, objs, "ClusterResourceSet")
	list, _, _ := unstructured.NestedSlice(crs.Object, "spec", "resources")
	chosen := cluster.GetName() + cloudProviderVariant + mode
	if !slices.ContainsFunc(list, func(r any) bool { m, _ := r.(map[string]any); return m["name"] == chosen }) {
		t.Fatalf("%s with HARVESTER_LOAD_BALANCERS=%s: the ClusterResourceSet lists %v, not ConfigMap %s", flavour, mode, list, chosen)
	}
	var applied []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == chosen {
			applied = addonObjects(t, flavour, []*unstructured.Unstructured{o})
		}
	}
	var args []string
	var announcer *appsv1.DaemonSet
	for _, o := range applied {
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			convert(t, o, d)
			args = expandedArgs(d.Spec.Template.Spec.Containers[0])
		case "DaemonSet":
			announcer = &appsv1.DaemonSet{}
			convert(t, o, announcer)
		}
	}
	for _, flag := range want {
		if !slices.Contains(args, flag) {
			t.Errorf("%s with HARVESTER_LOAD_BALANCERS=%s: the cloud provider's args %v lack %s", flavour, mode, args, flag)
		}
	}
	lbOff := slices.Contains(args, "--controllers=*,-service-lb-controller")
	switch mode {
	case "off":
		if !lbOff || announcer != nil {
			t.Errorf("%s with HARVESTER_LOAD_BALANCERS=off: cloud provider args %v (want its load balancer controller off), an announcer %v (want none)", flavour, args, announcer != nil)
		}
	case "kube-vip":
		if lbOff || announcer == nil {
			t.Fatalf("%s with HARVESTER_LOAD_BALANCERS=kube-vip: cloud provider args %v (want its load balancer controller on), an announcer %v (want kube-vip's DaemonSet)", flavour, args, announcer != nil)
		}
		env := map[string]string{}
		for _, e := range announcer.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if env["svc_enable"] != "true" || env["svc_election"] != "true" || env["cp_enable"] != "false" || env["prometheus_server"] == ":2112" || env["prometheus_server"] == "" {
			t.Errorf("%s: kube-vip's env %v: want Services announced with an election per Service, no control plane VIP, metrics off :2112", flavour, env)
		}
		if announcer.Spec.Template.Spec.Affinity != nil || !announcer.Spec.Template.Spec.HostNetwork {
			t.Errorf("%s: kube-vip's DaemonSet has affinity %+v and hostNetwork %v: want every Node's host network", flavour, announcer.Spec.Template.Spec.Affinity, announcer.Spec.Template.Spec.HostNetwork)
		}
	}
}

// pinnedImage is an image reference with a version tag (vX.Y...), not latest or a branch head.
var pinnedImage = regexp.MustCompile(`^[a-z0-9./-]+:v[0-9]+\.[0-9]+[0-9A-Za-z.+-]*$`)

// requireCloudConfig checks that a pod spec mounts the tenant cluster's Secret cloud-config (whole,
// so that a renewed kubeconfig reaches the running pod) at dir, and that the container that mounts
// it is given arg.
func requireCloudConfig(t *testing.T, what string, spec *corev1.PodSpec, dir, arg string) {
	t.Helper()
	volume := ""
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == tenantCloudConfig && len(v.Secret.Items) == 0 {
			volume = v.Name
		}
	}
	for _, ct := range spec.Containers {
		for _, m := range ct.VolumeMounts {
			if m.Name == volume && volume != "" && m.MountPath == dir && m.SubPath == "" {
				if !slices.Contains(ct.Args, arg) {
					t.Errorf("%s: container %s mounts Secret %s at %s but has args %v, want %s", what, ct.Name, tenantCloudConfig, dir, ct.Args, arg)
				}
				return
			}
		}
	}
	t.Errorf("%s does not mount Secret %s (all its keys) at %s (volumes %+v)", what, tenantCloudConfig, dir, spec.Volumes)
}

// addonObjects decodes the manifests of a flavour's ConfigMaps: what the ClusterResourceSet applies.
func addonObjects(t *testing.T, flavour string, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		for key, manifests := range data {
			decoded, err := testbed.DecodeManifests([]byte(manifests))
			if err != nil || len(decoded) == 0 {
				t.Fatalf("%s: ConfigMap %s key %s holds no manifests: %v", flavour, o.GetName(), key, err)
			}
			out = append(out, decoded...)
		}
	}
	return out
}

// requireSameAddons checks that every flavour installs the very same manifests (the templates
// carry copies: a clusterctl template is one file).
func requireSameAddons(t *testing.T, flavours map[string][]*unstructured.Unstructured) {
	t.Helper()
	data := func(objs []*unstructured.Unstructured) map[string]any {
		out := map[string]any{}
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" {
				out[o.GetName()] = o.Object["data"]
			}
		}
		return out
	}
	want := data(flavours[""])
	for flavour, objs := range flavours {
		if got := data(objs); !reflect.DeepEqual(got, want) {
			t.Errorf("the %s's ConfigMaps differ from the kubeadm flavour's: keep the copies in templates/ the same", flavourName(flavour))
		}
	}
}

// checkTalosVIP checks that the talos flavour puts the API on Talos's own VIP: the control plane
// configuration's machine.network.interfaces[].vip.ip is CONTROL_PLANE_ENDPOINT_IP, as is the
// HarvesterCluster's endpoint.
func checkTalosVIP(t *testing.T, flavour string, objs []*unstructured.Unstructured) {
	t.Helper()
	tcp := only(t, flavour, objs, "TalosControlPlane")
	hc := only(t, flavour, objs, "HarvesterCluster")
	endpoint, _, _ := unstructured.NestedString(hc.Object, "spec", "controlPlaneEndpoint", "host")
	patches, _, _ := unstructured.NestedStringSlice(tcp.Object, "spec", "controlPlaneConfig", "controlplane", "strategicPatches")
	for _, p := range patches {
		var patch struct {
			Machine struct {
				Network struct {
					Interfaces []struct {
						VIP *struct {
							IP string `json:"ip"`
						} `json:"vip"`
					} `json:"interfaces"`
				} `json:"network"`
			} `json:"machine"`
		}
		if err := yaml.Unmarshal([]byte(p), &patch); err != nil {
			t.Fatalf("%s: a control plane patch does not parse: %v\n%s", flavour, err, p)
		}
		for _, iface := range patch.Machine.Network.Interfaces {
			if iface.VIP != nil && iface.VIP.IP == endpoint && endpoint != "" {
				return
			}
		}
	}
	t.Errorf("%s: no control plane patch sets machine.network.interfaces[].vip.ip to the endpoint %q:\n%s", flavour, endpoint, strings.Join(patches, "\n"))
}

// checkStaticFlavour checks the talos-static flavour: every machine template addresses its one
// NIC, on HARVESTER_NETWORK, from the pool HARVESTER_IP_POOL names (an InClusterIPPool by
// default) with HARVESTER_NAMESERVER; and Talos's configuration, of the control plane and the
// workers, runs no DHCP on any NIC it configures.
func checkStaticFlavour(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	want := infrav1.NetworkInterface{Network: "vms/vlan40", Nameservers: []string{"10.40.0.2"},
		AddressesFromPools: []infrav1.IPPoolReference{{APIGroup: "ipam.cluster.x-k8s.io", Kind: "InClusterIPPool", Name: "vlan40-static"}}}
	templates := 0
	for _, o := range objs {
		switch o.GetKind() {
		case "HarvesterMachineTemplate":
			templates++
			hmt := &infrav1.HarvesterMachineTemplate{}
			convert(t, o, hmt)
			if got := hmt.Spec.Template.Spec.Interfaces; len(got) != 1 || !reflect.DeepEqual(got[0], want) {
				t.Errorf("talos-static flavour: HarvesterMachineTemplate %s has interfaces %+v, want %+v", o.GetName(), got, want)
			}
		case "TalosControlPlane", "TalosConfigTemplate":
			path := []string{"spec", "template", "spec", "strategicPatches"}
			if o.GetKind() == "TalosControlPlane" {
				path = []string{"spec", "controlPlaneConfig", "controlplane", "strategicPatches"}
			}
			patches, _, _ := unstructured.NestedStringSlice(o.Object, path...)
			configured := 0
			for _, p := range patches {
				var patch struct {
					Machine struct {
						Network struct {
							Interfaces []struct {
								DHCP *bool `json:"dhcp"`
							} `json:"interfaces"`
						} `json:"network"`
					} `json:"machine"`
				}
				if err := yaml.Unmarshal([]byte(p), &patch); err != nil {
					t.Fatalf("talos-static flavour: a %s patch does not parse: %v", o.GetKind(), err)
				}
				for _, iface := range patch.Machine.Network.Interfaces {
					configured++
					if iface.DHCP == nil || *iface.DHCP {
						t.Errorf("talos-static flavour: %s %s configures an interface with dhcp %v, want false", o.GetKind(), o.GetName(), iface.DHCP)
					}
				}
			}
			if configured == 0 {
				t.Errorf("talos-static flavour: %s %s configures no interface: Talos would run DHCP", o.GetKind(), o.GetName())
			}
		}
	}
	if templates != 2 {
		t.Errorf("talos-static flavour: %d HarvesterMachineTemplates, want 2", templates)
	}
}

// checkHostedFlavour checks the hosted flavour's shape: the Cluster's control plane is a
// StewardControlPlane of the StewardControlPlane CRD's group, its HarvesterCluster has no
// endpoint (Steward sets it), and only workers are HarvesterMachines.
func checkHostedFlavour(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	cluster := only(t, "hosted flavour", objs, "Cluster")
	ref, _, _ := unstructured.NestedStringMap(cluster.Object, "spec", "controlPlaneRef")
	scp := only(t, "hosted flavour", objs, "StewardControlPlane")
	if ref["apiGroup"] != "controlplane.cluster.x-k8s.io" || ref["kind"] != "StewardControlPlane" || ref["name"] != scp.GetName() {
		t.Errorf("hosted flavour: the Cluster's controlPlaneRef is %v, want the StewardControlPlane %s", ref, scp.GetName())
	}
	if scp.GetAPIVersion() != "controlplane.cluster.x-k8s.io/v1alpha1" {
		t.Errorf("hosted flavour: StewardControlPlane is %s, want controlplane.cluster.x-k8s.io/v1alpha1", scp.GetAPIVersion())
	}
	hc := only(t, "hosted flavour", objs, "HarvesterCluster")
	if _, found, _ := unstructured.NestedFieldNoCopy(hc.Object, "spec", "controlPlaneEndpoint"); found {
		t.Errorf("hosted flavour: the HarvesterCluster sets spec.controlPlaneEndpoint: Steward sets it, once")
	}
	for _, o := range objs {
		if o.GetKind() == "HarvesterMachineTemplate" && strings.Contains(o.GetName(), "control-plane") {
			t.Errorf("hosted flavour: HarvesterMachineTemplate %s: the control plane is hosted, not on VMs", o.GetName())
		}
	}
}

// only returns the one object of kind in objs.
func only(t *testing.T, what string, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s has %d %s, want 1", what, len(found), kind)
	}
	return found[0]
}

// TestClusterAPIKubeadmFlavourKubeVIPUsesSuperAdminDuringInit runs the kubeadm flavour's
// preKubeadmCommands and postKubeadmCommands, as rendered by clusterctl, with sh on a copy of the
// kube-vip manifest the flavour writes, once as Cluster API's kubeadm bootstrap prepares the
// `kubeadm init` node (it writes /run/kubeadm/kubeadm.yaml) and once as it prepares a joining
// node (/run/kubeadm/kubeadm-join-config.yaml instead): on the init node kube-vip's kubeconfig
// hostPath is super-admin.conf while kubeadm runs and admin.conf again after it (the manifest
// exactly as written); a joining node keeps admin.conf throughout. The path inside the container
// stays /etc/kubernetes/admin.conf (where kube-vip reads it), and the Pod makes the name
// kubernetes, which kube-vip dials, the local API server.
func TestClusterAPIKubeadmFlavourKubeVIPUsesSuperAdminDuringInit(t *testing.T) {
	assets := requireAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, config := clusterctlRepository(ctx, t)
	kcp := only(t, "kubeadm flavour", generateFlavour(ctx, t, assets, config, ""), "KubeadmControlPlane")
	pre, _, _ := unstructured.NestedStringSlice(kcp.Object, "spec", "kubeadmConfigSpec", "preKubeadmCommands")
	post, _, _ := unstructured.NestedStringSlice(kcp.Object, "spec", "kubeadmConfigSpec", "postKubeadmCommands")
	files, _, _ := unstructured.NestedSlice(kcp.Object, "spec", "kubeadmConfigSpec", "files")
	manifest := ""
	for _, f := range files {
		if m, _ := f.(map[string]any); m["path"] == "/etc/kubernetes/manifests/kube-vip.yaml" {
			manifest, _ = m["content"].(string)
		}
	}
	if manifest == "" || len(pre) == 0 || len(post) == 0 {
		t.Fatalf("the KubeadmControlPlane writes no kube-vip static pod (%d bytes) or has no pre/post kubeadm commands (%d, %d)", len(manifest), len(pre), len(post))
	}
	kubeconfig := func(content string) (hostPath, mountPath string) {
		t.Helper()
		pod := &corev1.Pod{}
		if err := yaml.UnmarshalStrict([]byte(content), pod); err != nil {
			t.Fatalf("the kube-vip manifest does not parse as a Pod: %v\n%s", err, content)
		}
		if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].HostPath == nil || len(pod.Spec.Containers) != 1 || len(pod.Spec.Containers[0].VolumeMounts) != 1 {
			t.Fatalf("the kube-vip Pod has volumes %+v and containers %+v, want one hostPath kubeconfig mounted once", pod.Spec.Volumes, pod.Spec.Containers)
		}
		if !slices.ContainsFunc(pod.Spec.HostAliases, func(a corev1.HostAlias) bool {
			return a.IP == "127.0.0.1" && slices.Contains(a.Hostnames, "kubernetes")
		}) {
			t.Errorf("the kube-vip Pod has host aliases %+v: kube-vip dials kubernetes:6443, which must be the local API server (127.0.0.1)", pod.Spec.HostAliases)
		}
		if !pinnedImage.MatchString(pod.Spec.Containers[0].Image) {
			t.Errorf("kube-vip image %q is not pinned by version", pod.Spec.Containers[0].Image)
		}
		return pod.Spec.Volumes[0].HostPath.Path, pod.Spec.Containers[0].VolumeMounts[0].MountPath
	}
	if host, mount := kubeconfig(manifest); host != "/etc/kubernetes/admin.conf" || mount != "/etc/kubernetes/admin.conf" {
		t.Fatalf("the kube-vip manifest as written mounts %s at %s, want /etc/kubernetes/admin.conf at /etc/kubernetes/admin.conf", host, mount)
	}

	for _, node := range []struct {
		name, kubeadmFile, duringKubeadm string
	}{
		{"the kubeadm init node", "/run/kubeadm/kubeadm.yaml", "/etc/kubernetes/super-admin.conf"},
		{"a joining node", "/run/kubeadm/kubeadm-join-config.yaml", "/etc/kubernetes/admin.conf"},
	} {
		root := t.TempDir()
		// The commands name absolute paths; they run against a copy of them under root.
		local := strings.NewReplacer("/run/kubeadm/", filepath.Join(root, "run", "kubeadm")+"/",
			"/etc/kubernetes/manifests/", filepath.Join(root, "manifests")+"/")
		for _, dir := range []string{"run/kubeadm", "manifests"} {
			if err := os.MkdirAll(filepath.Join(root, dir), 0o750); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, local.Replace(node.kubeadmFile), []byte("kind: whatever\n"))
		path := filepath.Join(root, "manifests", "kube-vip.yaml")
		writeFile(t, path, []byte(manifest))
		run := func(commands []string) string {
			t.Helper()
			for _, command := range commands {
				if out, err := exec.CommandContext(ctx, "sh", "-c", local.Replace(command)).CombinedOutput(); err != nil {
					t.Fatalf("%s: %q: %v\n%s", node.name, command, err, out)
				}
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			return string(data)
		}
		if host, mount := kubeconfig(run(pre)); host != node.duringKubeadm || mount != "/etc/kubernetes/admin.conf" {
			t.Errorf("%s: while kubeadm runs kube-vip mounts %s at %s, want %s at /etc/kubernetes/admin.conf", node.name, host, mount, node.duringKubeadm)
		}
		if after := run(post); after != manifest {
			t.Errorf("%s: after kubeadm the kube-vip manifest is not as written (admin.conf):\n%s", node.name, after)
		}
	}
}

var clusterResourceSetGVK = schema.GroupVersionKind{Group: "addons.cluster.x-k8s.io", Version: "v1beta2", Kind: "ClusterResourceSet"}

// TestClusterAPIClusterResourceSetInstallsHarvesterAddons has the real Cluster API core manager's
// ClusterResourceSet controller apply the kubeadm flavour's ClusterResourceSet and ConfigMaps (as
// clusterctl renders them) to a tenant cluster: a second API server that Cluster API reaches by
// the Cluster's kubeconfig Secret, where the test plays the kubelets. The Cluster carries the
// flavour's label; its control plane Machine runs on the simulated Harvester, so Cluster API
// counts the control plane initialized. The cloud provider is applied before the credentials
// exist; then the credentials Secret is written as the contract says the provider writes it
// (<cluster>-harvester-cloud-config, type addons.cluster.x-k8s.io/resource-set, key
// cloud-config.yaml holding the tenant's Secret kube-system/cloud-config). The tenant cluster then
// has that Secret with its kubeconfig, Harvester's cloud provider and CSI driver (created by
// the API server, not dry-run) and the ClusterResourceSet reports ResourcesApplied; by default the
// cloud provider's load balancer controller is off and no kube-vip announces Services; a renewed
// kubeconfig reaches the tenant's Secret (strategy Reconcile).
func TestClusterAPIClusterResourceSetInstallsHarvesterAddons(t *testing.T) {
	assets := requireAssets(t)
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	tenantAPI, err := testbed.StartTenant(ctx, c, ns, tenant.Name)
	t.Cleanup(func() { _ = tenantAPI.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	kubelets, err := testbed.PlayKubelets(ctx, hv.Config, "vms", tenantAPI)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelets.Stop)

	_, config := clusterctlRepository(ctx, t)
	flavour := generateFlavour(ctx, t, assets, config, "")
	// The provider makes no credentials here (spec.guestCredentials None): the test writes the
	// delivered Secret itself, to see Cluster API apply the rest before it exists and a renewed
	// one after. TestClusterAPIGuestCredentials covers the provider's own Secret.
	unmanaged := tenant
	unmanaged.GuestCredentials = infrav1.GuestCredentialsNone
	w.must(testbed.CreateAll(ctx, c, unmanaged.ClusterObjects()...))
	cluster := unmanaged.Cluster()
	label, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": only(t, "kubeadm flavour", flavour, "Cluster").GetLabels()}})
	w.must(err)
	w.must(c.Patch(ctx, cluster, client.RawPatch(types.MergePatchType, label)))

	credentials := func(kubeconfig string) *corev1.Secret {
		inner, err := yaml.Marshal(&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: tenantCloudConfig},
			Data:       map[string][]byte{tenantCloudConfig: []byte(kubeconfig)}})
		w.must(err)
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name + cloudConfigSecretSuffix},
			Type: "addons.cluster.x-k8s.io/resource-set", Data: map[string][]byte{"cloud-config.yaml": inner}}
	}
	for _, o := range flavour {
		if o.GetKind() == "ClusterResourceSet" || o.GetKind() == "ConfigMap" {
			w.must(c.Create(ctx, o, client.FieldValidation("Strict")))
		}
	}
	cpInfra, cp := tenant.ControlPlaneMachine("tenant-cp-0")
	w.must(testbed.CreateAll(ctx, c, cpInfra, cp))

	// Before the provider has written the credentials: the rest is applied, the Secret is not.
	tc := tenantAPI.Client
	waitFor(ctx, t, w.capi, "the ClusterResourceSet to install the cloud provider before the credentials exist", func() error {
		return tc.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "harvester-cloud-provider"}, &appsv1.Deployment{})
	})
	if err := tc.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: tenantCloudConfig}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the tenant's Secret kube-system/%s before the provider wrote it: %v", tenantCloudConfig, err)
	}
	first := string(hv.Kubeconfig)
	w.must(c.Create(ctx, credentials(first)))
	wantSecret := func(kubeconfig string) error {
		s := &corev1.Secret{}
		if err := tc.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: tenantCloudConfig}, s); err != nil {
			return err
		}
		if string(s.Data[tenantCloudConfig]) != kubeconfig {
			return fmt.Errorf("the tenant's Secret kube-system/%s holds another kubeconfig (%d bytes)", tenantCloudConfig, len(s.Data[tenantCloudConfig]))
		}
		return nil
	}
	waitFor(ctx, t, w.capi, "the ClusterResourceSet to install the credentials, the cloud provider and the CSI driver in the tenant cluster", func() error {
		if err := wantSecret(first); err != nil {
			return err
		}
		for _, o := range []client.Object{
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "harvester-cloud-provider"}},
			&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "harvester-csi-driver"}},
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "harvester-csi-driver-controllers"}},
			&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "harvester"}},
			&storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "driver.harvesterhci.io"}},
		} {
			if err := tc.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return fmt.Errorf("%T %s: %w", o, o.GetName(), err)
			}
		}
		crs := &unstructured.Unstructured{}
		crs.SetGroupVersionKind(clusterResourceSetGVK)
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tenant.Name + "-harvester-addons"}, crs); err != nil {
			return err
		}
		conditions, _, _ := unstructured.NestedSlice(crs.Object, "status", "conditions")
		for _, cond := range conditions {
			if m, _ := cond.(map[string]any); m["type"] == "ResourcesApplied" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("ClusterResourceSet conditions %v", conditions)
	})
	// The default (HARVESTER_LOAD_BALANCERS off): the cloud provider's load balancer controller is
	// off, and nothing announces addresses.
	ccm := &appsv1.Deployment{}
	w.must(tc.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "harvester-cloud-provider"}, ccm))
	if args := ccm.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--controllers=*,-service-lb-controller") {
		t.Errorf("the tenant's cloud provider runs with args %v: want its load balancer controller off by default", args)
	}
	if err := tc.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-vip"}, &appsv1.DaemonSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("the tenant has a kube-vip DaemonSet by default (%v): want none", err)
	}

	// The provider renews the kubeconfig: strategy Reconcile applies it again.
	renewed := first + "# renewed\n"
	s := &corev1.Secret{}
	w.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tenant.Name + cloudConfigSecretSuffix}, s))
	s.Data = credentials(renewed).Data
	w.must(c.Update(ctx, s))
	waitFor(ctx, t, w.capi, "the renewed kubeconfig to reach the tenant cluster", func() error { return wantSecret(renewed) })
}

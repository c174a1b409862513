package deploy

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// nonDefaultValues sets every value of the chart to something other than its default.
const nonDefaultValues = `
image: {repository: registry.example.com/butler/provider-harvester, tag: v9.9.9, pullPolicy: Always}
imagePullSecrets: [{name: registry-creds}]
replicaCount: 3
fullnameOverride: bph
serviceAccount: {create: true, name: bph-manager, annotations: {example.com/owner: platform}}
leaderElection: {enabled: true, id: bph-leader}
metrics: {enabled: true, port: 9443, secure: true, certSecret: bph-metrics-tls, enableHTTP2: true}
healthProbe: {port: 9081}
logging: {level: debug, format: text}
watchNamespaces: [butler-system, tenant-a]
syncPeriod: 2h
concurrency: 4
clusterAPI: {enabled: false}
managementAPI: {qps: 20, burst: 40}
harvesterAPI: {qps: 30, burst: 60}
intervals: {creatingPoll: 20s, watchedPoll: 3m, healthCheck: 10m, watchedHealthCheck: 40m, providerConfigRecheck: 2m, provisioningTimeout: 30m, ipReportTimeout: 5m, configGracePeriod: 2m}
gracefulShutdownTimeout: 1m
terminationGracePeriodSeconds: 75
hostNetwork: true
dnsPolicy: Default
resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 512Mi}}
podAnnotations: {example.com/scrape: "no"}
podLabels: {team: platform}
priorityClassName: system-cluster-critical
nodeSelector: {node-role.kubernetes.io/control-plane: ""}
tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app.kubernetes.io/name: butler-provider-harvester}}}
podDisruptionBudget: {minAvailable: 2}
serviceMonitor: {enabled: true, interval: 15s, scrapeTimeout: 5s, labels: {release: prometheus}}
`

func TestHelmLint(t *testing.T) {
	if out, err := runTool("helm", "lint", "--strict", chartDir); err != nil {
		t.Fatalf("helm lint (default values): %v\n%s", err, out)
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(nonDefaultValues), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runTool("helm", "lint", "--strict", chartDir, "--values", f); err != nil {
		t.Fatalf("helm lint (non-default values): %v\n%s", err, out)
	}
}

// With default values the manager runs with the binary's own defaults, except leader election,
// which a Deployment wants on (so that a rollout never has two leaders).
func TestChartDefaults(t *testing.T) {
	objs, err := helmTemplate(t, "")
	if err != nil {
		t.Fatal(err)
	}
	d := deployment(t, objs)
	got, _ := managerOptions(t, d)
	want, err := options.Parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want.LeaderElect = true
	if !reflect.DeepEqual(got, want) {
		t.Errorf("chart defaults differ from the binary's:\n got %+v\nwant %+v", got, want)
	}
	requireRestrictedPod(t, d)
	requireShutdownWithinGracePeriod(t, d, got)
	if c := d.Spec.Template.Spec.Containers[0]; c.Image != "ghcr.io/butlerdotdev/butler-provider-harvester:v0.3.0" {
		t.Errorf("image %q, want the chart's appVersion", c.Image)
	}
	if n := len(find(objs, "PodDisruptionBudget")); n != 0 {
		t.Errorf("one replica got %d PodDisruptionBudgets", n)
	}
	if n := len(find(objs, "ServiceMonitor")); n != 0 {
		t.Errorf("ServiceMonitor rendered without serviceMonitor.enabled")
	}
	if n := len(find(objs, "CustomResourceDefinition")); n != 3 {
		t.Errorf("%d CRDs rendered, want ImageSync, MachineRequest and ProviderConfig", n)
	}
	requireServicePort(t, objs, releaseFullname+"-metrics", "https", 8443)
	requireGeneratedRules(t, objs, releaseFullname+"-manager")
}

// Every value that sets a flag reaches the manager, and the pod-level values reach the pod.
func TestChartNonDefaultValues(t *testing.T) {
	objs, err := helmTemplate(t, nonDefaultValues)
	if err != nil {
		t.Fatal(err)
	}
	d := deployment(t, objs)
	got, args := managerOptions(t, d)
	want := &options.Options{
		MetricsAddr: ":9443", MetricsSecure: true, MetricsCertDir: "/etc/butler/metrics-certs", MetricsCertName: "tls.crt", MetricsCertKey: "tls.key",
		EnableHTTP2: true, ProbeAddr: ":9081",
		LeaderElect: true, LeaderElectionID: "bph-leader", WatchNamespaces: []string{"butler-system", "tenant-a"},
		SyncPeriod: 2 * time.Hour, Concurrency: 4, CreatingPoll: 20 * time.Second, WatchedPoll: 3 * time.Minute, HealthInterval: 10 * time.Minute, WatchedHealth: 40 * time.Minute,
		RecheckInterval: 2 * time.Minute, ProvisioningTimeout: 30 * time.Minute, IPReportTimeout: 5 * time.Minute, ConfigGracePeriod: 2 * time.Minute,
		HarvesterQPS: 30, HarvesterBurst: 60, KubeQPS: 20, KubeBurst: 40, LogLevel: "debug", LogFormat: "text",
		GracefulShutdownTimeout: time.Minute,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("values did not reach the flags:\n got %+v\nwant %+v\nargs %q", got, want, args)
	}
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	checks := map[string]bool{
		"replicas 3":                *d.Spec.Replicas == 3,
		"image":                     c.Image == "registry.example.com/butler/provider-harvester:v9.9.9" && c.ImagePullPolicy == corev1.PullAlways,
		"imagePullSecrets":          len(spec.ImagePullSecrets) == 1 && spec.ImagePullSecrets[0].Name == "registry-creds",
		"serviceAccount name":       spec.ServiceAccountName == "bph-manager",
		"resources":                 c.Resources.Limits.Memory().String() == "512Mi" && c.Resources.Requests.Cpu().String() == "100m",
		"podAnnotations":            d.Spec.Template.Annotations["example.com/scrape"] == "no",
		"podLabels":                 d.Spec.Template.Labels["team"] == "platform",
		"priorityClassName":         spec.PriorityClassName == "system-cluster-critical",
		"nodeSelector":              len(spec.NodeSelector) == 1,
		"tolerations":               len(spec.Tolerations) == 1 && spec.Tolerations[0].Effect == corev1.TaintEffectNoSchedule,
		"affinity":                  spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil,
		"metrics cert Secret mount": len(spec.Volumes) == 1 && spec.Volumes[0].Secret.SecretName == "bph-metrics-tls" && len(c.VolumeMounts) == 1 && c.VolumeMounts[0].MountPath == "/etc/butler/metrics-certs",
		"probe port":                portOf(c, "health") == 9081,
		"metrics port":              portOf(c, "metrics") == 9443,
		"grace period":              spec.TerminationGracePeriodSeconds != nil && *spec.TerminationGracePeriodSeconds == 75,
		"host network and DNS":      spec.HostNetwork && spec.DNSPolicy == corev1.DNSDefault,
	}
	for what, ok := range checks {
		if !ok {
			t.Errorf("%s: not rendered as set", what)
		}
	}
	requireRestrictedPod(t, d)
	requireShutdownWithinGracePeriod(t, d, got)
	pdbs := find(objs, "PodDisruptionBudget")
	if len(pdbs) != 1 {
		t.Fatalf("3 replicas got %d PodDisruptionBudgets, want 1", len(pdbs))
	}
	if v, _, _ := unstructured.NestedFieldNoCopy(pdbs[0].Object, "spec", "minAvailable"); fmt.Sprint(v) != "2" {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 2", v)
	}
	sms := find(objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(sms))
	}
	endpoints, _, _ := unstructured.NestedSlice(sms[0].Object, "spec", "endpoints")
	ep, _ := endpoints[0].(map[string]any)
	if ep["scheme"] != "https" || ep["interval"] != "15s" || ep["port"] != "https" || sms[0].GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor endpoint %v, labels %v", ep, sms[0].GetLabels())
	}
	if ca, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "name"); ca != "bph-metrics-tls" {
		t.Errorf("ServiceMonitor does not verify the metrics certificate with its Secret's CA: tlsConfig %v", ep["tlsConfig"])
	}
	requireServicePort(t, objs, "bph-metrics", "https", 9443)
	requireSecretsPerNamespace(t, objs, "bph-manager", "bph-manager", want.WatchNamespaces)
}

// With watchNamespaces the manager may read Secrets in those namespaces only: the ClusterRole
// keeps every other generated rule, and each namespace gets a Role with the Secret rules, bound to
// the manager's ServiceAccount.
func TestChartWatchNamespacesGrantSecretsPerNamespace(t *testing.T) {
	objs, err := helmTemplate(t, "watchNamespaces: [tenant-a, tenant-b]\n")
	if err != nil {
		t.Fatal(err)
	}
	requireSecretsPerNamespace(t, objs, releaseFullname+"-manager", releaseFullname, []string{"tenant-a", "tenant-b"})
}

// The Pod joins the node's network only when asked, as the Butler CLI's manifest does, and then
// resolves cluster names (ClusterFirstWithHostNet) unless another dnsPolicy is given.
func TestChartHostNetwork(t *testing.T) {
	for _, tt := range []struct {
		values      string
		hostNetwork bool
		dnsPolicy   corev1.DNSPolicy
	}{
		{"", false, ""},
		{"hostNetwork: true\n", true, corev1.DNSClusterFirstWithHostNet},
		{"hostNetwork: true\ndnsPolicy: Default\n", true, corev1.DNSDefault},
		{"dnsPolicy: ClusterFirst\n", false, corev1.DNSClusterFirst},
	} {
		objs, err := helmTemplate(t, tt.values)
		if err != nil {
			t.Fatal(err)
		}
		if spec := deployment(t, objs).Spec.Template.Spec; spec.HostNetwork != tt.hostNetwork || spec.DNSPolicy != tt.dnsPolicy {
			t.Errorf("values %q: hostNetwork %v, dnsPolicy %q; want %v, %q", tt.values, spec.HostNetwork, spec.DNSPolicy, tt.hostNetwork, tt.dnsPolicy)
		}
	}
}

func TestChartMetricsDisabled(t *testing.T) {
	objs, err := helmTemplate(t, "metrics: {enabled: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	d := deployment(t, objs)
	if o, _ := managerOptions(t, d); o.MetricsAddr != "0" {
		t.Errorf("metrics disabled but --metrics-bind-address=%s", o.MetricsAddr)
	}
	if n := len(find(objs, "Service")); n != 0 {
		t.Errorf("metrics disabled but %d Services rendered", n)
	}
	if portOf(d.Spec.Template.Spec.Containers[0], "metrics") != 0 {
		t.Error("metrics disabled but the container still declares a metrics port")
	}
}

// Values that cannot work are refused at render time, naming the value.
func TestChartRejectsBadValues(t *testing.T) {
	tests := map[string]struct{ values, want string }{
		"typo in a key":            {"replicas: 2\n", "additional properties 'replicas' not allowed"},
		"unknown log level":        {"logging: {level: loud}\n", "/logging/level"},
		"zero concurrency":         {"concurrency: 0\n", "/concurrency"},
		"duration without unit":    {"syncPeriod: \"600\"\n", "/syncPeriod"},
		"bad namespace":            {"watchNamespaces: [Tenant_A]\n", "/watchNamespaces/0"},
		"replicas without leader":  {"replicaCount: 2\nleaderElection: {enabled: false}\n", "replicaCount > 1 needs leaderElection.enabled=true"},
		"monitor without metrics":  {"metrics: {enabled: false}\nserviceMonitor: {enabled: true}\n", "serviceMonitor.enabled needs metrics.enabled=true"},
		"no service account name":  {"serviceAccount: {create: false}\n", "serviceAccount.name is required"},
		"extra arg that is a word": {"extraArgs: [debug]\n", "/extraArgs/0"},
		"shutdown outlasting the grace period": {"gracefulShutdownTimeout: 26s\nterminationGracePeriodSeconds: 30\n",
			"gracefulShutdownTimeout 26s must end at least 5s before terminationGracePeriodSeconds (30s)"},
		"shutdown timeout without unit": {"gracefulShutdownTimeout: \"20\"\n", "/gracefulShutdownTimeout"},
		"DNS policy without dnsConfig":  {"dnsPolicy: None\n", "/dnsPolicy"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := helmTemplate(t, tt.values)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("helm template error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// An extra flag the binary does not have renders, but the flag-set check catches it: this is the
// test's own proof that it can fail.
func TestUnknownExtraArgIsCaught(t *testing.T) {
	objs, err := helmTemplate(t, "extraArgs: [--metrics-addr=:9090]\n")
	if err != nil {
		t.Fatal(err)
	}
	args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args
	if _, err := options.Parse(args, io.Discard); err == nil || !strings.Contains(err.Error(), "metrics-addr") {
		t.Errorf("the manager accepted %q: %v", args, err)
	}
}

func TestKustomizeManifests(t *testing.T) {
	objs := kustomizeBuild(t)
	d := deployment(t, objs)
	o, _ := managerOptions(t, d)
	if !o.LeaderElect || !o.MetricsSecure || o.MetricsAddr != ":8443" || o.ProbeAddr != ":8081" {
		t.Errorf("kustomize manager flags: %+v", o)
	}
	requireRestrictedPod(t, d)
	requireShutdownWithinGracePeriod(t, d, o)
	for _, obj := range objs {
		switch obj.GetKind() {
		case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding":
			continue
		}
		if obj.GetNamespace() != "butler-system" {
			t.Errorf("%s %s is in namespace %q, want butler-system", obj.GetKind(), obj.GetName(), obj.GetNamespace())
		}
	}
	requireServicePort(t, objs, "butler-provider-harvester-controller-manager-metrics", "https", 8443)
	requireGeneratedRules(t, objs, "butler-provider-harvester-manager-role")
	requireUndeployRemoves(t, objs)
}

// requireUndeployRemoves checks that `make undeploy`, which names what it deletes so that the CRDs
// (and every MachineRequest with them) stay, names everything else config/default installs.
func requireUndeployRemoves(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	makefile := string(data)
	prefix := regexp.MustCompile(`(?m)^KUSTOMIZE_PREFIX := (\S+)$`).FindStringSubmatch(makefile)
	start := strings.Index(makefile, "\nundeploy:")
	if prefix == nil || start < 0 {
		t.Fatal("the Makefile has no KUSTOMIZE_PREFIX or undeploy target")
	}
	recipe, _, _ := strings.Cut(makefile[start:], "\n\n") // up to the next blank line
	recipe = strings.ReplaceAll(recipe, "$(KUSTOMIZE_PREFIX)", prefix[1])
	for _, obj := range objs {
		switch obj.GetKind() {
		case "Namespace", "CustomResourceDefinition":
			continue
		}
		if ref := strings.ToLower(obj.GetKind()) + "/" + obj.GetName(); !strings.Contains(recipe, ref) {
			t.Errorf("make undeploy does not remove %s", ref)
		}
	}
}

func portOf(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// requireRestrictedPod checks the securityContext the restricted Pod Security Standard asks for,
// and a read-only root filesystem.
func requireRestrictedPod(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec.SecurityContext
	c := d.Spec.Template.Spec.Containers[0].SecurityContext
	ok := pod != nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot &&
		pod.SeccompProfile != nil && pod.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault &&
		c != nil && c.ReadOnlyRootFilesystem != nil && *c.ReadOnlyRootFilesystem &&
		c.AllowPrivilegeEscalation != nil && !*c.AllowPrivilegeEscalation &&
		c.Capabilities != nil && reflect.DeepEqual(c.Capabilities.Drop, []corev1.Capability{"ALL"})
	if !ok {
		t.Errorf("pod securityContext %+v, container securityContext %+v: want non-root, RuntimeDefault seccomp, read-only root, no privilege escalation, all capabilities dropped", pod, c)
	}
}

func requireServicePort(t *testing.T, objs []*unstructured.Unstructured, name, portName string, port int64) {
	t.Helper()
	for _, s := range find(objs, "Service") {
		if s.GetName() != name {
			continue
		}
		ports, _, _ := unstructured.NestedSlice(s.Object, "spec", "ports")
		p, _ := ports[0].(map[string]any)
		if p["name"] != portName || fmt.Sprint(p["port"]) != fmt.Sprint(port) || p["targetPort"] != "metrics" {
			t.Errorf("Service %s port %v, want %s %d to the container's metrics port", name, p, portName, port)
		}
		return
	}
	t.Errorf("no Service %s", name)
}

// leaseReleaseMargin is the time the chart requires between the end of the manager's graceful
// shutdown and the end of the Pod's termination grace period: the manager releases its leader
// Lease after the former, and the kubelet kills it at the latter.
const leaseReleaseMargin = 5 * time.Second

// requireShutdownWithinGracePeriod checks that the manager's graceful shutdown ends, with
// leaseReleaseMargin to spare, within the Pod's termination grace period.
func requireShutdownWithinGracePeriod(t *testing.T, d *appsv1.Deployment, o *options.Options) {
	t.Helper()
	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace == nil {
		t.Errorf("the Deployment sets no terminationGracePeriodSeconds: the kubelet's default (30s) would decide whether --graceful-shutdown-timeout=%s fits", o.GracefulShutdownTimeout)
		return
	}
	if o.GracefulShutdownTimeout+leaseReleaseMargin > time.Duration(*grace)*time.Second {
		t.Errorf("--graceful-shutdown-timeout=%s does not end %s before terminationGracePeriodSeconds %d: the kubelet would kill the manager before it releases the leader Lease",
			o.GracefulShutdownTimeout, leaseReleaseMargin, *grace)
	}
}

// generatedRules are the manager's rules as controller-gen generates them.
func generatedRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	rules, err := testbed.GeneratedManagerRules(repoRoot())
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// requireGeneratedRules checks that the manager's ClusterRole has exactly controller-gen's rules.
func requireGeneratedRules(t *testing.T, objs []*unstructured.Unstructured, name string) {
	t.Helper()
	for _, obj := range find(objs, "ClusterRole") {
		if obj.GetName() == name {
			cr := &rbacv1.ClusterRole{}
			convert(t, obj, cr)
			if !reflect.DeepEqual(cr.Rules, generatedRules(t)) {
				t.Errorf("ClusterRole %s rules differ from config/rbac/role.yaml", name)
			}
			return
		}
	}
	t.Errorf("no ClusterRole %s", name)
}

// requireSecretsPerNamespace checks the manager's RBAC when it watches namespaces: ClusterRole
// clusterRole has controller-gen's rules without Secrets, and each namespace, and no other, has a
// Role with controller-gen's Secret rules (get) bound to ServiceAccount serviceAccount of the
// release namespace.
func requireSecretsPerNamespace(t *testing.T, objs []*unstructured.Unstructured, clusterRole, serviceAccount string, namespaces []string) {
	t.Helper()
	generated := generatedRules(t)
	var withoutSecrets, secretRules []rbacv1.PolicyRule
	for _, r := range generated {
		if !testbed.GrantsSecrets(r) {
			withoutSecrets = append(withoutSecrets, r)
			continue
		}
		secretRules = append(secretRules, rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: []string{"secrets"}, Verbs: r.Verbs})
		if others := slices.DeleteFunc(slices.Clone(r.Resources), func(s string) bool { return s == "secrets" }); len(others) > 0 {
			r.Resources = others
			withoutSecrets = append(withoutSecrets, r)
		}
	}
	if !slices.ContainsFunc(secretRules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Verbs, "get") }) {
		t.Fatalf("config/rbac/role.yaml grants no get on Secrets: %+v", generated)
	}

	found := false
	for _, obj := range find(objs, "ClusterRole") {
		cr := &rbacv1.ClusterRole{}
		convert(t, obj, cr)
		for _, r := range cr.Rules {
			if testbed.GrantsSecrets(r) {
				t.Errorf("ClusterRole %s grants Secrets cluster-wide although the manager watches %v: %+v", cr.Name, namespaces, r)
			}
		}
		if cr.Name == clusterRole {
			found = true
			if !reflect.DeepEqual(cr.Rules, withoutSecrets) {
				t.Errorf("ClusterRole %s rules differ from config/rbac/role.yaml without Secrets:\n got %+v\nwant %+v", cr.Name, cr.Rules, withoutSecrets)
			}
		}
	}
	if !found {
		t.Errorf("no ClusterRole %s", clusterRole)
	}

	granted := map[string]bool{} // namespace -> a Role granting the Secret rules is bound to the manager
	for _, obj := range find(objs, "RoleBinding") {
		rb := &rbacv1.RoleBinding{}
		convert(t, obj, rb)
		if !slices.Contains(rb.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: serviceAccount, Namespace: "butler-system"}) || rb.RoleRef.Kind != "Role" {
			continue
		}
		for _, obj := range find(objs, "Role") {
			role := &rbacv1.Role{}
			convert(t, obj, role)
			if role.Namespace == rb.Namespace && role.Name == rb.RoleRef.Name && slices.ContainsFunc(role.Rules, testbed.GrantsSecrets) {
				if !reflect.DeepEqual(role.Rules, secretRules) {
					t.Errorf("Role %s/%s rules %+v, want exactly the generated Secret rules %+v", role.Namespace, role.Name, role.Rules, secretRules)
				}
				granted[rb.Namespace] = true
			}
		}
	}
	for _, ns := range namespaces {
		if !granted[ns] {
			t.Errorf("watched namespace %s has no Role granting get on Secrets bound to ServiceAccount butler-system/%s", ns, serviceAccount)
		}
		delete(granted, ns)
	}
	for ns := range granted {
		t.Errorf("the manager may read Secrets in namespace %s, which it does not watch", ns)
	}
}

func convert(t *testing.T, obj *unstructured.Unstructured, into any) {
	t.Helper()
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into); err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

package testbed

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
)

// FieldOwner is the field manager of what the testbed applies server-side.
const FieldOwner = client.FieldOwner("butler-provider-harvester-test")

// ManagerDeployment returns the manager's Deployment: the one Deployment of an installation's
// objects (the Helm chart, config/default or the clusterctl components, rendered).
func ManagerDeployment(objs []*unstructured.Unstructured) (*appsv1.Deployment, error) {
	var deps []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			deps = append(deps, o)
		}
	}
	if len(deps) != 1 {
		return nil, fmt.Errorf("the manifests hold %d Deployments, want 1 (the manager's)", len(deps))
	}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deps[0].Object, d); err != nil {
		return nil, fmt.Errorf("the manager's Deployment %s: %w", deps[0].GetName(), err)
	}
	return d, nil
}

// ManagerArgs returns the args of the Deployment's manager container and what the manager's own
// flag set parses from them, so that a value wired to a flag the binary does not have (or a bad
// value) is an error here rather than a crash-looping Pod.
func ManagerArgs(d *appsv1.Deployment) (*options.Options, []string, error) {
	containers := d.Spec.Template.Spec.Containers
	if len(containers) == 0 || containers[0].Name != "manager" {
		return nil, nil, fmt.Errorf("the manager's Deployment %s: its first container must be the manager", d.Name)
	}
	args := containers[0].Args
	var usage bytes.Buffer
	o, err := options.Parse(args, &usage)
	if err != nil {
		return nil, nil, fmt.Errorf("the manager's Deployment %s: the manager rejects its args %q: %w", d.Name, args, err)
	}
	return o, args, nil
}

// ServiceAccountUser is who a Pod running as ServiceAccount namespace/name is to the API server, as
// an impersonation: only the RBAC bound to that ServiceAccount (and its groups) counts.
func ServiceAccountUser(namespace, name string) *rest.ImpersonationConfig {
	return &rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + namespace + ":" + name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
}

// StartInstalled starts a testbed whose manager runs as an installation runs it: as ServiceAccount
// Namespace/serviceAccount (impersonated, so the installation's RBAC is all it has), with a
// working directory, TMPDIR and HOME it cannot write to, as with a read-only root filesystem; and
// the credentials Secret holds a kubeconfig for a Harvester user bound only by
// config/harvester/rbac.yaml. opts.BeforeManager, if set, runs once both clusters are seeded and
// that user is in place, before the manager starts (to install the RBAC, for instance). It returns
// the testbed, to be stopped also after an error, and that Harvester user's token.
func StartInstalled(ctx context.Context, opts Options, serviceAccount string) (*Testbed, string, error) {
	var harvesterToken string
	before := opts.BeforeManager
	opts.ManagerImpersonate = ServiceAccountUser(Namespace, serviceAccount)
	// Not even root can write there: they are in /proc.
	opts.ManagerDir = "/proc"
	opts.ManagerEnv = append(opts.ManagerEnv, "TMPDIR=/proc/butler-tmp", "HOME=/proc/butler-home")
	opts.BeforeManager = func(ctx context.Context, tb *Testbed) error {
		if err := tb.Seed(ctx); err != nil {
			return err
		}
		token, err := tb.UseHarvesterRole(ctx)
		if harvesterToken = token; err != nil || before == nil {
			return err
		}
		return before(ctx, tb)
	}
	tb, err := Start(ctx, opts)
	return tb, harvesterToken, err
}

// Probe answers the HTTP status of a probe endpoint of the manager (/healthz, /readyz) at addr
// (host:port), 0 if it does not answer.
func Probe(addr, path string) int {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Apply applies objects to the management cluster, server-side, as FieldOwner.
func (t *Testbed) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, obj := range objs {
		if err := t.Mgmt.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), FieldOwner, client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// UseHarvesterRole applies config/harvester/rbac.yaml on Harvester and replaces the credentials
// Secret with a kubeconfig for its ServiceAccount (a token from the TokenRequest API). It returns
// the token.
func (t *Testbed) UseHarvesterRole(ctx context.Context) (string, error) {
	objs, err := t.DecodeFile(filepath.Join(t.opts.RepoRoot, "config", "harvester", "rbac.yaml"))
	if err != nil {
		return "", err
	}
	for _, obj := range objs {
		if err := t.Harvester.Client.Create(ctx, obj); err != nil {
			return "", fmt.Errorf("create %s %s on Harvester: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	cs, err := kubernetes.NewForConfig(t.Harvester.Config)
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(HarvesterNamespace).CreateToken(ctx, "butler-provider-harvester",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	restricted := &rest.Config{Host: t.Harvester.Config.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: t.Harvester.Config.CAData}}
	secret := &corev1.Secret{}
	if err := t.Mgmt.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: CredentialsSecret}, secret); err != nil {
		return "", err
	}
	secret.Data = map[string][]byte{"kubeconfig": sim.KubeconfigFor(restricted)}
	return tr.Status.Token, t.Mgmt.Update(ctx, secret)
}

// GeneratedManagerRules are the manager's rules as controller-gen generates them
// (config/rbac/role.yaml): what every installation's manager ClusterRole grants.
func GeneratedManagerRules(repoRoot string) ([]rbacv1.PolicyRule, error) {
	path := filepath.Join(repoRoot, "config", "rbac", "role.yaml")
	data, err := os.ReadFile(path) //nolint:gosec // G304: a file of the repository
	if err != nil {
		return nil, err
	}
	objs, err := DecodeManifests(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: want one ClusterRole, got %d objects", path, len(objs))
	}
	role := &rbacv1.ClusterRole{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, role); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return role.Rules, nil
}

// GrantsSecrets reports whether a rule grants anything on core Secrets.
func GrantsSecrets(r rbacv1.PolicyRule) bool {
	return (slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "*")) &&
		(slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*"))
}

// InstallGuestReader does on a Harvester cluster what an operator does who applies
// config/harvester/guest-rbac.yaml for the tenants' credentials: installs the read-only
// ClusterRole the provider binds them to (harvester.GuestReaderClusterRole, which a unit test
// holds equal to the file). The simulator plays Harvester, which does not ship it.
func InstallGuestReader(ctx context.Context, c client.Client) error {
	if err := c.Create(ctx, harvester.GuestReaderClusterRole()); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("install ClusterRole %s on Harvester: %w", harvester.GuestReaderRole, err)
	}
	return nil
}

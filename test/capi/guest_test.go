package capi

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/sim"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// Upstream sources the access review table follows.
const (
	cloudProviderSource = "harvester/cloud-provider-harvester@38cd463f"
	csiDriverSource     = "harvester/harvester-csi-driver@97b6c358"
)

// TestClusterAPIGuestCredentials runs a tenant cluster whose Nodes get their providerID only from
// the credentials the provider made and delivered: the kubelet player registers Nodes without
// one, and the cloud provider player (the ClusterResourceSet's and Harvester's cloud provider's
// parts) has nothing but Secret tenant-harvester-cloud-config. It checks the delivery contract,
// the Machine reaching Running with its Node, what the made identity may do on Harvester (every
// request of the cloud provider and CSI driver, from their sources), that bad credentials leave
// Nodes without providerID, that a change of the ProviderConfig's credentials re-issues the token
// and revokes the old one, that a move of the ProviderConfig's namespace remakes the identity
// there and deletes the old one, and that deleting the Cluster leaves no ServiceAccount, binding
// or token on Harvester.
func TestClusterAPIGuestCredentials(t *testing.T) {
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	tenantAPI, cloudProvider := w.playTenant()

	cluster := w.tenantCluster()
	cpInfra, cp := tenant.ControlPlaneMachine("tenant-cp-0")
	w.must(testbed.CreateAll(ctx, c, cpInfra, cp))

	hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}}
	w.waitGuestCredentials(hc, infrav1.ReasonGuestCredentialsIssued)
	kubeconfig := w.deliveredKubeconfig(hc)
	token := tokenOf(t, kubeconfig)
	w.noSecretInStatusOrEvents(hc, token)
	w.waitIsolated(hc, metav1.ConditionTrue, infrav1.ReasonGuestNamespaceExclusive)

	var vm kubevirtv1.VirtualMachine
	waitFor(ctx, t, w.capi, "the Machine Running with the Node the played cloud provider initialized", func() error {
		if err := machineOnHarvester(ctx, c, hv.Client, "vms", cp, &vm, &infrav1.HarvesterMachine{}); err != nil {
			return err
		}
		phase, _, _ := unstructured.NestedString(cp.Object, "status", "phase")
		node, _, _ := unstructured.NestedString(cp.Object, "status", "nodeRef", "name")
		if phase != "Running" || node != "tenant-cp-0" {
			return fmt.Errorf("Machine phase %q, nodeRef %q (cloud provider: %w)", phase, node, cloudProvider.Err())
		}
		return nil
	})
	n := &corev1.Node{}
	w.must(tenantAPI.Client.Get(ctx, client.ObjectKey{Name: "tenant-cp-0"}, n))
	if n.Spec.ProviderID != harvester.ProviderIDPrefix+string(vm.UID) {
		t.Fatalf("Node providerID %q, want harvester://%s", n.Spec.ProviderID, vm.UID)
	}
	for _, taint := range n.Spec.Taints {
		if taint.Key == testbed.TaintUninitialized {
			t.Fatalf("Node taints %v: the cloud provider's is left", n.Spec.Taints)
		}
	}

	t.Run("AccessReview", func(t *testing.T) { accessReviewTable(ctx, t, kubeconfig) })

	// A change of the ProviderConfig's credentials (the same access, rewritten) re-issues the
	// token: the old one is refused from then on, and the new one reaches the tenant.
	var revoked []byte
	t.Run("Rotation", func(t *testing.T) {
		rotated := w.rotateProviderCredentials(hc, token)
		waitFor(ctx, t, w.capi, "the old token refused", func() error {
			if err := whoAmI(ctx, kubeconfig); !apierrors.IsUnauthorized(err) {
				return fmt.Errorf("the old token: %w", err)
			}
			return nil
		})
		w.must(whoAmI(ctx, rotated))
		waitFor(ctx, t, w.capi, "the new cloud-config in the tenant (ClusterResourceSet, strategy Reconcile)", func() error {
			s := &corev1.Secret{}
			if err := tenantAPI.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "cloud-config"}, s); err != nil {
				return err
			}
			if !bytes.Equal(s.Data["cloud-config"], rotated) {
				return fmt.Errorf("the tenant's cloud-config is not the rotated one")
			}
			return nil
		})
		revoked, kubeconfig = kubeconfig, rotated
	})

	t.Run("BadCredentials", func(t *testing.T) {
		if revoked == nil {
			t.Skip("needs the revoked token of Rotation")
		}
		playerRefusesBadCredentials(ctx, t, w, kubeconfig, revoked)
	})

	// Credentials issued with Harvester's own binding (its CSI driver's role cluster-wide, as
	// earlier releases of the provider bound it) are narrowed in place: the namespace's binding
	// and the read-only ClusterRoleBinding are made, then the wide binding goes; the token stays.
	t.Run("NarrowedInPlace", func(t *testing.T) {
		wide := w.widenGuest(hc)
		waitFor(ctx, t, w.capi, "the wide binding gone, the narrow ones made", func() error {
			if err := goneFrom(ctx, hv.Client, wide); err != nil {
				return err
			}
			return w.guestNarrow(hc)
		})
		w.must(c.Get(ctx, client.ObjectKeyFromObject(hc), hc))
		if !bytes.Equal(tokenOf(t, w.deliveredKubeconfig(hc)), tokenOf(t, kubeconfig)) {
			t.Fatal("narrowing re-issued the token")
		}
		w.waitIsolated(hc, metav1.ConditionTrue, infrav1.ReasonGuestNamespaceExclusive)
	})

	// Where tenants reach Harvester: its VIP (ConfigMap harvester-system/vip) on port 6443 with the
	// token's CA, as Harvester's own kubeconfig generator writes it; else the server the operator
	// gives beside the credentials. Each change rewrites the kubeconfig with the same token.
	t.Run("TenantEndpoint", func(t *testing.T) {
		// Harvester's cluster CA, as its token controller hands it out with every token.
		tokens := &corev1.SecretList{}
		w.must(hv.Client.List(ctx, tokens, client.InNamespace("vms"), client.MatchingLabels{harvester.LabelOwnerKind: "HarvesterCluster"}))
		if len(tokens.Items) == 0 {
			t.Fatal("no token Secret of the HarvesterCluster on Harvester")
		}
		tokenCA := tokens.Items[0].Data[corev1.ServiceAccountRootCAKey]
		token := tokenOf(t, kubeconfig)
		delivered := func(server string, ca []byte) func() error {
			return func() error {
				w.must(c.Get(ctx, client.ObjectKeyFromObject(hc), hc))
				s := &corev1.Secret{}
				w.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tenant.Name + testbed.CloudConfigSecretSuffix}, s))
				got := deliveredKubeconfigOf(t, s)
				cfg, err := clientcmd.Load(got)
				if err != nil {
					return err
				}
				cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
				if cl.Server != server || !bytes.Equal(cl.CertificateAuthorityData, ca) || cl.InsecureSkipTLSVerify {
					return fmt.Errorf("the delivered kubeconfig names %s (insecure %v)", cl.Server, cl.InsecureSkipTLSVerify)
				}
				if !bytes.Equal(tokenOf(t, got), token) {
					t.Fatal("the token was re-issued")
				}
				kubeconfig = got
				return nil
			}
		}
		vip := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "harvester-system", Name: "vip"}, Data: map[string]string{"ip": "10.0.0.9", "mode": "static"}}
		w.must(hv.Client.Create(ctx, vip))
		waitFor(ctx, t, w.capi, "the kubeconfig written again for Harvester's VIP", delivered("https://10.0.0.9:6443", tokenCA))

		admin, err := clientcmd.Load(hv.Kubeconfig)
		w.must(err)
		server := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster].Server
		creds := &corev1.Secret{}
		w.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "harvester-kubeconfig"}, creds))
		creds.Annotations = map[string]string{v1alpha1.AnnotationTenantServer: "http://" + strings.TrimPrefix(server, "https://")}
		w.must(c.Update(ctx, creds))
		w.waitGuestCredentials(hc, infrav1.ReasonGuestTenantServerInvalid, "is not https", "credentials Secret "+ns+"/harvester-kubeconfig")
		w.must(c.Get(ctx, client.ObjectKeyFromObject(creds), creds))
		creds.Annotations[v1alpha1.AnnotationTenantServer] = server
		w.must(c.Update(ctx, creds))
		waitFor(ctx, t, w.capi, "the kubeconfig written again for the operator's server", delivered(server, tokenCA))
		w.must(whoAmI(ctx, kubeconfig))

		w.must(hv.Client.Delete(ctx, vip))
		w.must(c.Get(ctx, client.ObjectKeyFromObject(creds), creds))
		delete(creds.Annotations, v1alpha1.AnnotationTenantServer)
		w.must(c.Update(ctx, creds))
		waitFor(ctx, t, w.capi, "the kubeconfig back on the provider's server", delivered(server, admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster].CertificateAuthorityData))
	})

	// The ProviderConfig moves to another Harvester namespace: the identity is made there (and its
	// kubeconfig's namespace is that one), and the one of the old namespace is deleted.
	t.Run("NamespaceMove", func(t *testing.T) {
		w.must(hv.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vms2"}}))
		pc := &v1alpha1.ProviderConfig{}
		w.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "harvester"}, pc))
		pc.Spec.Harvester.Namespace = "vms2"
		w.must(c.Update(ctx, pc))
		var moved []byte
		waitFor(ctx, t, w.capi, "the credentials remade in vms2", func() error {
			w.must(c.Get(ctx, client.ObjectKeyFromObject(hc), hc))
			s := &corev1.Secret{}
			w.must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tenant.Name + testbed.CloudConfigSecretSuffix}, s))
			cfg, err := clientcmd.Load(deliveredKubeconfigOf(t, s))
			if err != nil {
				return err
			}
			if got := cfg.Contexts[cfg.CurrentContext].Namespace; got != "vms2" {
				return fmt.Errorf("the delivered kubeconfig's namespace is %q", got)
			}
			moved = deliveredKubeconfigOf(t, s)
			return nil
		})
		w.must(whoAmI(ctx, moved))
		sas := &corev1.ServiceAccountList{}
		w.must(hv.Client.List(ctx, sas, client.InNamespace("vms"), client.MatchingLabels{harvester.LabelOwnerKind: "HarvesterCluster"}))
		if len(sas.Items) != 0 {
			t.Fatalf("%d ServiceAccounts left in the old namespace", len(sas.Items))
		}
		waitFor(ctx, t, w.capi, "the old namespace's token refused", func() error {
			if err := whoAmI(ctx, kubeconfig); !apierrors.IsUnauthorized(err) {
				return fmt.Errorf("the old namespace's token: %w", err)
			}
			return nil
		})
		kubeconfig = moved
	})

	// Deleting the Cluster deletes the credentials on Harvester before the HarvesterCluster goes.
	w.must(c.Delete(ctx, cluster))
	waitFor(ctx, t, w.capi, "the Cluster, its machines and its credentials to go", func() error {
		if err := w.clusterAndMachinesGone(cluster); err != nil {
			return err
		}
		return w.guestIdentityGone()
	})
	// The API server caches a token's authentication for a few seconds.
	waitFor(ctx, t, w.capi, "the delivered token refused once the Cluster is gone", func() error {
		if err := whoAmI(ctx, kubeconfig); !apierrors.IsUnauthorized(err) {
			return fmt.Errorf("the delivered token: %w", err)
		}
		return nil
	})
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: tenant.Name + testbed.CloudConfigSecretSuffix}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the delivered Secret after the Cluster is gone: %v", err)
	}
}

// TestClusterAPIGuestCredentialsNeedTheGuestRole runs the provider with the documented Harvester
// RBAC only (config/harvester/rbac.yaml, in namespace vms): the HarvesterCluster's
// GuestCredentialsReady names the missing permissions and the fix, and the machine is still made.
// With config/harvester/guest-rbac.yaml applied too, the credentials are made: the opt-in role is
// enough (bind on Harvester's two roles, no escalate). Deleting the Cluster leaves nothing.
func TestClusterAPIGuestCredentialsNeedTheGuestRole(t *testing.T) {
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv
	w.credentialsBoundBy("rbac.yaml")

	cluster := w.tenantCluster()
	machine := w.machine("tenant-md-0", "")
	hc := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}}
	w.waitGuestCredentials(hc, infrav1.ReasonGuestPermissionsMissing, "create serviceaccounts in namespace vms",
		"bind clusterroles.rbac.authorization.k8s.io harvesterhci.io:csi-driver", "config/harvester/guest-rbac.yaml", "spec.guestCredentials to None")
	waitFor(ctx, t, w.capi, "the machine made all the same", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", machine, &kubevirtv1.VirtualMachine{}, &infrav1.HarvesterMachine{})
	})

	w.applyOnHarvester("guest-rbac.yaml")
	w.waitGuestCredentials(hc, infrav1.ReasonGuestCredentialsIssued)
	delivered := w.deliveredKubeconfig(hc)
	w.must(whoAmI(ctx, delivered))

	// Credentials bound cluster-wide, and the provider has the earlier guest-rbac.yaml only (bind
	// on the CSI driver's role cluster-wide, nothing on the read-only role): they keep working as
	// they are, and GuestCredentialsIsolated says why they are not narrowed. With the current file
	// applied again they are, with the same token.
	t.Run("NotNarrowedWithoutTheCurrentGuestRole", func(t *testing.T) {
		w.earlierGuestRole()
		wide := w.widenGuest(hc)
		cond := w.waitIsolated(hc, metav1.ConditionFalse, infrav1.ReasonGuestBindingClusterWide)
		for _, want := range []string{"bind clusterroles.rbac.authorization.k8s.io " + harvester.GuestReaderRole, "config/harvester/guest-rbac.yaml"} {
			if !strings.Contains(cond.Message, want) {
				t.Errorf("GuestCredentialsIsolated message %q does not say %q", cond.Message, want)
			}
		}
		if ready := findCondition(hc.Status.Conditions, infrav1.ConditionGuestCredentialsReady); ready == nil || ready.Reason != infrav1.ReasonGuestCredentialsIssued {
			t.Errorf("GuestCredentialsReady %+v", ready)
		}
		w.must(hv.Client.Get(ctx, client.ObjectKeyFromObject(wide), &rbacv1.ClusterRoleBinding{}))
		w.must(whoAmI(ctx, delivered))

		w.applyOnHarvester("guest-rbac.yaml")
		waitFor(ctx, t, w.capi, "narrowed once the current guest-rbac.yaml is applied", func() error {
			if err := goneFrom(ctx, hv.Client, wide); err != nil {
				return err
			}
			return w.guestNarrow(hc)
		})
		w.waitIsolated(hc, metav1.ConditionTrue, infrav1.ReasonGuestNamespaceExclusive)
		w.must(c.Get(ctx, client.ObjectKeyFromObject(hc), hc))
		if !bytes.Equal(tokenOf(t, w.deliveredKubeconfig(hc)), tokenOf(t, delivered)) {
			t.Fatal("narrowing re-issued the token")
		}
	})

	w.must(c.Delete(ctx, cluster))
	waitFor(ctx, t, w.capi, "the Cluster, its machines and its credentials to go", func() error {
		if err := w.clusterAndMachinesGone(cluster); err != nil {
			return err
		}
		return w.guestIdentityGone()
	})
}

// rotateProviderCredentials rewrites the ProviderConfig's credentials (the same access), which
// re-issues the tenant's token, and returns the kubeconfig delivered with a token other than token.
func (w *capiWorld) rotateProviderCredentials(hc *infrav1.HarvesterCluster, token []byte) []byte {
	w.t.Helper()
	creds := &corev1.Secret{}
	w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: "harvester-kubeconfig"}, creds))
	creds.Data["kubeconfig"] = append(bytes.Clone(w.hv.Kubeconfig), []byte("\n# rotated\n")...)
	w.must(w.c.Update(w.ctx, creds))
	var rotated []byte
	waitFor(w.ctx, w.t, w.capi, "a new token delivered", func() error {
		w.must(w.c.Get(w.ctx, client.ObjectKeyFromObject(hc), hc))
		rotated = w.deliveredKubeconfig(hc)
		if bytes.Equal(tokenOf(w.t, rotated), token) {
			return fmt.Errorf("the delivered token is the same")
		}
		return nil
	})
	return rotated
}

// waitGuestCredentials waits for the HarvesterCluster's GuestCredentialsReady condition to have
// that reason and to mention each of mentions, and returns it.
func (w *capiWorld) waitGuestCredentials(hc *infrav1.HarvesterCluster, reason string, mentions ...string) *metav1.Condition {
	w.t.Helper()
	return w.waitCondition(hc, func() []metav1.Condition { return hc.Status.Conditions }, infrav1.ConditionGuestCredentialsReady, reason, mentions...)
}

// waitIsolated waits for the HarvesterCluster's GuestCredentialsIsolated condition to have that
// status and reason, and returns it.
func (w *capiWorld) waitIsolated(hc *infrav1.HarvesterCluster, status metav1.ConditionStatus, reason string) *metav1.Condition {
	w.t.Helper()
	var cond *metav1.Condition
	waitFor(w.ctx, w.t, w.capi, "GuestCredentialsIsolated "+reason, func() error {
		w.must(w.c.Get(w.ctx, client.ObjectKeyFromObject(hc), hc))
		cond = findCondition(hc.Status.Conditions, infrav1.ConditionGuestCredentialsIsolated)
		if cond == nil || cond.Status != status || cond.Reason != reason {
			return fmt.Errorf("GuestCredentialsIsolated %+v", cond)
		}
		return nil
	})
	return cond
}

// widenGuest makes the HarvesterCluster's guest identity look as earlier releases of the provider
// made it, with Harvester's own binding: its CSI driver's role bound cluster-wide, and neither
// the namespace's binding of it nor the read-only ClusterRoleBinding. It returns the wide binding.
func (w *capiWorld) widenGuest(hc *infrav1.HarvesterCluster) *rbacv1.ClusterRoleBinding {
	w.t.Helper()
	names := harvester.GuestNamesFor(harvester.Owner{Kind: "HarvesterCluster", Namespace: hc.Namespace, Name: hc.Name}, "vms")
	sa := &corev1.ServiceAccount{}
	w.must(w.hv.Client.Get(w.ctx, client.ObjectKey{Namespace: "vms", Name: names.ServiceAccount}, sa))
	wide := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: names.WideClusterRoleBinding, Labels: sa.Labels, Annotations: sa.Annotations},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "vms", Name: names.ServiceAccount}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: harvester.GuestCSIDriverRole},
	}
	// The wide binding first: the provider, looking meanwhile, would remake the narrow ones.
	w.must(w.hv.Client.Create(w.ctx, wide))
	w.must(w.hv.Client.Delete(w.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: names.CSIRoleBinding}}))
	w.must(w.hv.Client.Delete(w.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: names.ClusterRoleBinding}}))
	return wide
}

// guestNarrow checks that the HarvesterCluster's guest identity has its narrow bindings.
func (w *capiWorld) guestNarrow(hc *infrav1.HarvesterCluster) error {
	names := harvester.GuestNamesFor(harvester.Owner{Kind: "HarvesterCluster", Namespace: hc.Namespace, Name: hc.Name}, "vms")
	rb, crb := &rbacv1.RoleBinding{}, &rbacv1.ClusterRoleBinding{}
	if err := w.hv.Client.Get(w.ctx, client.ObjectKey{Namespace: "vms", Name: names.CSIRoleBinding}, rb); err != nil {
		return err
	}
	if err := w.hv.Client.Get(w.ctx, client.ObjectKey{Name: names.ClusterRoleBinding}, crb); err != nil {
		return err
	}
	if rb.RoleRef.Name != harvester.GuestCSIDriverRole || crb.RoleRef.Name != harvester.GuestReaderRole {
		return fmt.Errorf("bound to %s and %s", rb.RoleRef.Name, crb.RoleRef.Name)
	}
	return nil
}

// earlierGuestRole rewrites what config/harvester/guest-rbac.yaml granted the provider (applied in
// namespace vms) as its earlier release did: bind on the CSI driver's role cluster-wide and on the
// cloud provider's in the namespace, nothing on the read-only role, no list of ServiceAccounts.
func (w *capiWorld) earlierGuestRole() {
	w.t.Helper()
	rbacGroup := []string{rbacv1.GroupName}
	role := &rbacv1.Role{}
	w.must(w.hv.Client.Get(w.ctx, client.ObjectKey{Namespace: "vms", Name: "butler-provider-harvester-guest"}, role))
	role.Rules = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "create", "delete"}},
		{APIGroups: rbacGroup, Resources: []string{"rolebindings"}, Verbs: []string{"get", "create", "delete"}},
		{APIGroups: rbacGroup, Resources: []string{"clusterroles"}, ResourceNames: []string{harvester.GuestCloudProviderRole}, Verbs: []string{"bind"}},
	}
	w.must(w.hv.Client.Update(w.ctx, role))
	cr := &rbacv1.ClusterRole{}
	w.must(w.hv.Client.Get(w.ctx, client.ObjectKey{Name: "butler-provider-harvester-guest"}, cr))
	cr.Rules = []rbacv1.PolicyRule{
		{APIGroups: rbacGroup, Resources: []string{"clusterrolebindings"}, Verbs: []string{"get", "create", "delete"}},
		{APIGroups: rbacGroup, Resources: []string{"clusterroles"}, ResourceNames: []string{harvester.GuestCSIDriverRole}, Verbs: []string{"bind"}},
	}
	w.must(w.hv.Client.Update(w.ctx, cr))
}

// applyOnHarvester applies a file of config/harvester on the simulated Harvester, in namespace
// vms instead of default (the world's ProviderConfig's namespace).
// credentialsBoundBy gives the provider credentials of the ServiceAccount the files of
// config/harvester bind (applied on Harvester, in namespace vms), in place of the administrator's.
func (w *capiWorld) credentialsBoundBy(files ...string) {
	w.t.Helper()
	for _, file := range files {
		w.applyOnHarvester(file)
	}
	cs, err := kubernetes.NewForConfig(w.hv.Config)
	w.must(err)
	tr, err := cs.CoreV1().ServiceAccounts("vms").CreateToken(w.ctx, "butler-provider-harvester", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	w.must(err)
	restricted := &rest.Config{Host: w.hv.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: w.hv.Config.CAData}}
	creds := &corev1.Secret{}
	w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: "harvester-kubeconfig"}, creds))
	creds.Data["kubeconfig"] = sim.KubeconfigFor(restricted)
	w.must(w.c.Update(w.ctx, creds))
}

func (w *capiWorld) applyOnHarvester(file string) {
	w.t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(), "config", "harvester", file))
	w.must(err)
	objs, err := testbed.DecodeManifests(data)
	w.must(err)
	for _, obj := range objs {
		if obj.GetNamespace() == "default" {
			obj.SetNamespace("vms")
		}
		if subjects, ok, _ := unstructured.NestedSlice(obj.Object, "subjects"); ok {
			for _, s := range subjects {
				s.(map[string]any)["namespace"] = "vms"
			}
			w.must(unstructured.SetNestedSlice(obj.Object, subjects, "subjects"))
		}
		// Applied as kubectl apply does, server-side: again, it puts the file's rules back.
		if err := w.hv.Client.Apply(w.ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			w.t.Fatalf("apply %s %s on Harvester: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// deliveredKubeconfig checks the delivery contract of the HarvesterCluster's credentials and
// returns the kubeconfig: Secret <Cluster>-harvester-cloud-config in its namespace, of the
// ClusterResourceSet type, labelled with the Cluster's name, controlled by the HarvesterCluster,
// with one key cloud-config.yaml holding a v1 Secret kube-system/cloud-config whose key
// cloud-config is a kubeconfig of the Harvester server and CA the provider itself uses (the
// simulated Harvester publishes no VIP), in namespace vms, with a token of its own, which its key
// token holds too, for the kubeconfig's tokenFile.
func (w *capiWorld) deliveredKubeconfig(hc *infrav1.HarvesterCluster) []byte {
	t := w.t
	t.Helper()
	s := &corev1.Secret{}
	w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: ns, Name: tenant.Name + "-harvester-cloud-config"}, s))
	if s.Type != "addons.cluster.x-k8s.io/resource-set" || s.Labels["cluster.x-k8s.io/cluster-name"] != tenant.Name {
		t.Fatalf("delivered Secret type %q labels %v", s.Type, s.Labels)
	}
	if owner := metav1.GetControllerOf(s); owner == nil || owner.Kind != "HarvesterCluster" || owner.Name != hc.Name || owner.UID != hc.UID ||
		owner.APIVersion != infrav1.GroupVersion.String() {
		t.Fatalf("delivered Secret controller %+v, want HarvesterCluster %s", owner, hc.Name)
	}
	if len(s.Data) != 1 || s.Data["cloud-config.yaml"] == nil {
		t.Fatalf("delivered Secret keys %v, want cloud-config.yaml only", keysOf(s.Data))
	}
	embedded := &corev1.Secret{}
	if err := yaml.UnmarshalStrict(s.Data["cloud-config.yaml"], embedded); err != nil {
		t.Fatalf("cloud-config.yaml is not a Secret manifest: %v", err)
	}
	if embedded.APIVersion != "v1" || embedded.Kind != "Secret" || embedded.Namespace != "kube-system" || embedded.Name != "cloud-config" || len(embedded.Data) != 2 {
		t.Fatalf("cloud-config.yaml holds %s %s %s/%s with keys %v", embedded.APIVersion, embedded.Kind, embedded.Namespace, embedded.Name, keysOf(embedded.Data))
	}
	kubeconfig := embedded.Data["cloud-config"]
	cfg, err := clientcmd.Load(kubeconfig)
	w.must(err)
	admin, err := clientcmd.Load(w.hv.Kubeconfig)
	w.must(err)
	ctx := cfg.Contexts[cfg.CurrentContext]
	adminCluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	if ctx == nil || ctx.Namespace != "vms" || cfg.Clusters[ctx.Cluster].Server != adminCluster.Server ||
		!bytes.Equal(cfg.Clusters[ctx.Cluster].CertificateAuthorityData, adminCluster.CertificateAuthorityData) {
		t.Fatalf("the delivered kubeconfig's context %+v: want namespace vms, the provider's server and CA", ctx)
	}
	user := cfg.AuthInfos[ctx.AuthInfo]
	if user == nil || user.Token == "" || len(user.ClientCertificateData) > 0 {
		t.Fatal("the delivered kubeconfig has no token of its own")
	}
	// The token as a file of its own too, where the templates mount the Secret.
	if user.TokenFile != testbed.TenantSecretMount+"/token" || string(embedded.Data["token"]) != user.Token {
		t.Fatalf("the delivered kubeconfig's tokenFile %q, or the Secret's key token, is not the kubeconfig's token", user.TokenFile)
	}
	return kubeconfig
}

// deliveredKubeconfigOf reads the kubeconfig out of a delivered Secret.
func deliveredKubeconfigOf(t *testing.T, s *corev1.Secret) []byte {
	t.Helper()
	embedded := &corev1.Secret{}
	if err := yaml.UnmarshalStrict(s.Data[testbed.CloudConfigSecretKey], embedded); err != nil {
		t.Fatal(err)
	}
	return embedded.Data[testbed.TenantCloudConfigKey]
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func tokenOf(t *testing.T, kubeconfig []byte) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token)
}

// noSecretInStatusOrEvents checks that the token appears in no condition and no event.
func (w *capiWorld) noSecretInStatusOrEvents(hc *infrav1.HarvesterCluster, token []byte) {
	w.t.Helper()
	for _, cond := range hc.Status.Conditions {
		if strings.Contains(cond.Message, string(token)) {
			w.t.Fatalf("condition %s carries the token", cond.Type)
		}
	}
	events := &corev1.EventList{}
	w.must(w.c.List(w.ctx, events, client.InNamespace(ns)))
	for _, e := range events.Items {
		if strings.Contains(e.Message, string(token)) {
			w.t.Fatalf("event %s carries the token", e.Name)
		}
	}
}

// whoAmI authenticates with a kubeconfig (a SelfSubjectReview).
func whoAmI(ctx context.Context, kubeconfig []byte) error {
	c, _ := guestClient(kubeconfig)
	if c == nil {
		return fmt.Errorf("not a kubeconfig")
	}
	return c.Create(ctx, &authenticationv1.SelfSubjectReview{})
}

func guestClient(kubeconfig []byte) (client.Client, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{})
}

// guestIdentityGone checks that no ServiceAccount, token Secret, RoleBinding or ClusterRoleBinding
// of a HarvesterCluster is left on Harvester.
func (w *capiWorld) guestIdentityGone() error {
	sel := client.MatchingLabels{harvester.LabelOwnerKind: "HarvesterCluster"}
	left := 0
	for _, list := range []client.ObjectList{&corev1.ServiceAccountList{}, &corev1.SecretList{}, &rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleBindingList{}} {
		w.must(w.hv.Client.List(w.ctx, list, sel))
		items, _ := metaItems(list)
		left += items
	}
	if left > 0 {
		return fmt.Errorf("%d ServiceAccounts, Secrets and bindings of a HarvesterCluster left on Harvester", left)
	}
	return nil
}

func metaItems(list client.ObjectList) (int, error) {
	switch l := list.(type) {
	case *corev1.ServiceAccountList:
		return len(l.Items), nil
	case *corev1.SecretList:
		return len(l.Items), nil
	case *rbacv1.RoleBindingList:
		return len(l.Items), nil
	case *rbacv1.ClusterRoleBindingList:
		return len(l.Items), nil
	}
	return 0, fmt.Errorf("unknown list %T", list)
}

// access is one request on Harvester, and what a guest identity the provider made may do with it.
type access struct {
	verb, group, resource, subresource, namespace, name string
	// source is the upstream file the request comes from, or why it is asked.
	source string
	class  accessClass
}

// accessClass says what the provider's binding makes of a request, on any Harvester version.
type accessClass int

const (
	// inNamespace: a request in the VMs' namespace, through Harvester's two roles bound there:
	// allowed exactly when Harvester's own binding allows it.
	inNamespace accessClass = iota
	// readOutside: a read outside the namespace that GuestReaderRole (or what Harvester grants
	// every authenticated user) allows: allowed on every version.
	readOutside
	// leftOut: a request of the components that the provider's binding refuses on purpose
	// (harvester.GuestReaderClusterRole says why of each).
	leftOut
	// neighbour: a request on another namespace's objects: refused.
	neighbour
)

func (a access) String() string {
	what := fmt.Sprintf("%s %s", a.verb, a.resource)
	if a.group != "" {
		what += "." + a.group
	}
	if a.subresource != "" {
		what += "/" + a.subresource
	}
	if a.name != "" {
		what += " " + a.name
	}
	if a.namespace != "" {
		what += " in " + a.namespace
	}
	return what
}

// guestAccessTable is every request Harvester's cloud provider and CSI driver make on Harvester
// (read from their sources; vms is the kubeconfig's namespace), and what a tenant might try on a
// neighbouring namespace.
func guestAccessTable() []access {
	const vms, other = "vms", "neighbour"
	ccm := func(f string) string { return cloudProviderSource + " " + f }
	csi := func(f string) string { return csiDriverSource + " " + f }
	var table []access
	add := func(source string, class accessClass, group, resource, subresource, namespace, name string, verbs ...string) {
		for _, v := range verbs {
			table = append(table, access{verb: v, group: group, resource: resource, subresource: subresource, namespace: namespace, name: name, source: source, class: class})
		}
	}
	// Harvester's cloud provider: nothing outside its namespace.
	add(ccm("pkg/cloud-controller-manager/instance.go (getVM: the Node's VM by name)"), inNamespace, "kubevirt.io", "virtualmachines", "", vms, "", "get")
	add(ccm("pkg/cloud-controller-manager/instance.go (InstanceMetadata)"), inNamespace, "kubevirt.io", "virtualmachineinstances", "", vms, "", "get")
	add(ccm("pkg/cloud-controller-manager/ccm.go, pkg/controller/virtualmachineinstance/controller.go (the VMI informer of the namespace)"), inNamespace, "kubevirt.io", "virtualmachineinstances", "", vms, "", "list", "watch")
	add(ccm("pkg/controller/virtualmachineinstance/controller.go (GuestOsInfo)"), inNamespace, "subresources.kubevirt.io", "virtualmachineinstances", "guestosinfo", vms, "", "get")
	add(ccm("pkg/cloud-controller-manager/loadbalancer.go"), inNamespace, "loadbalancer.harvesterhci.io", "loadbalancers", "", vms, "", "get", "create", "update", "delete")
	// Harvester's CSI driver, in its namespace.
	add(csi("pkg/csi/controller_server.go (host PVCs of guest volumes)"), inNamespace, "", "persistentvolumeclaims", "", vms, "", "get", "create", "update", "delete")
	add(csi("pkg/csi/manager.go (discoverVMIName), pkg/csi/node_server.go"), inNamespace, "kubevirt.io", "virtualmachineinstances", "", vms, "", "get", "list")
	add(csi("pkg/csi/controller_server.go (declarative hotplug), pkg/controller/node/controller.go"), inNamespace, "kubevirt.io", "virtualmachines", "", vms, "", "get", "patch")
	add(csi("pkg/csi/controller_server.go (AddVolume)"), inNamespace, "subresources.kubevirt.io", "virtualmachines", "addvolume", vms, "", "update")
	add(csi("pkg/csi/controller_server.go, pkg/controller/node/controller.go (RemoveVolume)"), inNamespace, "subresources.kubevirt.io", "virtualmachines", "removevolume", vms, "", "update")
	add(csi("pkg/csi/controller_server.go (RemoveVolume)"), inNamespace, "subresources.kubevirt.io", "virtualmachineinstances", "removevolume", vms, "", "update")
	add(csi("pkg/csi/controller_server.go (pods using a volume)"), inNamespace, "", "pods", "", vms, "", "list")
	add(csi("pkg/csi/controller_server.go (host VolumeSnapshots)"), inNamespace, "snapshot.storage.k8s.io", "volumesnapshots", "", vms, "", "get", "list", "create", "delete")
	add(csi("pkg/csi/controller_server.go (VolumeRemoteBackups)"), inNamespace, "harvesterhci.io", "volumeremotebackups", "", vms, "", "get", "create", "delete")
	add(csi("pkg/csi/controller_server.go (VolumeRemoteRestores, read on every DeleteVolume)"), inNamespace, "harvesterhci.io", "volumeremoterestores", "", vms, "", "get", "create", "delete")
	// Harvester's CSI driver, outside its namespace: read only.
	add(csi("pkg/csi/controller_server.go (validStorageClass, isLHRWXVolume)"), readOutside, "storage.k8s.io", "storageclasses", "", "", "", "get")
	add(csi("pkg/csi/controller_server.go (waitForVASettled)"), readOutside, "storage.k8s.io", "volumeattachments", "", "", "", "list")
	add(csi("pkg/csi/controller_server.go (getHarvCSIConfig)"), readOutside, "harvesterhci.io", "settings", "", "", "csi-driver-config", "get")
	add(csi("pkg/csi/controller_server.go, pkg/csi/node_server.go (online expansion)"), readOutside, "harvesterhci.io", "settings", "", "", "csi-online-expand-validation", "get")
	// Read at start (pkg/csi/manager.go): Harvester grants it to every authenticated user
	// (harvester/harvester pkg/data/rbac.go, whiteListedSettings).
	add(csi("pkg/csi/manager.go (server-version, at start; Harvester's grant to every authenticated user)"), readOutside, "harvesterhci.io", "settings", "", "", "server-version", "get")
	// What the provider's binding leaves out (each a warning in the driver).
	add(csi("pkg/csi/controller_server.go (RWX volumes: NetworkFilesystems in harvester-system)"), leftOut, "harvesterhci.io", "networkfilesystems", "", "harvester-system", "", "list", "get", "create", "update", "delete")
	add(csi("pkg/csi/controller_server.go (NewControllerServer: Longhorn volumes, listed once)"), leftOut, "longhorn.io", "volumes", "", "longhorn-system", "", "list")
	add(csi("pkg/csi/controller_server.go (ListSnapshots: every namespace's VolumeRemoteBackups)"), leftOut, "harvesterhci.io", "volumeremotebackups", "", "", "", "list")
	add("snapshot contents and classes (the driver reads none)", leftOut, "snapshot.storage.k8s.io", "volumesnapshotcontents", "", "", "", "get", "list", "delete")
	add("snapshot contents and classes (the driver reads none)", leftOut, "snapshot.storage.k8s.io", "volumesnapshotclasses", "", "", "", "get")
	// A neighbouring namespace: nothing.
	add("neighbouring namespace", neighbour, "kubevirt.io", "virtualmachines", "", other, "", "get", "list", "patch")
	add("neighbouring namespace", neighbour, "kubevirt.io", "virtualmachineinstances", "", other, "", "get")
	add("neighbouring namespace", neighbour, "subresources.kubevirt.io", "virtualmachines", "addvolume", other, "", "update")
	add("neighbouring namespace", neighbour, "subresources.kubevirt.io", "virtualmachines", "removevolume", other, "", "update")
	add("neighbouring namespace", neighbour, "", "persistentvolumeclaims", "", other, "", "get", "create", "delete")
	add("neighbouring namespace", neighbour, "", "secrets", "", other, "", "get")
	add("neighbouring namespace", neighbour, "snapshot.storage.k8s.io", "volumesnapshots", "", other, "", "get", "create", "delete")
	add("neighbouring namespace", neighbour, "harvesterhci.io", "volumeremotebackups", "", other, "", "get", "delete")
	add("neighbouring namespace", neighbour, "loadbalancer.harvesterhci.io", "loadbalancers", "", other, "", "get", "delete")
	return table
}

// accessReviewTable asks Harvester, as the made identity (its delivered token), about every row of
// guestAccessTable on the roles the simulator installs (where Harvester's own binding allows every
// request in the namespace).
func accessReviewTable(ctx context.Context, t *testing.T, kubeconfig []byte) {
	c, err := guestClient(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range guestAccessTable() {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name}}}
		if err := c.Create(ctx, review); err != nil {
			t.Fatalf("SelfSubjectAccessReview as the guest: %v", err)
		}
		if want := a.class == inNamespace || a.class == readOutside; review.Status.Allowed != want {
			t.Errorf("%s (%s): allowed %v, want %v (%s)", a, a.source, review.Status.Allowed, want, review.Status.Reason)
		}
	}
	// And for real: the Node's VM is read as the cloud provider reads it.
	if err := c.Get(ctx, client.ObjectKey{Namespace: "vms", Name: "tenant-cp-0"}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine"}}); err != nil {
		t.Errorf("get the VM as the guest: %v", err)
	}
}

// playerRefusesBadCredentials proves the cloud provider player cannot initialize a Node with a
// missing credential, a wrong token, a wrong namespace or a revoked token: on a second tenant API
// server, a Node named after the running VM keeps no providerID while the player has only that,
// and gets it as soon as it has the delivered credentials (the control).
func playerRefusesBadCredentials(ctx context.Context, t *testing.T, w *capiWorld, good, revoked []byte) {
	c := w.c
	other, err := testbed.StartTenant(ctx, c, ns, "forged")
	t.Cleanup(func() { _ = other.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "tenant-cp-0"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: testbed.TaintUninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}}}}
	w.must(other.Client.Create(ctx, node))
	rewrite := func(change func(cfg *clientcmdapi.Config)) []byte {
		cfg, err := clientcmd.Load(good)
		w.must(err)
		change(cfg)
		out, err := clientcmd.Write(*cfg)
		w.must(err)
		return out
	}
	for _, tc := range []struct {
		name       string
		kubeconfig []byte // nil: no Secret delivered
		says       string
	}{
		{"missing", nil, "not found"},
		{"wrong-token", rewrite(func(cfg *clientcmdapi.Config) {
			cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token = "not-a-token"
		}), "provide credentials"}, // client-go's words for a 401
		{"wrong-namespace", rewrite(func(cfg *clientcmdapi.Config) { cfg.Contexts[cfg.CurrentContext].Namespace = "default" }), "forbidden"},
		{"revoked-token", revoked, "provide credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clusterName := "forged-" + tc.name
			if tc.kubeconfig != nil {
				w.must(c.Create(ctx, forgedDelivery(clusterName, tc.kubeconfig)))
			}
			_ = other.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cloud-config"}})
			player := testbed.PlayCloudProvider(ctx, c, ns, clusterName, other)
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				w.must(other.Client.Get(ctx, client.ObjectKeyFromObject(node), node))
				if node.Spec.ProviderID != "" {
					player.Stop()
					t.Fatalf("the player set providerID %q with a %s credential", node.Spec.ProviderID, tc.name)
				}
				time.Sleep(200 * time.Millisecond)
			}
			err := player.Err()
			player.Stop()
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("the player's error %v, want it to say %q", err, tc.says)
			}
		})
	}
	// The control: the same player with the delivered credentials initializes the Node.
	w.must(c.Create(ctx, forgedDelivery("forged-good", good)))
	_ = other.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cloud-config"}})
	player := testbed.PlayCloudProvider(ctx, c, ns, "forged-good", other)
	defer player.Stop()
	waitFor(ctx, t, w.capi, "the control player to set the providerID", func() error {
		w.must(other.Client.Get(ctx, client.ObjectKeyFromObject(node), node))
		if !strings.HasPrefix(node.Spec.ProviderID, harvester.ProviderIDPrefix) {
			return fmt.Errorf("providerID %q (player: %w)", node.Spec.ProviderID, player.Err())
		}
		return nil
	})
}

// forgedDelivery is a delivered Secret, in the contract's shape, for Cluster clusterName.
func forgedDelivery(clusterName string, kubeconfig []byte) *corev1.Secret {
	manifest, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "cloud-config", "namespace": "kube-system"}, "data": map[string][]byte{"cloud-config": kubeconfig}})
	if err != nil {
		panic(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName + testbed.CloudConfigSecretSuffix,
		Labels: map[string]string{testbed.ClusterNameLabel: clusterName}},
		Type: testbed.ClusterResourceSetSecretType, Data: map[string][]byte{testbed.CloudConfigSecretKey: manifest}}
}

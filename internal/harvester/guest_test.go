package harvester

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

func guestOwner() Owner {
	return Owner{Kind: "HarvesterCluster", Namespace: "tenants", Name: "tenant", UID: "uid-1", Cluster: "mgmt-1"}
}

func TestGuestNames(t *testing.T) {
	long := strings.Repeat("n", 63)
	for name, tc := range map[string]struct {
		owner     Owner
		namespace string
		check     func(*testing.T, GuestNames)
	}{
		"short": {guestOwner(), "vms", func(t *testing.T, n GuestNames) {
			if !strings.HasPrefix(n.ServiceAccount, "butler-guest-tenants-tenant-") || n.TokenSecret != n.ServiceAccount+"-token" ||
				n.SpareTokenSecret != n.ServiceAccount+"-token2" || n.OtherTokenSecret(n.TokenSecret) != n.SpareTokenSecret || n.OtherTokenSecret(n.SpareTokenSecret) != n.TokenSecret ||
				n.RoleBinding != n.ServiceAccount || n.CSIRoleBinding != n.ServiceAccount+"-csi" ||
				n.ClusterRoleBinding != "vms-"+n.ServiceAccount+"-reader" || n.WideClusterRoleBinding != "vms-"+n.ServiceAccount {
				t.Fatalf("%+v", n)
			}
		}},
		"long names fit 63 characters": {Owner{Kind: "HarvesterCluster", Namespace: long, Name: long}, long, func(t *testing.T, n GuestNames) {
			for _, s := range []string{n.ServiceAccount, n.TokenSecret, n.SpareTokenSecret, n.RoleBinding, n.CSIRoleBinding, n.ClusterRoleBinding, n.WideClusterRoleBinding} {
				if errs := validation.IsDNS1123Label(s); len(errs) > 0 {
					t.Fatalf("%q: %v", s, errs)
				}
			}
		}},
		"dots are not kept": {Owner{Kind: "HarvesterCluster", Namespace: "a", Name: "b.c"}, "vms", func(t *testing.T, n GuestNames) {
			if errs := validation.IsDNS1123Label(n.ServiceAccount); len(errs) > 0 {
				t.Fatalf("%q: %v", n.ServiceAccount, errs)
			}
		}},
	} {
		t.Run(name, func(t *testing.T) { tc.check(t, GuestNamesFor(tc.owner, tc.namespace)) })
	}
	// Owners whose joined names are the same get different identities; the UID plays no part
	// (the identity is found again after a move to another management cluster).
	a, b := GuestNamesFor(Owner{Namespace: "a-b", Name: "c"}, "vms"), GuestNamesFor(Owner{Namespace: "a", Name: "b-c"}, "vms")
	if a.ServiceAccount == b.ServiceAccount {
		t.Fatalf("a-b/c and a/b-c share %s", a.ServiceAccount)
	}
	moved := guestOwner()
	moved.UID, moved.Cluster = "uid-2", "mgmt-2"
	if GuestNamesFor(moved, "vms") != GuestNamesFor(guestOwner(), "vms") {
		t.Fatal("the names depend on the owner's UID or management cluster")
	}
}

func TestBuildGuestObjects(t *testing.T) {
	o := guestOwner()
	sa := BuildGuestServiceAccount(o, "vms")
	sa.UID = "sa-uid"
	names := GuestNamesFor(o, "vms")
	for name, tc := range map[string]func(*testing.T){
		"ServiceAccount in the VMs' namespace, no token mounted": func(t *testing.T) {
			if sa.Namespace != "vms" || sa.Name != names.ServiceAccount || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
				t.Fatalf("%+v", sa)
			}
		},
		"labelled with the owner, without its UID": func(t *testing.T) {
			if sa.Labels[LabelOwnerKind] != "HarvesterCluster" || sa.Labels[LabelMachineRequestNamespace] != "tenants" || sa.Labels[LabelMachineRequestName] != "tenant" ||
				sa.Labels[LabelManagedBy] != ManagedByValue || sa.Annotations[AnnotationMachineRequest] != "tenants/tenant" {
				t.Fatalf("labels %v annotations %v", sa.Labels, sa.Annotations)
			}
			if _, ok := sa.Labels[LabelMachineRequestUID]; ok {
				t.Fatalf("labels %v carry the UID", sa.Labels)
			}
			if !isGuestOf(sa, o) || isGuestOf(sa, Owner{Kind: "HarvesterCluster", Namespace: "tenants", Name: "other"}) {
				t.Fatal("isGuestOf")
			}
		},
		"token Secret as generate_addon.sh writes it": func(t *testing.T) {
			s := BuildGuestTokenSecret(o, sa, names.TokenSecret)
			if s.Type != corev1.SecretTypeServiceAccountToken || s.Name != names.TokenSecret || s.Namespace != "vms" ||
				s.Annotations[corev1.ServiceAccountNameKey] != sa.Name || s.Annotations[corev1.ServiceAccountUIDKey] != "sa-uid" {
				t.Fatalf("%+v", s)
			}
			if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "ServiceAccount" || s.OwnerReferences[0].UID != "sa-uid" {
				t.Fatalf("owner references %+v", s.OwnerReferences)
			}
			if len(s.Data) != 0 {
				t.Fatal("data set: kube-controller-manager fills it in")
			}
		},
		"RoleBinding to the cloud provider's role in the VMs' namespace": func(t *testing.T) {
			rb := BuildGuestRoleBinding(o, "vms")
			if rb.Namespace != "vms" || rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "harvesterhci.io:cloudprovider"}) ||
				len(rb.Subjects) != 1 || rb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Namespace: "vms", Name: sa.Name}) {
				t.Fatalf("%+v", rb)
			}
		},
		"RoleBinding to the CSI driver's role in the VMs' namespace": func(t *testing.T) {
			rb := BuildGuestCSIRoleBinding(o, "vms")
			if rb.Namespace != "vms" || rb.Name != names.CSIRoleBinding || rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "harvesterhci.io:csi-driver"}) ||
				len(rb.Subjects) != 1 || rb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Namespace: "vms", Name: sa.Name}) {
				t.Fatalf("%+v", rb)
			}
		},
		"ClusterRoleBinding to the read-only role only": func(t *testing.T) {
			crb := BuildGuestClusterRoleBinding(o, "vms")
			if crb.Namespace != "" || crb.Name != names.ClusterRoleBinding || crb.RoleRef.Name != GuestReaderRole ||
				len(crb.Subjects) != 1 || crb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Namespace: "vms", Name: sa.Name}) {
				t.Fatalf("%+v", crb)
			}
		},
	} {
		t.Run(name, tc)
	}
}

func TestBuildGuestKubeconfig(t *testing.T) {
	for name, ca := range map[string][]byte{
		"a CA":         []byte("ca"),
		"system roots": nil,
	} {
		t.Run(name, func(t *testing.T) {
			data, err := BuildGuestKubeconfig("https://10.0.0.1:6443", ca, "vms", []byte("tok"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.Load(data)
			if err != nil {
				t.Fatal(err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
			if ctx.Namespace != "vms" || cl.Server != "https://10.0.0.1:6443" || string(cl.CertificateAuthorityData) != string(ca) ||
				cl.InsecureSkipTLSVerify || user.Token != "tok" || user.TokenFile != GuestTokenFile {
				t.Fatalf("context %+v cluster %+v", ctx, cl)
			}
			// As client-go loads it where the token file is not mounted (a pod of older
			// templates): the inline token, and the file to read again later.
			rc, err := clientcmd.RESTConfigFromKubeConfig(data)
			if err != nil || rc.BearerToken != "tok" || rc.BearerTokenFile != GuestTokenFile {
				t.Fatalf("client-go's config: %v", err)
			}
		})
	}
}

// config/harvester/guest-rbac.yaml, with rbac.yaml's secrets, grants exactly GuestPermissions:
// bind only on the three roles a guest identity is bound to, no escalate.
func TestDocumentedGuestRBACIsGuestPermissions(t *testing.T) {
	granted := grantedBy(t, "../../config/harvester/guest-rbac.yaml")
	main := grantedBy(t, "../../config/harvester/rbac.yaml")
	var want []string
	for _, p := range GuestPermissions("default") {
		if slices.Contains(main, p.String()) {
			continue // granted by rbac.yaml (the token Secret is a Secret of the namespace)
		}
		want = append(want, p.String())
	}
	slices.Sort(granted)
	slices.Sort(want)
	if !slices.Equal(granted, want) {
		t.Errorf("config/harvester/guest-rbac.yaml grants\n  %v\nbut GuestPermissions (less rbac.yaml's) is\n  %v", granted, want)
	}
	for _, g := range granted {
		if strings.HasPrefix(g, "escalate") || strings.HasPrefix(g, "bind") && !strings.Contains(g, "harvesterhci.io:") && !strings.Contains(g, GuestReaderRole) {
			t.Errorf("guest-rbac.yaml grants %q", g)
		}
	}
}

// config/harvester/guest-rbac.yaml installs GuestReaderRole as GuestReaderClusterRole builds it,
// and it only reads.
func TestDocumentedGuestReaderRole(t *testing.T) {
	data, err := os.ReadFile("../../config/harvester/guest-rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := GuestReaderClusterRole()
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	found := false
	for {
		var role rbacv1.ClusterRole
		if err := dec.Decode(&role); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if role.Kind != "ClusterRole" || role.Name != GuestReaderRole {
			continue
		}
		found = true
		if !equality.Semantic.DeepEqual(role.Rules, want.Rules) {
			t.Errorf("guest-rbac.yaml's %s rules\n  %+v\nGuestReaderClusterRole's\n  %+v", GuestReaderRole, role.Rules, want.Rules)
		}
	}
	if !found {
		t.Fatalf("guest-rbac.yaml has no ClusterRole %s", GuestReaderRole)
	}
	for _, r := range want.Rules {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("%s grants %s on %v", GuestReaderRole, v, r.Resources)
			}
		}
	}
}

// grantedBy lists what the Roles and ClusterRoles of a manifest grant, as Permission strings.
func grantedBy(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var granted []string
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj struct {
			Kind     string
			Metadata struct{ Namespace, Name string }
			Rules    []rbacv1.PolicyRule
		}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "Role" && obj.Kind != "ClusterRole" || obj.Metadata.Name == GuestReaderRole {
			continue // GuestReaderRole is the guests', not the provider's
		}
		for _, r := range obj.Rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						p := Permission{Verb: v, Group: g, Resource: res, Namespace: obj.Metadata.Namespace}
						if len(r.ResourceNames) == 0 {
							granted = append(granted, p.String())
						}
						for _, name := range r.ResourceNames {
							p.Name = name
							granted = append(granted, p.String())
						}
					}
				}
			}
		}
	}
	return granted
}

// fillToken plays kube-controller-manager's token controller on a fake client.
func fillToken(t *testing.T, c client.Client, namespace, name, token string) {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{corev1.ServiceAccountTokenKey: []byte(token)}
	if err := c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureGuest(t *testing.T) {
	ctx := context.Background()
	o := guestOwner()
	names := GuestNamesFor(o, "vms")
	spec := GuestSpec{Owner: o, Namespace: "vms"}

	t.Run("made, pending, issued, kept, revoked", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(readerRole()).Build()
		g := newTestCluster(c)
		_, err := g.EnsureGuest(ctx, spec)
		if w, ok := errkind.AsWaiting(err); !ok || w.Reason != ReasonGuestTokenPending {
			t.Fatalf("before the token is filled in: %v", err)
		}
		for _, obj := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.RoleBinding{}} {
			if err := c.Get(ctx, client.ObjectKey{Namespace: "vms", Name: names.ServiceAccount}, obj); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "vms", Name: names.CSIRoleBinding}, &rbacv1.RoleBinding{}); err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: names.ClusterRoleBinding}, &rbacv1.ClusterRoleBinding{}); err != nil {
			t.Fatal(err)
		}
		fillToken(t, c, "vms", names.TokenSecret, "t1")
		creds, err := g.EnsureGuest(ctx, spec)
		if err != nil || string(tokenIn(t, creds.Kubeconfig)) != "t1" || creds.Source == "" {
			t.Fatalf("issued: %v %v", creds.Source, err)
		}
		if creds.TokenSecret != names.TokenSecret || string(creds.Token) != "t1" {
			t.Fatalf("issued from %s", creds.TokenSecret)
		}
		if state, err := g.CheckGuest(ctx, o, "vms", "", creds.Kubeconfig, GuestEndpoint{}); state != (GuestState{TokenValid: true, Narrow: true, Endpoint: creds.Endpoint}) || err != nil {
			t.Fatalf("CheckGuest %+v %v", state, err)
		}
		// Asked again: the same token.
		again, err := g.EnsureGuest(ctx, spec)
		if err != nil || again.Issued || string(tokenIn(t, again.Kubeconfig)) != "t1" {
			t.Fatalf("kept: issued %v, %v", again.Issued, err)
		}
		// Re-issued in the spare token Secret: pending, then filled; the one before still valid.
		reissue := GuestSpec{Owner: o, Namespace: "vms", TokenSecret: names.OtherTokenSecret(names.TokenSecret)}
		if _, err := g.EnsureGuest(ctx, reissue); !isWaiting(err, ReasonGuestTokenPending) {
			t.Fatalf("re-issued: %v", err)
		}
		fillToken(t, c, "vms", names.SpareTokenSecret, "t2")
		rotated, err := g.EnsureGuest(ctx, reissue)
		if err != nil || !rotated.Issued && string(rotated.Token) != "t2" || rotated.TokenSecret != names.SpareTokenSecret || string(tokenIn(t, rotated.Kubeconfig)) != "t2" {
			t.Fatalf("re-issued: %+v %v", rotated.TokenSecret, err)
		}
		if state, _ := g.CheckGuest(ctx, o, "vms", names.TokenSecret, creds.Kubeconfig, GuestEndpoint{}); !state.TokenValid {
			t.Fatal("the token before is not valid during the overlap")
		}
		// Retired: its Secret goes, which revokes it.
		if done, err := g.RetireGuestToken(ctx, o, "vms", names.TokenSecret); done || err != nil {
			t.Fatalf("RetireGuestToken %v %v", done, err)
		}
		if done, err := g.RetireGuestToken(ctx, o, "vms", names.TokenSecret); !done || err != nil {
			t.Fatalf("RetireGuestToken again %v %v", done, err)
		}
		if state, _ := g.CheckGuest(ctx, o, "vms", names.TokenSecret, creds.Kubeconfig, GuestEndpoint{}); state.TokenValid {
			t.Fatal("the retired token is still valid")
		}
		if state, _ := g.CheckGuest(ctx, o, "vms", names.SpareTokenSecret, rotated.Kubeconfig, GuestEndpoint{}); !state.TokenValid {
			t.Fatal("the re-issued token is not valid")
		}
		// Deleted: everything of ours goes.
		done, err := g.DeleteGuest(ctx, o, "vms")
		if err != nil || !done {
			t.Fatalf("DeleteGuest %v %v", done, err)
		}
		for _, list := range []client.ObjectList{&corev1.ServiceAccountList{}, &corev1.SecretList{}, &rbacv1.RoleBindingList{}, &rbacv1.ClusterRoleBindingList{}} {
			if err := c.List(ctx, list); err != nil {
				t.Fatal(err)
			}
			if items, _ := meta.ExtractList(list); len(items) != 0 {
				t.Fatalf("left: %v", items)
			}
		}
	})

	t.Run("a name taken by another is never changed or deleted", func(t *testing.T) {
		theirs := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: names.ServiceAccount}}
		c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(theirs, readerRole()).Build()
		g := newTestCluster(c)
		_, err := g.EnsureGuest(ctx, spec)
		if p, ok := errkind.AsPermanent(err); !ok || p.Reason != ReasonNameTaken || !strings.Contains(p.Message, "ServiceAccount vms/"+names.ServiceAccount) {
			t.Fatalf("%v", err)
		}
		if done, err := g.DeleteGuest(ctx, o, "vms"); err != nil || !done {
			t.Fatalf("DeleteGuest %v %v", done, err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(theirs), theirs); err != nil {
			t.Fatalf("theirs: %v", err)
		}
	})

	t.Run("found again after a move (another UID)", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(readerRole()).Build()
		g := newTestCluster(c)
		_, _ = g.EnsureGuest(ctx, spec)
		fillToken(t, c, "vms", names.TokenSecret, "t1")
		moved := o
		moved.UID = "uid-2"
		creds, err := g.EnsureGuest(ctx, GuestSpec{Owner: moved, Namespace: "vms"})
		if err != nil || string(tokenIn(t, creds.Kubeconfig)) != "t1" {
			t.Fatalf("after a move: %v", err)
		}
	})

	t.Run("the read-only role not installed: nothing bound cluster-wide", func(t *testing.T) {
		c := fake.NewClientBuilder().WithScheme(remoteScheme).Build()
		g := newTestCluster(c)
		_, err := g.EnsureGuest(ctx, spec)
		if w, ok := errkind.AsWaiting(err); !ok || w.Reason != ReasonGuestReaderRoleMissing || !strings.Contains(w.Message, "config/harvester/guest-rbac.yaml") {
			t.Fatalf("%v", err)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: names.ClusterRoleBinding}, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the reader binding was made: %v", err)
		}
	})

	// An identity made with Harvester's cluster-wide binding of the CSI driver's role: CheckGuest
	// says it is not narrow, EnsureGuest binds it narrow, then deletes the wide binding, with the
	// same token; a wide-named binding of someone else is never deleted.
	t.Run("narrowed in place", func(t *testing.T) {
		wide := &rbacv1.ClusterRoleBinding{
			ObjectMeta: guestMeta(o, "", names.WideClusterRoleBinding),
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "vms", Name: names.ServiceAccount}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: GuestCSIDriverRole},
		}
		sa := BuildGuestServiceAccount(o, "vms")
		c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(readerRole(), wide, sa, BuildGuestRoleBinding(o, "vms")).Build()
		g := newTestCluster(c)
		if err := c.Get(ctx, client.ObjectKeyFromObject(sa), sa); err != nil {
			t.Fatal(err)
		}
		token := BuildGuestTokenSecret(o, sa, names.TokenSecret)
		token.Data = map[string][]byte{corev1.ServiceAccountTokenKey: []byte("t1")}
		if err := c.Create(ctx, token); err != nil {
			t.Fatal(err)
		}
		kubeconfig, err := BuildGuestKubeconfig("https://harvester:6443", nil, "vms", []byte("t1"))
		if err != nil {
			t.Fatal(err)
		}
		if state, err := g.CheckGuest(ctx, o, "vms", "", kubeconfig, GuestEndpoint{}); !state.TokenValid || state.Narrow || err != nil {
			t.Fatalf("before: CheckGuest %+v %v", state, err)
		}
		creds, err := g.EnsureGuest(ctx, spec)
		if err != nil || creds.Issued || string(tokenIn(t, creds.Kubeconfig)) != "t1" {
			t.Fatalf("narrowed: issued %v, %v", creds.Issued, err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(wide), &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the wide binding: %v", err)
		}
		if state, err := g.CheckGuest(ctx, o, "vms", "", kubeconfig, GuestEndpoint{}); !state.TokenValid || !state.Narrow || err != nil {
			t.Fatalf("after: CheckGuest %+v %v", state, err)
		}

		theirs := wide.DeepCopy()
		theirs.ResourceVersion, theirs.Labels = "", nil
		if err := c.Create(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		if _, err := g.EnsureGuest(ctx, spec); err != nil {
			t.Fatal(err)
		}
		if state, _ := g.CheckGuest(ctx, o, "vms", "", kubeconfig, GuestEndpoint{}); !state.Narrow {
			t.Fatal("someone else's binding of the wide name counts as the owner's")
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(theirs), &rbacv1.ClusterRoleBinding{}); err != nil {
			t.Fatalf("someone else's binding of the wide name: %v", err)
		}
	})
}

// The tenants' server: the operator's, else Harvester's VIP on 6443 with the token's CA, else the
// provider's own server with its own CA (or the token's where the provider pins none); never
// without verification.
func TestTenantServer(t *testing.T) {
	ctx := context.Background()
	vip := func(ip string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "harvester-system", Name: "vip"}, Data: map[string]string{"ip": ip, "mode": "static"}}
	}
	for name, tc := range map[string]struct {
		objs       []client.Object
		providerCA []byte
		override   GuestEndpoint
		server, ca string
	}{
		"Harvester's VIP, as its generator writes it": {objs: []client.Object{vip("10.0.0.9")}, providerCA: []byte("provider-ca"), server: "https://10.0.0.9:6443", ca: "token-ca"},
		"an IPv6 VIP":                            {objs: []client.Object{vip("fd00::9")}, server: "https://[fd00::9]:6443", ca: "token-ca"},
		"the operator's server":                  {objs: []client.Object{vip("10.0.0.9")}, override: GuestEndpoint{Server: "https://harvester.example.com"}, server: "https://harvester.example.com", ca: "token-ca"},
		"the operator's server and CA":           {override: GuestEndpoint{Server: "https://lb.example.com:443", CA: []byte("lb-ca")}, server: "https://lb.example.com:443", ca: "lb-ca"},
		"no VIP: the provider's server and CA":   {providerCA: []byte("provider-ca"), server: "https://harvester.example:6443", ca: "provider-ca"},
		"no VIP, the provider pins no CA":        {server: "https://harvester.example:6443", ca: "token-ca"},
		"a VIP that is not an address is no VIP": {objs: []client.Object{vip("")}, server: "https://harvester.example:6443", ca: "token-ca"},
	} {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(remoteScheme).WithObjects(tc.objs...).Build()
			rc := clustercache.NewCluster(c, nil, nil, "https://harvester.example:6443", "")
			rc.SetTrust(clustercache.Trust{CAData: tc.providerCA})
			g := NewCluster(rc).(*engine)
			server, ca, err := g.remote.tenantServer(ctx, tc.override, []byte("token-ca"))
			if err != nil || server != tc.server || string(ca) != tc.ca {
				t.Fatalf("server %q CA %q (%v), want %q %q", server, ca, err, tc.server, tc.ca)
			}
		})
	}
}

func isWaiting(err error, reason string) bool {
	w, ok := errkind.AsWaiting(err)
	return ok && w.Reason == reason
}

func readerRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: GuestReaderRole}}
}

func tokenIn(t *testing.T, kubeconfig []byte) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token)
}

package harvester

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/butlerdotdev/butler-provider-harvester/internal/clustercache"
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
				n.RoleBinding != n.ServiceAccount || n.ClusterRoleBinding != "vms-"+n.ServiceAccount {
				t.Fatalf("%+v", n)
			}
		}},
		"long names fit 63 characters": {Owner{Kind: "HarvesterCluster", Namespace: long, Name: long}, long, func(t *testing.T, n GuestNames) {
			for _, s := range []string{n.ServiceAccount, n.TokenSecret, n.RoleBinding, n.ClusterRoleBinding} {
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
			s := BuildGuestTokenSecret(o, sa)
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
		"ClusterRoleBinding to the CSI driver's role": func(t *testing.T) {
			crb := BuildGuestClusterRoleBinding(o, "vms")
			if crb.Namespace != "" || crb.Name != names.ClusterRoleBinding || crb.RoleRef.Name != "harvesterhci.io:csi-driver" ||
				len(crb.Subjects) != 1 || crb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Namespace: "vms", Name: sa.Name}) {
				t.Fatalf("%+v", crb)
			}
		},
	} {
		t.Run(name, tc)
	}
}

func TestBuildGuestKubeconfig(t *testing.T) {
	for name, tc := range map[string]struct {
		trust        clustercache.Trust
		wantCA       string
		wantInsecure bool
	}{
		"the CA the provider pins": {clustercache.Trust{CAData: []byte("ca")}, "ca", false},
		"system roots":             {clustercache.Trust{}, "", false},
		"insecure, as allowed":     {clustercache.Trust{Insecure: true}, "", true},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := BuildGuestKubeconfig("https://10.0.0.1:6443", tc.trust, "vms", []byte("tok"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := clientcmd.Load(data)
			if err != nil {
				t.Fatal(err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
			if ctx.Namespace != "vms" || cl.Server != "https://10.0.0.1:6443" || string(cl.CertificateAuthorityData) != tc.wantCA ||
				cl.InsecureSkipTLSVerify != tc.wantInsecure || user.Token != "tok" {
				t.Fatalf("context %+v cluster %+v", ctx, cl)
			}
			// Self-contained, as the provider itself requires of a kubeconfig.
			if _, err := clustercache.RESTConfigFromKubeconfig(data, clustercache.KubeconfigOptions{AllowInsecure: true}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// config/harvester/guest-rbac.yaml, with rbac.yaml's secrets, grants exactly GuestPermissions:
// bind only on Harvester's two roles, no escalate.
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
		if strings.HasPrefix(g, "escalate") || strings.HasPrefix(g, "bind") && !strings.Contains(g, "harvesterhci.io:") {
			t.Errorf("guest-rbac.yaml grants %q", g)
		}
	}
}

// grantedBy lists what the Roles and ClusterRoles of a manifest grant, as Permission strings.
func grantedBy(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path) //nolint:gosec // G304: the repository's own manifest
	if err != nil {
		t.Fatal(err)
	}
	var granted []string
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj struct {
			Kind     string
			Metadata struct{ Namespace string }
			Rules    []rbacv1.PolicyRule
		}
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "Role" && obj.Kind != "ClusterRole" {
			continue
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

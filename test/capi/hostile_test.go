package capi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/test/testbed"
)

// The hostile tenant of TestClusterAPITenantHostileTakesNothing: its management namespace, its
// cluster, and the platform's ProviderConfig it is given (in namespace platform, whose Secrets it
// cannot read), for Harvester namespace vms-b.
const (
	hostileNamespace = "hostile"
	platformNS       = "platform"
)

var hostile = testbed.TenantCluster{Namespace: hostileNamespace, Name: "hostile",
	ProviderConfig: infrav1.ProviderConfigReference{Namespace: platformNS, Name: "harvester-b"},
	Endpoint:       infrav1.APIEndpoint{Host: "10.40.0.251", Port: 6443},
	MachineSpec:    tenant.MachineSpec,
}

// TestClusterAPITenantHostileTakesNothing runs two tenants on one simulated Harvester with the
// real Cluster API core manager: the victim (namespace tenants, Harvester namespace vms) and a
// hostile tenant (namespace hostile, the platform's ProviderConfig for vms-b) that has exactly a
// tenant's rights (Cluster API and infrastructure objects and Secrets in its own namespace,
// through real RBAC) and its cluster's delivered Harvester credentials. It tries: a
// HarvesterCluster naming the victim's ProviderConfig; a placement record naming the victim's VM
// (with the hand-over annotation, and through a HarvesterMachineTemplate); a copied providerID;
// skip-cleanup on its own machine; and its credentials against the victim's VM and disk. Each
// attempt takes, changes and deletes nothing of the victim's, and the hostile object says why.
func TestClusterAPITenantHostileTakesNothing(t *testing.T) {
	t.Parallel()
	w := startCAPIWorld(t)
	ctx, c, hv := w.ctx, w.c, w.hv

	// The victim: a cluster with one machine, and its credentials.
	w.tenantCluster()
	victimMachine := w.machine("tenant-md-0", "")
	victimVM, victimHM := &kubevirtv1.VirtualMachine{}, &infrav1.HarvesterMachine{}
	waitFor(ctx, t, w.capi, "the victim's machine on Harvester", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", victimMachine, victimVM, victimHM)
	})
	victimHC := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tenant.Name}}
	w.waitIsolated(victimHC, metav1.ConditionTrue, infrav1.ReasonGuestNamespaceExclusive)
	victimCreds := w.deliveredKubeconfig(victimHC)
	victimDisk := &corev1.PersistentVolumeClaimList{}
	w.must(hv.Client.List(ctx, victimDisk, client.InNamespace("vms")))
	if len(victimDisk.Items) != 1 {
		t.Fatalf("%d disks of the victim, want 1", len(victimDisk.Items))
	}

	// The platform: Harvester namespace vms-b, a platform ProviderConfig for it; the hostile
	// tenant's namespace and its rights.
	w.must(hv.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vms-b"}}))
	for _, name := range []string{platformNS, hostileNamespace} {
		w.must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	}
	w.must(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: platformNS, Name: "harvester-kubeconfig"}, Data: map[string][]byte{"kubeconfig": hv.Kubeconfig}}))
	w.must(c.Create(ctx, &v1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Namespace: platformNS, Name: "harvester-b"}, Spec: v1alpha1.ProviderConfigSpec{
		Provider: v1alpha1.ProviderTypeHarvester, CredentialsRef: &v1alpha1.SecretReference{Name: "harvester-kubeconfig"},
		Harvester: &v1alpha1.HarvesterProviderConfig{Namespace: "vms-b", NetworkName: "vms/vlan40", ImageName: "vms/ubuntu"},
		Scope:     &v1alpha1.ProviderConfigScope{Type: v1alpha1.ProviderConfigScopePlatform},
	}}))
	hc := w.hostileClient()

	// Its own cluster, whose credentials it reads as the tenant cluster's admin would.
	w.must(testbed.CreateAll(ctx, hc, hostile.ClusterObjects()...))
	ownHM, ownMachine := hostile.Machine("hostile-md-0", "")
	w.must(testbed.CreateAll(ctx, hc, ownHM, ownMachine))
	hostileHC := &infrav1.HarvesterCluster{ObjectMeta: metav1.ObjectMeta{Namespace: hostileNamespace, Name: hostile.Name}}
	w.waitIsolated(hostileHC, metav1.ConditionTrue, infrav1.ReasonGuestNamespaceExclusive)
	waitFor(ctx, t, w.capi, "the hostile tenant's own machine on Harvester", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms-b", ownMachine, &kubevirtv1.VirtualMachine{}, &infrav1.HarvesterMachine{})
	})
	hostileCreds := deliveredKubeconfigOf(t, w.secret(hostileNamespace, hostile.Name+testbed.CloudConfigSecretSuffix))

	t.Run("AProviderConfigNotSharedWithIt", func(t *testing.T) {
		stolen := hostile
		stolen.Name, stolen.ProviderConfig = "hostile-stolen", infrav1.ProviderConfigReference{Namespace: ns, Name: "harvester"}
		w.must(testbed.CreateAll(ctx, hc, stolen.ClusterObjects()...))
		hcStolen := &infrav1.HarvesterCluster{}
		waitFor(ctx, t, w.capi, "the HarvesterCluster on another namespace's ProviderConfig refused", func() error {
			w.must(c.Get(ctx, client.ObjectKey{Namespace: hostileNamespace, Name: stolen.Name}, hcStolen))
			cond := findCondition(hcStolen.Status.Conditions, infrav1.ConditionReady)
			if cond == nil || cond.Reason != v1alpha1.ReasonProviderConfigNotShared || !strings.Contains(cond.Message, "ProviderConfig tenants/harvester") {
				return fmt.Errorf("Ready %+v", cond)
			}
			return nil
		})
		sas := &corev1.ServiceAccountList{}
		w.must(hv.Client.List(ctx, sas, client.MatchingLabels{harvester.LabelMachineRequestName: stolen.Name}))
		if len(sas.Items) != 0 {
			t.Fatalf("credentials made for a HarvesterCluster on a ProviderConfig not shared with it: %d", len(sas.Items))
		}
	})

	t.Run("APlacementRecordNamingTheVictimsVM", func(t *testing.T) {
		own, err := v1alpha1.DecodePlacement(victimHM.Annotations)
		if err != nil || own == nil {
			t.Fatalf("the victim's placement record: %v (%v)", own, err)
		}
		forged, forgedMachine := hostile.Machine("hostile-forged", "")
		forged.Annotations = map[string]string{
			infrav1.AnnotationPlacement: v1alpha1.EncodePlacement(v1alpha1.Placement{ClusterID: own.ClusterID, Server: own.Server, Namespace: "vms", Name: victimVM.Name}),
			infrav1.AnnotationHandOver:  "true",
		}
		w.must(testbed.CreateAll(ctx, hc, forged, forgedMachine))
		w.readyConditionIn(hostileNamespace, forged.Name, infrav1.ReasonPlacementRefused, "records VM vms/"+victimVM.Name+", which is not this machine's")
		w.victimUntouched(victimVM, victimDisk.Items[0])
		w.must(hc.Delete(ctx, forgedMachine))
		w.gone(hostileNamespace, forged.Name)
		w.victimUntouched(victimVM, victimDisk.Items[0])
	})

	// The same record through a template: Cluster API copies the template's metadata to the
	// HarvesterMachines it makes.
	t.Run("APlacementRecordThroughATemplate", func(t *testing.T) {
		own, err := v1alpha1.DecodePlacement(victimHM.Annotations)
		if err != nil || own == nil {
			t.Fatalf("the victim's placement record: %v (%v)", own, err)
		}
		tmpl, md := hostile.MachineDeployment("hostile-md", 1)
		tmpl.Spec.Template.ObjectMeta.Annotations = map[string]string{
			infrav1.AnnotationPlacement: v1alpha1.EncodePlacement(v1alpha1.Placement{ClusterID: own.ClusterID, Server: own.Server, Namespace: "vms", Name: victimVM.Name}),
		}
		w.must(testbed.CreateAll(ctx, hc, tmpl, md))
		var made string
		waitFor(ctx, t, w.capi, "the MachineDeployment's HarvesterMachine refused", func() error {
			list := &infrav1.HarvesterMachineList{}
			w.must(c.List(ctx, list, client.InNamespace(hostileNamespace), client.MatchingLabels{testbed.DeploymentNameLabel: "hostile-md"}))
			if len(list.Items) == 0 {
				return fmt.Errorf("no HarvesterMachine yet")
			}
			made = list.Items[0].Name
			return nil
		})
		w.readyConditionIn(hostileNamespace, made, infrav1.ReasonPlacementRefused, "records VM vms/"+victimVM.Name+", which is not this machine's")
		w.victimUntouched(victimVM, victimDisk.Items[0])
		w.must(hc.Delete(ctx, md))
		w.gone(hostileNamespace, made)
		w.victimUntouched(victimVM, victimDisk.Items[0])
	})

	t.Run("ACopiedProviderID", func(t *testing.T) {
		copied, copiedMachine := hostile.Machine("hostile-copied", "")
		copied.Spec.ProviderID = harvester.ProviderIDPrefix + string(victimVM.UID)
		w.must(testbed.CreateAll(ctx, hc, copied, copiedMachine))
		w.readyConditionIn(hostileNamespace, copied.Name, infrav1.ReasonPlacementRefused, "spec.providerID of HarvesterMachine hostile/hostile-copied is "+copied.Spec.ProviderID)
		if err := hv.Client.Get(ctx, types.NamespacedName{Namespace: "vms-b", Name: copied.Name}, &kubevirtv1.VirtualMachine{}); !apierrors.IsNotFound(err) {
			t.Errorf("a VM made for a HarvesterMachine with a copied providerID: %v", err)
		}
		w.victimUntouched(victimVM, victimDisk.Items[0])
		w.must(hc.Delete(ctx, copiedMachine))
		w.gone(hostileNamespace, copied.Name)
		w.victimUntouched(victimVM, victimDisk.Items[0])
	})

	t.Run("SkipCleanupOnItsOwnMachine", func(t *testing.T) {
		w.must(c.Get(ctx, client.ObjectKeyFromObject(ownHM), ownHM))
		ownHM.Annotations[infrav1.AnnotationSkipHarvesterCleanup] = "true"
		w.must(hc.Update(ctx, ownHM))
		w.must(hc.Delete(ctx, ownMachine))
		w.gone(hostileNamespace, ownHM.Name)
		waitFor(ctx, t, w.capi, "the VM of a machine deleted with skip-cleanup deleted all the same", func() error {
			return goneFrom(ctx, hv.Client, &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "vms-b", Name: ownHM.Name}})
		})
	})

	t.Run("ItsCredentialsAgainstTheVictim", func(t *testing.T) {
		g, err := guestClient(hostileCreds)
		w.must(err)
		vm := &unstructured.Unstructured{}
		vm.SetGroupVersionKind(kubevirtv1.VirtualMachineGroupVersionKind)
		vm.SetNamespace(victimVM.Namespace)
		vm.SetName(victimVM.Name)
		vms := &unstructured.UnstructuredList{}
		vms.SetGroupVersionKind(kubevirtv1.VirtualMachineGroupVersionKind.GroupVersion().WithKind("VirtualMachineList"))
		for name, attempt := range map[string]func() error{
			"stop the victim's VM": func() error {
				return g.Patch(ctx, vm, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"runStrategy":"Halted"}}`)))
			},
			"read the victim's disk": func() error {
				return g.Get(ctx, client.ObjectKeyFromObject(&victimDisk.Items[0]), &corev1.PersistentVolumeClaim{})
			},
			"delete the victim's disk": func() error {
				return g.Delete(ctx, victimDisk.Items[0].DeepCopy())
			},
			"list the victim's VMs": func() error {
				return g.List(ctx, vms, client.InNamespace("vms"))
			},
			"read the victim's credentials": func() error {
				return g.List(ctx, &corev1.SecretList{}, client.InNamespace("vms"))
			},
		} {
			if err := attempt(); !apierrors.IsForbidden(err) {
				t.Errorf("%s with the hostile tenant's credentials: %v, want forbidden", name, err)
			}
		}
		w.victimUntouched(victimVM, victimDisk.Items[0])
	})

	// The victim is as it was: its machine Running, its credentials valid and its own.
	w.must(whoAmI(ctx, victimCreds))
	w.waitIsolated(victimHC, metav1.ConditionTrue, infrav1.ReasonGuestNamespaceExclusive)
	waitFor(ctx, t, w.capi, "the victim's machine still on Harvester", func() error {
		return machineOnHarvester(ctx, c, hv.Client, "vms", victimMachine, &kubevirtv1.VirtualMachine{}, &infrav1.HarvesterMachine{})
	})
}

// hostileClient is a client of the management cluster with exactly a tenant's rights in namespace
// hostile (real RBAC, through impersonation of its ServiceAccount): Cluster API's and this
// provider's objects, and Secrets.
func (w *capiWorld) hostileClient() client.Client {
	w.t.Helper()
	w.must(w.c.Create(w.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: hostileNamespace, Name: "tenant"}}))
	w.must(w.c.Create(w.ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: hostileNamespace, Name: "tenant"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"cluster.x-k8s.io", infrav1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
	}}))
	w.must(w.c.Create(w.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: hostileNamespace, Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: hostileNamespace, Name: "tenant"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"}}))
	cfg := rest.CopyConfig(w.cfg)
	cfg.Impersonate = *testbed.ServiceAccountUser(hostileNamespace, "tenant")
	hc, err := client.New(cfg, client.Options{Scheme: w.scheme})
	w.must(err)
	// The rights are what the tests say: nothing of the victim's namespace.
	if err := hc.List(w.ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		w.t.Fatalf("the hostile tenant lists Secrets of namespace %s: %v", ns, err)
	}
	return hc
}

// readyConditionIn waits for a HarvesterMachine's Ready condition to be False with reason (any,
// if empty) and to mention something (nothing, if empty).
func (w *capiWorld) readyConditionIn(namespace, name, reason, mention string) {
	w.t.Helper()
	waitFor(w.ctx, w.t, w.capi, "HarvesterMachine "+namespace+"/"+name+" refused", func() error {
		hm := &infrav1.HarvesterMachine{}
		w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: namespace, Name: name}, hm))
		cond := findCondition(hm.Status.Conditions, infrav1.ConditionReady)
		if cond == nil || cond.Status != metav1.ConditionFalse || reason != "" && cond.Reason != reason || !strings.Contains(cond.Message, mention) ||
			cond.Reason == infrav1.ReasonWaitingForClusterInfrastructure {
			return fmt.Errorf("Ready %+v", cond)
		}
		w.t.Logf("HarvesterMachine %s/%s: Ready False, %s: %s", namespace, name, cond.Reason, cond.Message)
		return nil
	})
}

// gone waits for a HarvesterMachine to be gone.
func (w *capiWorld) gone(namespace, name string) {
	w.t.Helper()
	waitFor(w.ctx, w.t, w.capi, "HarvesterMachine "+namespace+"/"+name+" to go", func() error {
		return goneFrom(w.ctx, w.c, &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})
	})
}

// goneFrom says what is left of obj: nil once the API server has it no more.
func goneFrom(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	switch {
	case err == nil:
		return fmt.Errorf("%T %s/%s is still there", obj, obj.GetNamespace(), obj.GetName())
	case apierrors.IsNotFound(err):
		return nil
	}
	return err
}

// victimUntouched checks that the victim's VM and disk are as they were: the same objects, not
// being deleted, their labels, annotations and specs unchanged.
func (w *capiWorld) victimUntouched(vm *kubevirtv1.VirtualMachine, disk corev1.PersistentVolumeClaim) {
	w.t.Helper()
	now := &kubevirtv1.VirtualMachine{}
	w.must(w.hv.Client.Get(w.ctx, client.ObjectKeyFromObject(vm), now))
	if now.UID != vm.UID || now.DeletionTimestamp != nil || !equality.Semantic.DeepEqual(now.Labels, vm.Labels) ||
		!equality.Semantic.DeepEqual(now.Annotations, vm.Annotations) || !equality.Semantic.DeepEqual(now.Spec, vm.Spec) {
		w.t.Fatalf("the victim's VM changed: UID %s (was %s), deleting %v, labels %v, annotations %v", now.UID, vm.UID, now.DeletionTimestamp, now.Labels, now.Annotations)
	}
	pvc := &corev1.PersistentVolumeClaim{}
	w.must(w.hv.Client.Get(w.ctx, client.ObjectKeyFromObject(&disk), pvc))
	if pvc.UID != disk.UID || pvc.DeletionTimestamp != nil || !equality.Semantic.DeepEqual(pvc.Labels, disk.Labels) {
		w.t.Fatalf("the victim's disk changed: UID %s (was %s), deleting %v, labels %v", pvc.UID, disk.UID, pvc.DeletionTimestamp, pvc.Labels)
	}
}

// secret reads a Secret of the management cluster.
func (w *capiWorld) secret(namespace, name string) *corev1.Secret {
	w.t.Helper()
	s := &corev1.Secret{}
	w.must(w.c.Get(w.ctx, client.ObjectKey{Namespace: namespace, Name: name}, s))
	return s
}

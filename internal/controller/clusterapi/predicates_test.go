package clusterapi

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
)

func TestCAPIChangesThatMatter(t *testing.T) {
	object := func(gvk schema.GroupVersionKind, name string, spec map[string]any) func(rv string, f func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		return func(rv string, f func(u *unstructured.Unstructured)) *unstructured.Unstructured {
			u := &unstructured.Unstructured{Object: map[string]any{"spec": runtime.DeepCopyJSON(spec)}}
			u.SetGroupVersionKind(gvk)
			u.SetNamespace("ns")
			u.SetName(name)
			u.SetResourceVersion(rv)
			if f != nil {
				f(u)
			}
			return u
		}
	}
	cluster := object(capiClusterGVK, "c", map[string]any{
		"infrastructureRef": map[string]any{"kind": "HarvesterCluster", "name": "hc"}, "controlPlaneEndpoint": map[string]any{"host": "10.0.0.1"},
	})
	machine := object(capiMachineGVK, "m", map[string]any{"infrastructureRef": map[string]any{"kind": "HarvesterMachine", "name": "hm-0"}})
	set := func(value any, path ...string) func(u *unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) { _ = unstructured.SetNestedField(u.Object, value, path...) }
	}
	claimOf := object(ipAddressClaimGVK, "hm-0-nic-1-1", map[string]any{"poolRef": map[string]any{"kind": "InClusterIPPool", "name": "p"}})
	claim := func(rv string, f func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		return claimOf(rv, func(u *unstructured.Unstructured) {
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: "HarvesterMachine", Name: "hm-0", UID: "u", Controller: ptr.To(true)}})
			if f != nil {
				f(u)
			}
		})
	}
	now := metav1.Now()
	claims := claimChangesThatMatter
	clusters := capiChangesThatMatter(capiClusterOf, nil)
	machines := capiMachineChangesThatMatter
	for name, tc := range map[string]struct {
		pred     predicate.Predicate
		old, new *unstructured.Unstructured
		want     bool
	}{
		"cluster resync":                     {clusters, cluster("1", nil), cluster("1", nil), true},
		"cluster status of Cluster API":      {clusters, cluster("1", nil), cluster("2", set(int64(3), "status", "workers", "readyReplicas")), false},
		"cluster paused":                     {clusters, cluster("1", nil), cluster("2", set(true, "spec", "paused")), true},
		"cluster infrastructure provisioned": {clusters, cluster("1", nil), cluster("2", set(true, "status", "initialization", "infrastructureProvisioned")), true},
		"cluster endpoint moved":             {clusters, cluster("1", nil), cluster("2", set("10.0.0.2", "spec", "controlPlaneEndpoint", "host")), true},
		"cluster deleted":                    {clusters, cluster("1", nil), cluster("2", func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&now) }), true},
		// Machines are watched by their metadata: the API server raises the generation with every
		// change of the spec (bootstrap data Secret, failure domain), and only then.
		"machine resync":                {machines, machine("1", nil), machine("1", nil), true},
		"machine status of Cluster API": {machines, machine("1", nil), machine("2", nil), false},
		"machine spec changed":          {machines, machine("1", nil), machine("2", func(u *unstructured.Unstructured) { u.SetGeneration(2) }), true},
		"machine control plane label":   {machines, machine("1", nil), machine("2", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{capiControlPlaneLabel: ""}) }), true},
		"machine another label":         {machines, machine("1", nil), machine("2", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"team": "a"}) }), false},
		"machine deleted":               {machines, machine("1", nil), machine("2", func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&now) }), true},
		// Claims: the IPAM provider's finalizer comes before its answer and wakes nobody.
		"claim resync":              {claims, claim("1", nil), claim("1", nil), true},
		"claim finalizer of IPAM":   {claims, claim("1", nil), claim("2", func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"ipam.cluster.x-k8s.io/ReleaseAddress"}) }), false},
		"claim answered":            {claims, claim("1", nil), claim("2", set("hm-0-nic-1-1", "status", "addressRef", "name")), true},
		"claim refused":             {claims, claim("1", nil), claim("2", set([]any{map[string]any{"type": "Ready", "status": "False", "reason": "PoolExhausted"}}, "status", "conditions")), true},
		"claim deleted":             {claims, claim("1", nil), claim("2", func(u *unstructured.Unstructured) { u.SetDeletionTimestamp(&now) }), true},
		"claim given up by machine": {claims, claim("1", nil), claim("2", func(u *unstructured.Unstructured) { u.SetOwnerReferences(nil) }), true},
		"claim spec changed":        {claims, claim("1", nil), claim("2", func(u *unstructured.Unstructured) { u.SetGeneration(2) }), true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.pred.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
				t.Fatalf("passes = %v, want %v", got, tc.want)
			}
		})
	}
}

// A HarvesterMachine's own status and finalizer writes do not wake it; Cluster API naming its
// Machine and Cluster does, and so does everything objmeta.UpdatesThatMatter passes.
func TestHarvesterMachineUpdatesThatMatter(t *testing.T) {
	hm := func(f func(*infrav1.HarvesterMachine)) *infrav1.HarvesterMachine {
		o := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hm-0", ResourceVersion: "1", Generation: 1}}
		if f != nil {
			f(o)
		}
		return o
	}
	pred := harvesterMachineUpdatesThatMatter(infrav1.HarvesterMachineFinalizer)
	for name, tc := range map[string]struct {
		change func(*infrav1.HarvesterMachine)
		want   bool
	}{
		"its status": {change: func(o *infrav1.HarvesterMachine) {
			o.ResourceVersion, o.Status.Initialization.Provisioned = "2", ptr.To(true)
		}},
		"our finalizer": {change: func(o *infrav1.HarvesterMachine) {
			o.ResourceVersion, o.Finalizers = "2", []string{infrav1.HarvesterMachineFinalizer}
		}},
		"its Machine named": {want: true, change: func(o *infrav1.HarvesterMachine) {
			o.ResourceVersion = "2"
			o.OwnerReferences = []metav1.OwnerReference{{APIVersion: capiMachineGVK.GroupVersion().String(), Kind: "Machine", Name: "m-0", UID: "u"}}
		}},
		"its Cluster named": {want: true, change: func(o *infrav1.HarvesterMachine) {
			o.ResourceVersion, o.Labels = "2", map[string]string{capiClusterNameLabel: "c"}
		}},
		"its spec": {want: true, change: func(o *infrav1.HarvesterMachine) { o.ResourceVersion, o.Generation = "2", 2 }},
		"paused": {want: true, change: func(o *infrav1.HarvesterMachine) {
			o.ResourceVersion, o.Annotations = "2", map[string]string{capiPausedAnnotation: ""}
		}},
		"a resync": {want: true, change: func(*infrav1.HarvesterMachine) {}},
		// setProviderID, in the reconcile that goes on with the machine.
		"our providerID written": {change: func(o *infrav1.HarvesterMachine) {
			o.ResourceVersion, o.Generation, o.Spec.ProviderID = "2", 2, "harvester://vm-uid"
		}},
		"our providerID written with another spec change": {want: true, change: func(o *infrav1.HarvesterMachine) {
			o.ResourceVersion, o.Generation, o.Spec.ProviderID, o.Spec.Image = "2", 2, "harvester://vm-uid", "other"
		}},
		"our providerID written as its Machine is named": {want: true, change: func(o *infrav1.HarvesterMachine) {
			o.ResourceVersion, o.Generation, o.Spec.ProviderID = "2", 2, "harvester://vm-uid"
			o.OwnerReferences = []metav1.OwnerReference{{APIVersion: capiMachineGVK.GroupVersion().String(), Kind: "Machine", Name: "m-0", UID: "u"}}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := pred.Update(event.UpdateEvent{ObjectOld: hm(nil), ObjectNew: hm(tc.change)}); got != tc.want {
				t.Fatalf("passes = %v, want %v", got, tc.want)
			}
		})
	}
	// A providerID changed once set is no write of ours: it wakes the machine.
	set := hm(func(o *infrav1.HarvesterMachine) { o.Spec.ProviderID = "harvester://a" })
	changed := hm(func(o *infrav1.HarvesterMachine) {
		o.ResourceVersion, o.Generation, o.Spec.ProviderID = "2", 2, "harvester://b"
	})
	if !pred.Update(event.UpdateEvent{ObjectOld: set, ObjectNew: changed}) {
		t.Fatal("a providerID changed once set was dropped; want it passed")
	}
}

// A HarvesterMachine going wakes only the HarvesterClusters of its cluster that wait for it: those
// being deleted.
func TestClusterOfMachineOnlyWhileDeleted(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	labelled := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{capiClusterNameLabel: "c"}}
	}
	deleting := &infrav1.HarvesterCluster{ObjectMeta: labelled("deleting")}
	deleting.Finalizers, deleting.DeletionTimestamp = []string{infrav1.HarvesterClusterFinalizer}, ptr.To(metav1.Now())
	r := &HarvesterClusterReconciler{Client: fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(&infrav1.HarvesterCluster{ObjectMeta: labelled("live")}, deleting).Build()}
	got := r.clusterOfMachine(context.Background(), &infrav1.HarvesterMachine{ObjectMeta: labelled("hm-0")})
	if len(got) != 1 || got[0].Name != "deleting" {
		t.Fatalf("requests %v, want the deleting HarvesterCluster alone", got)
	}
}

// A claim wakes the HarvesterMachine it is controlled by, unless it is going while that machine
// is going or gone (the machine released it and waits for nothing of it).
func TestMachineOfClaim(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	live := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "live", UID: "live-uid"}}
	going := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "going", UID: "going-uid",
		Finalizers: []string{infrav1.HarvesterMachineFinalizer}, DeletionTimestamp: ptr.To(metav1.Now())}}
	r := &HarvesterMachineReconciler{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(live, going).Build()}
	claimOf := func(apiVersion, owner, uid string, deleting bool, kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ipAddressClaimGVK)
		u.SetNamespace("ns")
		u.SetName(owner + "-nic-1-1")
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: owner, UID: types.UID(uid), Controller: ptr.To(true)}})
		if deleting {
			u.SetFinalizers([]string{"ipam.cluster.x-k8s.io/ReleaseAddress"})
			u.SetDeletionTimestamp(ptr.To(metav1.Now()))
		}
		return u
	}
	claim := func(owner, uid string, deleting bool, kind string) *unstructured.Unstructured {
		return claimOf(infrav1.GroupVersion.String(), owner, uid, deleting, kind)
	}
	for name, tc := range map[string]struct {
		claim *unstructured.Unstructured
		want  string
	}{
		"a live machine's claim":               {claim("live", "live-uid", false, "HarvesterMachine"), "live"},
		"a live machine's claim going":         {claim("live", "live-uid", true, "HarvesterMachine"), "live"},
		"a going machine's claim":              {claim("going", "going-uid", false, "HarvesterMachine"), "going"},
		"a going machine's claim going":        {claim("going", "going-uid", true, "HarvesterMachine"), ""},
		"a gone machine's claim going":         {claim("gone", "gone-uid", true, "HarvesterMachine"), ""},
		"a claim going of a machine's former":  {claim("live", "other-uid", true, "HarvesterMachine"), ""},
		"a claim of another kind":              {claim("live", "live-uid", false, "VSphereVM"), ""},
		"owned under another API version":      {claimOf(infrav1.GroupVersion.Group+"/v1beta1", "live", "live-uid", false, "HarvesterMachine"), "live"},
		"a kind of that name in another group": {claimOf("infrastructure.cluster.x-k8s.io/v1alpha1", "live", "live-uid", false, "HarvesterMachine"), ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := r.machineOfClaim(context.Background(), tc.claim)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Fatalf("requests %v, want none", got)
			case tc.want != "" && (len(got) != 1 || got[0].Name != tc.want || got[0].Namespace != "ns"):
				t.Fatalf("requests %v, want ns/%s", got, tc.want)
			}
		})
	}
}

// A HarvesterMachine Cluster API has not taken on yet is left alone, without a status, for a
// while: the update that names its Machine and Cluster wakes it.
func TestNotTakenOnYet(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	owned := []metav1.OwnerReference{{APIVersion: capiMachineGVK.GroupVersion().String(), Kind: "Machine", Name: "m-0", UID: "u"}}
	for name, tc := range map[string]struct {
		age       time.Duration
		owners    []metav1.OwnerReference
		labelled  bool
		deleting  bool
		wantQuiet bool
	}{
		"new, not taken on":         {age: time.Second, wantQuiet: true},
		"new, its Machine named":    {age: time.Second, owners: owned, wantQuiet: true},
		"new, taken on":             {age: time.Second, owners: owned, labelled: true},
		"not taken on for a while":  {age: ownerReportDelay},
		"new, not taken on, delete": {age: time.Second, deleting: true},
	} {
		t.Run(name, func(t *testing.T) {
			hm := &infrav1.HarvesterMachine{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-tc.age)), OwnerReferences: tc.owners}}
			if tc.labelled {
				hm.Labels = map[string]string{capiClusterNameLabel: "c"}
			}
			if tc.deleting {
				hm.DeletionTimestamp = ptr.To(metav1.NewTime(now))
			}
			wait, quiet := notTakenOnYet(hm, now)
			if quiet != tc.wantQuiet || (quiet && (wait <= 0 || wait > ownerReportDelay+time.Second)) {
				t.Fatalf("notTakenOnYet = %s, %v; want quiet %v", wait, quiet, tc.wantQuiet)
			}
		})
	}
}

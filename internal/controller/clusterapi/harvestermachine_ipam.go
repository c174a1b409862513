package clusterapi

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/butlerdotdev/butler-provider-harvester/api/infrastructure/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
)

// Cluster API's IPAM contract (ipam.cluster.x-k8s.io, v1beta2): a consumer claims an address from
// a pool with an IPAddressClaim (spec.poolRef, spec.clusterName); the pool's IPAM provider answers
// with an IPAddress (spec.address, spec.prefix, spec.gateway; its spec.claimRef names the claim)
// and names it in the claim's status.addressRef, or says in the claim's Ready condition why not.
var (
	ipAddressClaimGVK = schema.GroupVersionKind{Group: "ipam.cluster.x-k8s.io", Version: "v1beta2", Kind: "IPAddressClaim"}
	ipAddressGVK      = schema.GroupVersionKind{Group: "ipam.cluster.x-k8s.io", Version: "v1beta2", Kind: "IPAddress"}
)

// The reasons of an IPAddressClaim's Ready=False, as Cluster API declares them, and the machine's
// reason for each.
var claimReasons = map[string]string{
	"PoolNotReady":     infrav1.ReasonIPPoolNotReady,
	"PoolExhausted":    infrav1.ReasonIPPoolExhausted,
	"AllocationFailed": infrav1.ReasonIPAddressAllocationFailed,
}

// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddressclaims,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=ipaddresses,verbs=get;list;watch
// +kubebuilder:rbac:groups=ipam.cluster.x-k8s.io,resources=inclusterippools;globalinclusterippools,verbs=get;list;watch

// addressClaimName names the claim of the machine's i-th NIC from its j-th pool.
func addressClaimName(machine string, nic, pool int) string {
	return fmt.Sprintf("%s-nic-%d-%d", machine, nic+1, pool+1)
}

// assignedAddress is an address an IPAM provider gave a machine's NIC.
type assignedAddress struct {
	// Claim and Address name the IPAddressClaim and the IPAddress.
	Claim, Address string
	Prefix         netip.Prefix
	// Gateway is the IPAddress's (zero: it gives none).
	Gateway netip.Addr
}

// claimAddresses makes sure every IPAddressClaim of the machine's NICs exists, and returns the
// addresses their IPAM providers gave them, by NIC. While one has none it returns a wait that says
// which and why (the claim's own reason where it gives one): a machine is made only once every
// address is known. A claim is owned by its HarvesterMachine (so clusterctl move carries it, and
// it goes with it) and carries the cluster's name.
func (r *HarvesterMachineReconciler) claimAddresses(ctx context.Context, hm *infrav1.HarvesterMachine, clusterName string) ([][]assignedAddress, error) {
	out := make([][]assignedAddress, len(hm.Spec.Interfaces))
	for i, iface := range hm.Spec.Interfaces {
		for j, pool := range iface.AddressesFromPools {
			if err := r.poolKindServed(hm, i, j, pool); err != nil {
				return nil, err
			}
			claim, err := r.ensureAddressClaim(ctx, hm, clusterName, addressClaimName(hm.Name, i, j), pool)
			if err != nil {
				return nil, err
			}
			addr, err := r.claimedAddress(ctx, hm, claim, pool)
			if err != nil {
				return nil, err
			}
			out[i] = append(out[i], addr)
		}
	}
	return out, nil
}

// poolKindServed refuses a pool reference whose kind no CRD serves: its claim would never be
// answered.
func (r *HarvesterMachineReconciler) poolKindServed(hm *infrav1.HarvesterMachine, i, j int, pool infrav1.IPPoolReference) error {
	_, err := r.RESTMapper().RESTMapping(schema.GroupKind{Group: pool.APIGroup, Kind: pool.Kind})
	if meta.IsNoMatchError(err) {
		return errkind.Waiting(infrav1.ReasonIPPoolKindNotServed, capiWaitingRetry,
			"spec.interfaces[%d].addressesFromPools[%d] names a %s of API group %s, which no CRD of this management cluster serves: install its IPAM provider (for Cluster API's in-cluster pools: clusterctl init --ipam in-cluster), or correct the reference in the HarvesterMachineTemplate; no address is claimed until then",
			i, j, pool.Kind, pool.APIGroup)
	}
	return err
}

// ensureAddressClaim returns the machine's claim of that name, made if missing. A claim of that
// name that is not the machine's (another controller's, or for another pool) is never changed.
func (r *HarvesterMachineReconciler) ensureAddressClaim(ctx context.Context, hm *infrav1.HarvesterMachine, clusterName, name string, pool infrav1.IPPoolReference) (*unstructured.Unstructured, error) {
	claim := &unstructured.Unstructured{}
	claim.SetGroupVersionKind(ipAddressClaimGVK)
	err := r.Get(ctx, client.ObjectKey{Namespace: hm.Namespace, Name: name}, claim)
	if apierrors.IsNotFound(err) {
		claim = newAddressClaim(hm, clusterName, name, pool)
		if err := r.Create(ctx, claim); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create IPAddressClaim %s/%s: %w", hm.Namespace, name, err)
		}
		return claim, nil
	}
	if err != nil {
		return nil, err
	}
	owner := metav1.GetControllerOf(claim)
	got := poolRefOf(claim)
	if owner == nil || owner.Kind != "HarvesterMachine" || owner.UID != hm.UID || got != pool {
		whose := "no controller"
		if owner != nil {
			whose = fmt.Sprintf("controller %s %s", owner.Kind, owner.Name)
		}
		return nil, errkind.Waiting(infrav1.ReasonIPAddressClaimConflict, capiWaitingRetry,
			"IPAddressClaim %s/%s, which this HarvesterMachine's address from pool %s %s needs, exists and is not its own (%s; pool %s %s): it is never changed; delete it and the provider claims the address anew",
			hm.Namespace, name, pool.Kind, pool.Name, whose, got.Kind, got.Name)
	}
	return claim, nil
}

// newAddressClaim is the machine's claim of an address from pool.
func newAddressClaim(hm *infrav1.HarvesterMachine, clusterName, name string, pool infrav1.IPPoolReference) *unstructured.Unstructured {
	claim := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"clusterName": clusterName,
		"poolRef":     map[string]any{"apiGroup": pool.APIGroup, "kind": pool.Kind, "name": pool.Name},
	}}}
	claim.SetGroupVersionKind(ipAddressClaimGVK)
	claim.SetNamespace(hm.Namespace)
	claim.SetName(name)
	claim.SetLabels(map[string]string{capiClusterNameLabel: clusterName})
	claim.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: infrav1.GroupVersion.String(), Kind: "HarvesterMachine", Name: hm.Name, UID: hm.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}})
	return claim
}

// poolRefOf is a claim's spec.poolRef.
func poolRefOf(claim *unstructured.Unstructured) infrav1.IPPoolReference {
	ref, _, _ := unstructured.NestedStringMap(claim.Object, "spec", "poolRef")
	return infrav1.IPPoolReference{APIGroup: ref["apiGroup"], Kind: ref["kind"], Name: ref["name"]}
}

// claimedAddress is the address the IPAM provider gave the claim: a wait while it has given
// none, with the claim's reason; an IPAddress that does not name the claim and its pool is not
// taken for its answer.
func (r *HarvesterMachineReconciler) claimedAddress(ctx context.Context, hm *infrav1.HarvesterMachine, claim *unstructured.Unstructured, pool infrav1.IPPoolReference) (assignedAddress, error) {
	where := fmt.Sprintf("IPAddressClaim %s/%s (pool %s %s)", claim.GetNamespace(), claim.GetName(), pool.Kind, pool.Name)
	name, _, _ := unstructured.NestedString(claim.Object, "status", "addressRef", "name")
	if name == "" {
		reason, why := r.whyUnanswered(ctx, claim, pool)
		return assignedAddress{}, errkind.Waiting(reason, capiWaitingRetry, "%s has no address: %s; nothing is made until it has one", where, why)
	}
	ip := &unstructured.Unstructured{}
	ip.SetGroupVersionKind(ipAddressGVK)
	if err := r.Get(ctx, client.ObjectKey{Namespace: claim.GetNamespace(), Name: name}, ip); apierrors.IsNotFound(err) {
		return assignedAddress{}, errkind.Waiting(infrav1.ReasonIPAddressPending, capiWaitingRetry, "%s names IPAddress %s, which does not exist (yet)", where, name)
	} else if err != nil {
		return assignedAddress{}, err
	}
	return addressOf(claim, ip, pool)
}

// whyUnanswered says why a claim has no address: its Ready condition's reason where its IPAM
// provider gives one; else what its pool shows, where the provider may read it (Cluster API's
// in-cluster provider sets no condition, and counts its pools' addresses in
// status.ipAddresses): that it does not exist, or has no address free; else that none is given
// yet.
func (r *HarvesterMachineReconciler) whyUnanswered(ctx context.Context, claim *unstructured.Unstructured, pool infrav1.IPPoolReference) (reason, why string) {
	if c := claimReadyCondition(claim); c != nil && c.Status == metav1.ConditionFalse {
		reason = infrav1.ReasonIPAddressPending
		if mapped, ok := claimReasons[c.Reason]; ok {
			reason = mapped
		}
		return reason, fmt.Sprintf("its IPAM provider says %s: %s", c.Reason, c.Message)
	}
	pending := "its IPAM provider has not given it an address yet"
	mapping, err := r.RESTMapper().RESTMapping(schema.GroupKind{Group: pool.APIGroup, Kind: pool.Kind})
	if err != nil {
		return infrav1.ReasonIPAddressPending, pending
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(mapping.GroupVersionKind)
	key := client.ObjectKey{Name: pool.Name}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		key.Namespace = claim.GetNamespace()
	}
	switch err := r.Get(ctx, key, obj); {
	case apierrors.IsNotFound(err):
		return infrav1.ReasonIPPoolNotReady, fmt.Sprintf("its pool %s %s does not exist: create it, or correct spec.interfaces[].addressesFromPools in the HarvesterMachineTemplate", pool.Kind, key)
	case err != nil:
		return infrav1.ReasonIPAddressPending, pending
	}
	total, hasTotal, _ := unstructured.NestedInt64(obj.Object, "status", "ipAddresses", "total")
	free, hasFree, _ := unstructured.NestedInt64(obj.Object, "status", "ipAddresses", "free")
	if hasTotal && hasFree && free == 0 {
		return infrav1.ReasonIPPoolExhausted, fmt.Sprintf("its pool %s %s has no address free (all %d are in use): add addresses to the pool, or free some", pool.Kind, key, total)
	}
	return infrav1.ReasonIPAddressPending, pending
}

// claimReadyCondition is a claim's Ready condition, nil if it has none.
func claimReadyCondition(claim *unstructured.Unstructured) *metav1.Condition {
	conditions, _, _ := unstructured.NestedSlice(claim.Object, "status", "conditions")
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != "Ready" {
			continue
		}
		status, _ := m["status"].(string)
		reason, _ := m["reason"].(string)
		message, _ := m["message"].(string)
		return &metav1.Condition{Type: "Ready", Status: metav1.ConditionStatus(status), Reason: reason, Message: message}
	}
	return nil
}

// addressOf reads an IPAddress the IPAM provider gave the claim.
func addressOf(claim, ip *unstructured.Unstructured, pool infrav1.IPPoolReference) (assignedAddress, error) {
	what := fmt.Sprintf("IPAddress %s/%s of IPAddressClaim %s", ip.GetNamespace(), ip.GetName(), claim.GetName())
	invalid := func(format string, args ...any) (assignedAddress, error) {
		return assignedAddress{}, errkind.Waiting(infrav1.ReasonIPAddressInvalid, capiWaitingRetry, "%s %s; nothing is made with it: correct the pool %s %s, then delete the claim and the provider claims the address anew", what, fmt.Sprintf(format, args...), pool.Kind, pool.Name)
	}
	claimRef, _, _ := unstructured.NestedString(ip.Object, "spec", "claimRef", "name")
	if claimRef != claim.GetName() || poolRefOf(ip) != pool {
		return invalid("names claim %q and pool %s %s, not this claim and its pool", claimRef, poolRefOf(ip).Kind, poolRefOf(ip).Name)
	}
	raw, _, _ := unstructured.NestedString(ip.Object, "spec", "address")
	addr, err := netip.ParseAddr(raw)
	if err != nil {
		return invalid("has spec.address %q, which is no IP address", raw)
	}
	prefix, ok, _ := unstructured.NestedInt64(ip.Object, "spec", "prefix")
	if !ok {
		return invalid("has no spec.prefix: without one the guest cannot tell its network from the rest")
	}
	p, err := addr.Prefix(int(prefix))
	if err != nil || int(prefix) < 0 || int(prefix) > addr.BitLen() {
		return invalid("has spec.prefix %d, which no %d-bit address has", prefix, addr.BitLen())
	}
	out := assignedAddress{Claim: claim.GetName(), Address: ip.GetName(), Prefix: netip.PrefixFrom(addr, p.Bits())}
	if raw, _, _ := unstructured.NestedString(ip.Object, "spec", "gateway"); raw != "" {
		if out.Gateway, err = netip.ParseAddr(raw); err != nil {
			return invalid("has spec.gateway %q, which is no IP address", raw)
		}
	}
	return out, nil
}

// nicAddressing is how the guest configures the machine's i-th NIC: DHCP as spec.interfaces[i]
// asks (by default where no pool gives an address), the addresses its pools gave, their gateway
// (the IPAddress's, else the interface's gateway4 or gateway6) and the interface's nameservers.
func nicAddressing(hm *infrav1.HarvesterMachine, i int, assigned []assignedAddress) (*harvester.Addressing, error) {
	iface := hm.Spec.Interfaces[i]
	a := &harvester.Addressing{
		DHCP4: ptr.Deref(iface.DHCP4, len(iface.AddressesFromPools) == 0),
		DHCP6: ptr.Deref(iface.DHCP6, false),
	}
	field := fmt.Sprintf("spec.interfaces[%d]", i)
	families := map[bool]bool{} // by Is6
	for _, addr := range assigned {
		a.Addresses = append(a.Addresses, addr.Prefix)
		v6 := addr.Prefix.Addr().Is6()
		if families[v6] {
			return nil, errkind.Waiting(infrav1.ReasonIPAddressInvalid, capiWaitingRetry,
				"%s has two %s addresses from its pools (IPAddresses %s): the IPAM contract gives one address per claim, so give the NIC one pool per address family", field, familyOf(addr.Prefix.Addr()), addressNames(assigned))
		}
		families[v6] = true
		gw, given := &a.Gateway4, iface.Gateway4
		if v6 {
			gw, given = &a.Gateway6, iface.Gateway6
		}
		switch {
		case addr.Gateway.IsValid():
			*gw = addr.Gateway
		case given != "":
			*gw, _ = netip.ParseAddr(given) // the CRD holds it to an address of its family
		}
	}
	for _, raw := range iface.Nameservers {
		ns, err := netip.ParseAddr(raw)
		if err != nil {
			return nil, errkind.Permanent(infrav1.ReasonInvalidSpec, "%s.nameservers: %q is no IP address", field, raw)
		}
		a.Nameservers = append(a.Nameservers, ns)
	}
	if problem := harvester.CheckAddressing(*a); problem != "" {
		return nil, errkind.Waiting(infrav1.ReasonIPAddressInvalid, capiWaitingRetry,
			"%s (IPAddresses %s): %s; correct the pool's gateway or the interface's gateway4/gateway6, then delete the claims and the provider claims the addresses anew", field, addressNames(assigned), problem)
	}
	return a, nil
}

func familyOf(a netip.Addr) string {
	if a.Is6() {
		return "IPv6"
	}
	return "IPv4"
}

func addressNames(assigned []assignedAddress) string {
	names := make([]string, 0, len(assigned))
	for _, a := range assigned {
		names = append(names, a.Address)
	}
	return strings.Join(names, ", ")
}

// configureNICs gives a machine of spec.interfaces its NICs' MAC addresses, where its VM lives
// (spec's namespace and name are final), and their addressing: DHCP as asked, and the addresses
// its IPAddressClaims were given. The guest gets them as cloud-init network configuration matched
// by MAC. It returns the addresses assigned (none for a machine of spec.networks).
func (r *HarvesterMachineReconciler) configureNICs(ctx context.Context, hm *infrav1.HarvesterMachine, spec *harvester.MachineSpec, clusterName string) ([][]assignedAddress, error) {
	if len(hm.Spec.Interfaces) == 0 {
		return nil, nil
	}
	assigned, err := r.claimAddresses(ctx, hm, clusterName)
	if err != nil {
		return nil, err
	}
	for i := range spec.NICs {
		if spec.NICs[i].Addressing, err = nicAddressing(hm, i, assigned[i]); err != nil {
			return nil, err
		}
		spec.NICs[i].MAC = harvester.MACAddressFor(spec.Namespace, spec.Name, i)
	}
	if spec.NetworkData, err = harvester.NetworkConfig(spec.NICs); err != nil {
		return nil, errkind.Permanent(infrav1.ReasonInvalidSpec, "the network configuration of spec.interfaces: %v", err)
	}
	return assigned, nil
}

// primaryAssigned is the first address assigned to the primary NIC, "" if none is.
func primaryAssigned(assigned [][]assignedAddress) string {
	if len(assigned) == 0 || len(assigned[0]) == 0 {
		return ""
	}
	return assigned[0][0].Prefix.Addr().String()
}

// ownAddressClaims are the machine's IPAddressClaims that exist and are its own.
func (r *HarvesterMachineReconciler) ownAddressClaims(ctx context.Context, hm *infrav1.HarvesterMachine) ([]*unstructured.Unstructured, error) {
	var own []*unstructured.Unstructured
	for i, iface := range hm.Spec.Interfaces {
		for j := range iface.AddressesFromPools {
			claim := &unstructured.Unstructured{}
			claim.SetGroupVersionKind(ipAddressClaimGVK)
			err := r.Get(ctx, client.ObjectKey{Namespace: hm.Namespace, Name: addressClaimName(hm.Name, i, j)}, claim)
			if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if slices.ContainsFunc(claim.GetOwnerReferences(), func(ref metav1.OwnerReference) bool { return ref.UID == hm.UID }) {
				own = append(own, claim)
			}
		}
	}
	return own, nil
}

// releaseAddressClaims deletes the machine's IPAddressClaims, once its VM is gone: their
// addresses go back to their pools.
func (r *HarvesterMachineReconciler) releaseAddressClaims(ctx context.Context, hm *infrav1.HarvesterMachine) error {
	claims, err := r.ownAddressClaims(ctx, hm)
	if err != nil {
		return err
	}
	for _, claim := range claims {
		if claim.GetDeletionTimestamp() != nil {
			continue // released already: its IPAM provider is letting the address go
		}
		if err := r.Delete(ctx, claim, client.Preconditions{UID: ptr.To(claim.GetUID())}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("release IPAddressClaim %s/%s: %w", hm.Namespace, claim.GetName(), err)
		}
	}
	return nil
}

// keepAddressClaims leaves the machine's IPAddressClaims behind when it is released without
// cleaning up on Harvester (skip-cleanup): its VM lives on there with their addresses, so they are
// no longer owned by the HarvesterMachine (which would take them with it) and stay claimed. It
// returns the names kept.
func (r *HarvesterMachineReconciler) keepAddressClaims(ctx context.Context, hm *infrav1.HarvesterMachine) ([]string, error) {
	claims, err := r.ownAddressClaims(ctx, hm)
	if err != nil {
		return nil, err
	}
	var kept []string
	for _, claim := range claims {
		patch := client.MergeFromWithOptions(claim.DeepCopy(), client.MergeFromWithOptimisticLock{})
		claim.SetOwnerReferences(slices.DeleteFunc(claim.GetOwnerReferences(), func(ref metav1.OwnerReference) bool { return ref.UID == hm.UID }))
		if err := r.Patch(ctx, claim, patch); client.IgnoreNotFound(err) != nil {
			return kept, fmt.Errorf("keep IPAddressClaim %s/%s: %w", hm.Namespace, claim.GetName(), err)
		}
		kept = append(kept, claim.GetName())
	}
	return kept, nil
}

package testbed

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cluster API's IPAM contract, and the in-cluster IPAM provider's pool kind, as the player reads
// and writes them.
var (
	IPAddressClaimGVK  = schema.GroupVersionKind{Group: "ipam.cluster.x-k8s.io", Version: "v1beta2", Kind: "IPAddressClaim"}
	IPAddressGVK       = schema.GroupVersionKind{Group: "ipam.cluster.x-k8s.io", Version: "v1beta2", Kind: "IPAddress"}
	InClusterIPPoolGVK = schema.GroupVersionKind{Group: "ipam.cluster.x-k8s.io", Version: "v1alpha2", Kind: "InClusterIPPool"}
)

// The in-cluster provider's finalizers (pkg/ipamutil/reconciler.go).
const (
	releaseAddressFinalizer = "ipam.cluster.x-k8s.io/ReleaseAddress"
	protectAddressFinalizer = "ipam.cluster.x-k8s.io/ProtectAddress"
)

// InClusterIPPoolCRDs is the directory of the InClusterIPPool CRD the player serves.
func InClusterIPPoolCRDs(repoRoot string) string {
	return filepath.Join(repoRoot, "test", "testdata", "ipam-in-cluster", "crd")
}

// ipamResync is how often the player looks at the claims when no event wakes it: the provider's
// resync, and the retry of a claim a pool could not serve.
const ipamResync = 2 * time.Second

// ipamCacheWait bounds the wait for an IPAddress the player made to reach its cache.
const ipamCacheWait = 5 * time.Second

// IPAM plays Cluster API's in-cluster IPAM provider (kubernetes-sigs/cluster-api-ipam-provider-in-cluster
// at bc27dd7, pkg/ipamutil/reconciler.go and internal/controllers/ipaddressclaim_address.go) for
// the IPAddressClaims of InClusterIPPools, as it does:
//
//   - a claim whose Cluster (spec.clusterName) is paused, or does not exist, is left alone;
//   - it first gets the finalizer ipam.cluster.x-k8s.io/ReleaseAddress;
//   - a claim of a pool that does not exist is left without address, and without a condition;
//   - its address is an IPAddress of the claim's name and namespace: where one exists (a claim
//     that clusterctl move carried, with its IPAddress, and no status) it is kept and linked
//     again; else the first free address of the pool (its addresses, less the gateway, the
//     excluded addresses, those in use, and the prefix's network and broadcast addresses unless
//     allocateReservedIPAddresses), with the pool's prefix and gateway; a pool with none free
//     leaves the claim without address (the provider sets no condition either);
//   - the IPAddress is owned by the claim (controller) and the pool, carries the claim's cluster
//     name label and the finalizer ipam.cluster.x-k8s.io/ProtectAddress; the player waits until
//     its cache holds it before the next claim, so that no address is given twice;
//   - the claim's status.addressRef names it;
//   - a deleted claim has its IPAddress deleted (finalizer removed first), then its own finalizer
//     removed;
//   - a pool's status.ipAddresses counts its addresses: total, used, free.
//
// Like the provider, it reads claims, Clusters, pools and addresses from an informer cache, is
// woken by the cache's events, and handles one claim at a time. Where the provider queues each
// claim, each pass of the player goes over all of them and leaves alone the bound ones (finalizer
// and address, not deleted), whose reconcile would change nothing.
type IPAM struct {
	c     client.Client // reads from the cache, writes to the API server
	cache cache.Cache
	kick  chan struct{}
	stop  context.CancelFunc
	done  chan struct{}

	mu  sync.Mutex
	err error
}

// PlayIPAM starts the player against the management cluster cfg reaches; Stop stops it.
func PlayIPAM(ctx context.Context, cfg *rest.Config) (*IPAM, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "testbed-ipam-in-cluster"
	informers, err := cache.New(cfg, cache.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return nil, fmt.Errorf("the IPAM player's cache: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme, Cache: &client.CacheOptions{Reader: informers, Unstructured: true}})
	if err != nil {
		return nil, fmt.Errorf("the IPAM player's client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &IPAM{c: c, cache: informers, kick: make(chan struct{}, 1), stop: cancel, done: make(chan struct{})}
	for _, gvk := range []schema.GroupVersionKind{IPAddressClaimGVK, IPAddressGVK, InClusterIPPoolGVK, ClusterGVK} {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		informer, err := informers.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			cancel()
			return nil, fmt.Errorf("the IPAM player's informer of %s: %w", gvk.Kind, err)
		}
		if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { p.wake() },
			UpdateFunc: func(any, any) { p.wake() },
			DeleteFunc: func(any) { p.wake() },
		}); err != nil {
			cancel()
			return nil, err
		}
	}
	cacheDone := make(chan struct{})
	go func() {
		defer close(cacheDone)
		_ = informers.Start(ctx)
	}()
	go func() {
		defer close(p.done)
		defer func() { <-cacheDone }()
		if !informers.WaitForCacheSync(ctx) {
			return
		}
		for {
			p.record(p.sync(ctx))
			select {
			case <-ctx.Done():
				return
			case <-p.kick:
			case <-time.After(ipamResync):
			}
		}
	}()
	return p, nil
}

// wake asks for a pass; events that come during one ask for one more.
func (p *IPAM) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *IPAM) record(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

// Stop stops the player and waits until it has.
func (p *IPAM) Stop() {
	p.stop()
	<-p.done
}

// Err is what went wrong in the player's last look, nil if nothing did.
func (p *IPAM) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// sync handles every claim of an InClusterIPPool, then the pools' status.
func (p *IPAM) sync(ctx context.Context) error {
	claims := &unstructured.UnstructuredList{}
	claims.SetGroupVersionKind(IPAddressClaimGVK.GroupVersion().WithKind("IPAddressClaimList"))
	if err := p.c.List(ctx, claims); err != nil {
		return err
	}
	var errs []error
	pass := &ipamPass{inUse: map[client.ObjectKey]map[netip.Addr]bool{}}
	for i := range claims.Items {
		claim := &claims.Items[i]
		ref := poolRef(claim)
		if ref["apiGroup"] != InClusterIPPoolGVK.Group || ref["kind"] != InClusterIPPoolGVK.Kind {
			continue
		}
		if bound(claim) {
			continue // the provider's reconcile of it changes nothing
		}
		if err := p.reconcileClaim(ctx, claim, ref["name"], pass); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("IPAddressClaim %s/%s: %w", claim.GetNamespace(), claim.GetName(), err))
		}
	}
	errs = append(errs, p.poolsStatus(ctx))
	return errors.Join(errs...)
}

// ipamPass is what one pass over the claims has read of the pools' addresses in use, and the
// addresses it gave since: the provider reads them from its cache, where the player would read
// them again for every claim.
type ipamPass struct {
	inUse map[client.ObjectKey]map[netip.Addr]bool
}

// bound reports whether a claim has its finalizer and its address, and is not being deleted: the
// provider's reconcile of it (on a resync) changes nothing, so the player skips it without a
// request. A claim clusterctl move carried has no status and is not skipped.
func bound(claim *unstructured.Unstructured) bool {
	name, _, _ := unstructured.NestedString(claim.Object, "status", "addressRef", "name")
	return name != "" && claim.GetDeletionTimestamp() == nil && slices.Contains(claim.GetFinalizers(), releaseAddressFinalizer)
}

func poolRef(obj *unstructured.Unstructured) map[string]string {
	ref, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "poolRef")
	return ref
}

// reconcileClaim is the provider's reconcile of one claim.
func (p *IPAM) reconcileClaim(ctx context.Context, claim *unstructured.Unstructured, poolName string, pass *ipamPass) error {
	deleting := claim.GetDeletionTimestamp() != nil
	clusterName, _, _ := unstructured.NestedString(claim.Object, "spec", "clusterName")
	if clusterName != "" {
		cluster := &unstructured.Unstructured{}
		cluster.SetGroupVersionKind(ClusterGVK)
		err := p.c.Get(ctx, client.ObjectKey{Namespace: claim.GetNamespace(), Name: clusterName}, cluster)
		switch {
		case apierrors.IsNotFound(err) && !deleting:
			return nil
		case err != nil && !apierrors.IsNotFound(err):
			return err
		case err == nil && isPaused(cluster):
			return nil
		}
	}
	if !deleting && !slices.Contains(claim.GetFinalizers(), releaseAddressFinalizer) {
		// The provider's reconcile ends here, and its own patch starts the next one at once
		// (ipamutil/reconciler.go): the player goes on with the claim as updated.
		claim.SetFinalizers(append(claim.GetFinalizers(), releaseAddressFinalizer))
		if err := p.c.Update(ctx, claim); err != nil {
			return err
		}
	}
	pool := &unstructured.Unstructured{}
	pool.SetGroupVersionKind(InClusterIPPoolGVK)
	poolErr := p.c.Get(ctx, client.ObjectKey{Namespace: claim.GetNamespace(), Name: poolName}, pool)
	if deleting {
		return p.release(ctx, claim)
	}
	if poolErr != nil {
		return client.IgnoreNotFound(poolErr) // logged by the provider; no condition
	}
	address, err := p.ensureAddress(ctx, claim, pool, pass)
	if err != nil || address == nil {
		return err
	}
	if name, _, _ := unstructured.NestedString(claim.Object, "status", "addressRef", "name"); name == address.GetName() {
		return nil
	}
	if err := unstructured.SetNestedField(claim.Object, address.GetName(), "status", "addressRef", "name"); err != nil {
		return err
	}
	return p.c.Status().Update(ctx, claim)
}

// isPaused is Cluster API's annotations.IsPaused of a Cluster: spec.paused, or the paused
// annotation.
func isPaused(cluster *unstructured.Unstructured) bool {
	paused, _, _ := unstructured.NestedBool(cluster.Object, "spec", "paused")
	_, annotated := cluster.GetAnnotations()["cluster.x-k8s.io/paused"]
	return paused || annotated
}

// ensureAddress returns the claim's IPAddress, made from the pool's first free address if it has
// none; nil when the pool has none free.
func (p *IPAM) ensureAddress(ctx context.Context, claim, pool *unstructured.Unstructured, pass *ipamPass) (*unstructured.Unstructured, error) {
	address := &unstructured.Unstructured{}
	address.SetGroupVersionKind(IPAddressGVK)
	err := p.c.Get(ctx, client.ObjectKeyFromObject(claim), address)
	if err == nil {
		return address, nil // kept, and linked again if the claim lost its status
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	spec, err := poolSpecOf(pool)
	if err != nil {
		return nil, err
	}
	inUse, read := pass.inUse[client.ObjectKeyFromObject(pool)]
	if !read {
		if inUse, err = p.addressesInUse(ctx, pool); err != nil {
			return nil, err
		}
		pass.inUse[client.ObjectKeyFromObject(pool)] = inUse
	}
	free, ok := spec.firstFree(inUse)
	if !ok {
		return nil, nil // "failed to find free address": retried, no condition
	}
	address.SetNamespace(claim.GetNamespace())
	address.SetName(claim.GetName())
	address.SetFinalizers([]string{protectAddressFinalizer})
	if name := claim.GetLabels()[ClusterNameLabel]; name != "" {
		address.SetLabels(map[string]string{ClusterNameLabel: name})
	}
	address.SetOwnerReferences([]metav1.OwnerReference{
		{APIVersion: IPAddressClaimGVK.GroupVersion().String(), Kind: IPAddressClaimGVK.Kind, Name: claim.GetName(), UID: claim.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
		{APIVersion: InClusterIPPoolGVK.GroupVersion().String(), Kind: InClusterIPPoolGVK.Kind, Name: pool.GetName(), UID: pool.GetUID(), Controller: ptr.To(false), BlockOwnerDeletion: ptr.To(true)},
	})
	address.Object["spec"] = map[string]any{
		"claimRef": map[string]any{"name": claim.GetName()},
		"poolRef":  map[string]any{"apiGroup": InClusterIPPoolGVK.Group, "kind": InClusterIPPoolGVK.Kind, "name": pool.GetName()},
		"address":  free.String(),
		"prefix":   int64(spec.prefix),
	}
	if spec.gateway.IsValid() {
		address.Object["spec"].(map[string]any)["gateway"] = spec.gateway.String()
	}
	if err := p.c.Create(ctx, address); err != nil {
		return nil, err
	}
	inUse[free] = true
	// The provider waits, too: a later pass reads the addresses in use from the cache.
	key := client.ObjectKeyFromObject(address)
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, ipamCacheWait, true, func(ctx context.Context) (bool, error) {
		seen := &unstructured.Unstructured{}
		seen.SetGroupVersionKind(IPAddressGVK)
		err := p.c.Get(ctx, key, seen)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for IPAddress %s to reach the cache after its create: %w", key, err)
	}
	return address, nil
}

// release deletes a deleted claim's IPAddress, then lets the claim go.
func (p *IPAM) release(ctx context.Context, claim *unstructured.Unstructured) error {
	address := &unstructured.Unstructured{}
	address.SetGroupVersionKind(IPAddressGVK)
	err := p.c.Get(ctx, client.ObjectKeyFromObject(claim), address)
	if err == nil {
		if slices.Contains(address.GetFinalizers(), protectAddressFinalizer) {
			address.SetFinalizers(slices.DeleteFunc(address.GetFinalizers(), func(f string) bool { return f == protectAddressFinalizer }))
			if err := p.c.Update(ctx, address); err != nil {
				return err
			}
		}
		if err := p.c.Delete(ctx, address); client.IgnoreNotFound(err) != nil {
			return err
		}
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	claim.SetFinalizers(slices.DeleteFunc(claim.GetFinalizers(), func(f string) bool { return f == releaseAddressFinalizer }))
	return p.c.Update(ctx, claim)
}

// addressesInUse are the addresses of the IPAddresses of the pool, in its namespace.
func (p *IPAM) addressesInUse(ctx context.Context, pool *unstructured.Unstructured) (map[netip.Addr]bool, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(IPAddressGVK.GroupVersion().WithKind("IPAddressList"))
	if err := p.c.List(ctx, list, client.InNamespace(pool.GetNamespace())); err != nil {
		return nil, err
	}
	inUse := map[netip.Addr]bool{}
	for _, a := range list.Items {
		if ref := poolRef(&a); ref["kind"] != InClusterIPPoolGVK.Kind || ref["name"] != pool.GetName() {
			continue
		}
		raw, _, _ := unstructured.NestedString(a.Object, "spec", "address")
		if addr, err := netip.ParseAddr(raw); err == nil {
			inUse[addr] = true
		}
	}
	return inUse, nil
}

// poolsStatus writes each pool's status.ipAddresses.
func (p *IPAM) poolsStatus(ctx context.Context) error {
	pools := &unstructured.UnstructuredList{}
	pools.SetGroupVersionKind(InClusterIPPoolGVK.GroupVersion().WithKind("InClusterIPPoolList"))
	if err := p.c.List(ctx, pools); err != nil {
		return err
	}
	for i := range pools.Items {
		pool := &pools.Items[i]
		spec, err := poolSpecOf(pool)
		if err != nil {
			return err
		}
		inUse, err := p.addressesInUse(ctx, pool)
		if err != nil {
			return err
		}
		total := len(spec.addresses())
		want := map[string]any{"total": int64(total), "used": int64(len(inUse)), "free": int64(max(total-len(inUse), 0)), "outOfRange": int64(0)}
		if got, _, _ := unstructured.NestedMap(pool.Object, "status", "ipAddresses"); fmt.Sprint(got) == fmt.Sprint(want) {
			continue
		}
		if err := unstructured.SetNestedMap(pool.Object, want, "status", "ipAddresses"); err != nil {
			return err
		}
		if err := p.c.Status().Update(ctx, pool); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

// ipPoolSpec is an InClusterIPPool's spec.
type ipPoolSpec struct {
	ranges, excluded []addressRange
	prefix           int
	gateway          netip.Addr
	reserved         bool
}

type addressRange struct{ first, last netip.Addr }

func poolSpecOf(pool *unstructured.Unstructured) (ipPoolSpec, error) {
	var s ipPoolSpec
	what := fmt.Sprintf("InClusterIPPool %s/%s", pool.GetNamespace(), pool.GetName())
	prefix, _, _ := unstructured.NestedInt64(pool.Object, "spec", "prefix")
	s.prefix = int(prefix)
	s.reserved, _, _ = unstructured.NestedBool(pool.Object, "spec", "allocateReservedIPAddresses")
	if raw, _, _ := unstructured.NestedString(pool.Object, "spec", "gateway"); raw != "" {
		gw, err := netip.ParseAddr(raw)
		if err != nil {
			return s, fmt.Errorf("%s: spec.gateway: %w", what, err)
		}
		s.gateway = gw
	}
	for field, into := range map[string]*[]addressRange{"addresses": &s.ranges, "excludedAddresses": &s.excluded} {
		list, _, _ := unstructured.NestedStringSlice(pool.Object, "spec", field)
		for _, raw := range list {
			r, err := parseRange(raw)
			if err != nil {
				return s, fmt.Errorf("%s: spec.%s: %w", what, field, err)
			}
			*into = append(*into, r)
		}
	}
	return s, nil
}

// parseRange reads an address, a range "first-last" or a CIDR.
func parseRange(raw string) (addressRange, error) {
	if first, last, ok := strings.Cut(raw, "-"); ok {
		a, err1 := netip.ParseAddr(strings.TrimSpace(first))
		b, err2 := netip.ParseAddr(strings.TrimSpace(last))
		if err := errors.Join(err1, err2); err != nil {
			return addressRange{}, err
		}
		return addressRange{a, b}, nil
	}
	if p, err := netip.ParsePrefix(raw); err == nil {
		p = p.Masked()
		return addressRange{p.Addr(), lastOf(p)}, nil
	}
	a, err := netip.ParseAddr(raw)
	return addressRange{a, a}, err
}

// addresses are the pool's addresses it may hand out, in order.
func (s ipPoolSpec) addresses() []netip.Addr {
	var out []netip.Addr
	for _, r := range s.ranges {
		for a := r.first; a.IsValid() && a.Compare(r.last) <= 0; a = a.Next() {
			if s.excludes(a) {
				continue
			}
			out = append(out, a)
		}
	}
	return out
}

// excludes reports whether the pool never hands out a.
func (s ipPoolSpec) excludes(a netip.Addr) bool {
	if a == s.gateway {
		return true
	}
	for _, r := range s.excluded {
		if a.Compare(r.first) >= 0 && a.Compare(r.last) <= 0 {
			return true
		}
	}
	if !s.reserved && a.Is4() && s.prefix > 0 && s.prefix < 31 {
		p, _ := a.Prefix(s.prefix)
		return a == p.Addr() || a == lastOf(p)
	}
	return false
}

func (s ipPoolSpec) firstFree(inUse map[netip.Addr]bool) (netip.Addr, bool) {
	for _, a := range s.addresses() {
		if !inUse[a] {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// lastOf is the last address of a prefix (an IPv4 prefix's broadcast address).
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As16()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	for i := bits; i < 128; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	last := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		return last.Unmap()
	}
	return last
}

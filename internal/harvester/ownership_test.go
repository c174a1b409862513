package harvester

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// Two management clusters whose clocks are ten minutes apart, either way, claim one tenant
// cluster's ownership: the live holder keeps it however old its renewals look on the other's
// clock; a lease is taken only when released, or handed over and seen unrenewed for a whole
// duration on the taker's own clock.
func TestOwnershipLeaseAcrossSkewedClocks(t *testing.T) {
	for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
		t.Run("B's clock "+skew.String()+" from A's", func(t *testing.T) {
			ctx := context.Background()
			c := fake.NewClientBuilder().WithScheme(remoteScheme).Build()
			h := OwnershipLeases(newTestCluster(c))
			start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
			clockA, clockB := clocktesting.NewFakeClock(start), clocktesting.NewFakeClock(start.Add(skew))
			tenant := types.NamespacedName{Namespace: "tenants", Name: "prod"}
			claimA := OwnershipClaim{Namespace: "vms", Tenant: tenant, Holder: "A", Duration: time.Minute, Sightings: &LeaseSightings{Clock: clockA}}
			claimB := OwnershipClaim{Namespace: "vms", Tenant: tenant, Holder: "B", Duration: time.Minute, Sightings: &LeaseSightings{Clock: clockB}}
			step := func(d time.Duration) { clockA.Step(d); clockB.Step(d) }
			claim := func(cl OwnershipClaim) Ownership {
				t.Helper()
				o, err := h.ClaimOwnership(ctx, cl)
				if err != nil {
					t.Fatalf("%s claims: %v", cl.Holder, err)
				}
				return o
			}

			if o := claim(claimA); !o.Held {
				t.Fatalf("A, first: %+v", o)
			}
			// B is a restored copy, and the platform operator even named A as gone: while A
			// renews, B never takes it, whatever the clocks say.
			handOver := claimB
			handOver.HandOverFrom = []string{"A"}
			for i := 0; i < 12; i++ {
				step(20 * time.Second)
				if o := claim(claimA); !o.Held {
					t.Fatalf("A renewing, %d: %+v", i, o)
				}
				if o := claim(handOver); o.Held || o.Holder != "A" || o.Silent > 20*time.Second {
					t.Fatalf("B while A renews, %d: %+v", i, o)
				}
			}
			// A stops. Without the operator's hand-over, B never takes it.
			for i := 0; i < 10; i++ {
				step(10 * time.Minute)
				if o := claim(claimB); o.Held || o.Holder != "A" {
					t.Fatalf("B without a hand-over, A silent: %+v", o)
				}
			}
			// With it, once B has seen it unrenewed for a whole duration on its own clock.
			fresh := handOver
			fresh.Sightings = &LeaseSightings{Clock: clockB}
			if o := claim(fresh); o.Held || o.Silent != 0 {
				t.Fatalf("B handed over, first sight: %+v", o)
			}
			step(59 * time.Second)
			if o := claim(fresh); o.Held || o.Silent != 59*time.Second {
				t.Fatalf("B handed over, 59s: %+v", o)
			}
			step(time.Second)
			if o := claim(fresh); !o.Held || o.TakenFrom != "A" || !o.HandedOver {
				t.Fatalf("B handed over, a minute: %+v", o)
			}
			// A comes back: B holds it and renews, so A takes nothing.
			if o := claim(claimA); o.Held || o.Holder != "B" {
				t.Fatalf("A back: %+v", o)
			}
			if other, err := h.DropOwnership(ctx, "vms", tenant, "A"); err != nil || other != "B" {
				t.Fatalf("A drops B's: %q, %v", other, err)
			}
			// B is paused by a move: released, and A (the move's target) takes it at once.
			release := fresh
			release.Release = true
			if o := claim(release); o.Held {
				t.Fatalf("B releasing: %+v", o)
			}
			if holder, found, err := h.OwnershipHolder(ctx, "vms", tenant); err != nil || !found || holder != "B" {
				t.Fatalf("released: holder %q found %v, %v", holder, found, err)
			}
			if o := claim(claimA); !o.Held || o.TakenFrom != "B" || o.HandedOver {
				t.Fatalf("A after B released: %+v", o)
			}
			if o := claim(fresh); o.Held || o.Holder != "A" {
				t.Fatalf("B resumed after A took it: %+v", o)
			}
			// Deleted with its cluster by its holder only.
			if other, err := h.DropOwnership(ctx, "vms", tenant, "A"); err != nil || other != "" {
				t.Fatalf("A drops its own: %q, %v", other, err)
			}
			err := c.Get(ctx, client.ObjectKey{Namespace: "vms", Name: OwnershipLeaseName(tenant)}, &coordinationv1.Lease{})
			if !apierrors.IsNotFound(err) {
				t.Fatalf("the Lease after its holder dropped it: %v", err)
			}
			// Released with nothing held: nothing is made.
			if o := claim(release); o.Held {
				t.Fatalf("release with no Lease: %+v", o)
			}
			if _, found, _ := h.OwnershipHolder(ctx, "vms", tenant); found {
				t.Fatal("a release made a Lease")
			}
		})
	}
}

func TestOwnershipWithoutAnIdentityHoldsNothing(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(remoteScheme).Build()
	h := OwnershipLeases(newTestCluster(c))
	_, err := h.ClaimOwnership(context.Background(), OwnershipClaim{Namespace: "vms", Tenant: types.NamespacedName{Namespace: "t", Name: "c"}, Duration: time.Minute, Sightings: &LeaseSightings{}})
	if w, ok := errkind.AsWaiting(err); !ok || w.Reason != ReasonOwnerUnknown || !strings.Contains(w.Message, "get on namespaces") {
		t.Fatalf("claim without an identity: %v", err)
	}
}

func TestOwnershipLeaseName(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, tc := range []struct{ a, b types.NamespacedName }{
		{types.NamespacedName{Namespace: "a-b", Name: "c"}, types.NamespacedName{Namespace: "a", Name: "b-c"}},
		{types.NamespacedName{Namespace: long, Name: long + "x"}, types.NamespacedName{Namespace: long, Name: long + "y"}},
		{types.NamespacedName{Namespace: "t", Name: "my.cluster"}, types.NamespacedName{Namespace: "t", Name: "my-cluster"}},
	} {
		na, nb := OwnershipLeaseName(tc.a), OwnershipLeaseName(tc.b)
		if na == nb {
			t.Errorf("%s and %s share Lease name %s", tc.a, tc.b, na)
		}
		for _, n := range []string{na, nb} {
			if errs := validation.IsDNS1123Label(n); len(errs) > 0 || !strings.HasPrefix(n, OwnershipLeasePrefix) {
				t.Errorf("Lease name %q: %v", n, errs)
			}
		}
	}
}

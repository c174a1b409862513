package machinerequest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/controller/providerconfig"
	"github.com/butlerdotdev/butler-provider-harvester/internal/harvester"
	"github.com/butlerdotdev/butler-provider-harvester/internal/options"
)

// Where the manager may not write ProviderConfig status (the Butler CLI's RBAC), a failed check
// is logged once, not once a validation, still makes new machines wait with ProviderConfigNotReady,
// and once it passes the MachineRequests are woken and go ahead.
func TestChecksGateMachinesWithoutStatusWrites(t *testing.T) {
	pc := harvesterPC(v1alpha1.ProviderTypeHarvester)
	pc.UID, pc.Generation = types.UID("pc-uid"), 1
	f := newFixture(t)
	refused := 0
	c := fake.NewClientBuilder().WithScheme(newScheme(t)).WithObjects(machineRequest(), pc).
		WithStatusSubresource(&v1alpha1.MachineRequest{}, &v1alpha1.ProviderConfig{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			if _, ok := obj.(*v1alpha1.ProviderConfig); ok {
				refused++
				return apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "providerconfigs/status"}, obj.GetName(),
					errors.New(`User "system:serviceaccount:butler-system:butler-provider-harvester" cannot patch resource "providerconfigs/status"`))
			}
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		}}).Build()
	f.client, f.r.Client = c, c
	pcr := &providerconfig.Reconciler{Client: c, SecretReader: c, Harvester: f.factory, Recorder: f.recorder,
		RecheckInterval: options.DefaultRecheckInterval, CredentialsPoll: providerconfig.DefaultCredentialsPoll, NotReadyRetry: time.Nanosecond} // validates every time
	f.r.Preflight = pcr
	wake := pcr.UnwrittenChanges() // as the MachineRequest controller's watch does
	var logged []string
	ctx := log.IntoContext(context.Background(), funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))
	network := harvester.Check{Type: v1alpha1.ConditionNetworkReady, Reason: v1alpha1.ReasonNetworkNotFound, Message: "NetworkAttachmentDefinition default/vlan40 does not exist"}
	f.machines.preflight = func() (string, []harvester.Check) {
		return "v1.31.4", []harvester.Check{{Type: v1alpha1.ConditionCredentialsValid, OK: true}, {Type: v1alpha1.ConditionPermissionsReady, OK: true},
			network, {Type: v1alpha1.ConditionImageReady, OK: true}, {Type: v1alpha1.ConditionStorageReady, OK: true}}
	}
	validate := func() {
		t.Helper()
		if res, err := pcr.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pc)}); err != nil || res.RequeueAfter == 0 {
			t.Fatalf("ProviderConfig Reconcile = %+v, %v; want a recheck and no error", res, err)
		}
	}
	woken := func() int {
		n := 0
		for {
			select {
			case e := <-wake:
				if e.Object.GetName() != pc.Name {
					t.Errorf("woke the MachineRequests of %s", e.Object.GetName())
				}
				n++
			default:
				return n
			}
		}
	}

	for range 3 {
		validate()
	}
	if said := strings.Count(strings.Join(logged, "\n"), "may not write ProviderConfig status"); refused != 3 || said != 1 {
		t.Fatalf("%d refused status writes were logged %d times, want 3 and once:\n%s", refused, said, strings.Join(logged, "\n"))
	}
	if n := woken(); n != 1 {
		t.Errorf("the failed check woke the MachineRequests %d times over 3 validations, want once", n)
	}
	requireEvent(t, f.events(), "Warning PreflightFailed")

	if _, err := f.reconcile(machineRequest()); err != nil {
		t.Fatal(err)
	}
	got := f.get(machineRequest())
	if c := requireCondition(t, got, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonProviderConfigNotReady); !strings.Contains(c.Message, "NetworkReady=False") {
		t.Errorf("Degraded message %q does not name the failed check", c.Message)
	}
	for _, call := range f.machines.calls {
		if call == "Ensure" {
			t.Fatal("a machine was created although its ProviderConfig's network check fails")
		}
	}

	// The network appears: the next validation passes and wakes the MachineRequest, which goes ahead.
	network = harvester.Check{Type: v1alpha1.ConditionNetworkReady, OK: true}
	validate()
	if n := woken(); n != 1 {
		t.Errorf("the passing checks woke the MachineRequests %d times, want once", n)
	}
	f.machines.ensure = func(*harvester.MachineSpec) (harvester.Observation, error) {
		return harvester.Observation{VMExists: true, VMCreated: true, VMUID: "vm-uid", ProviderID: "harvester://vm-uid"}, nil
	}
	if _, err := f.reconcile(got); err != nil {
		t.Fatal(err)
	}
	if s := f.get(got).Status; s.Phase != v1alpha1.MachinePhaseCreating {
		t.Errorf("after the checks passed: phase %s (%+v), want Creating", s.Phase, s.Conditions)
	}
}

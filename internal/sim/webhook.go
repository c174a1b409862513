package sim

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// macWebhook rejects a VirtualMachine whose interface MAC address another VM already uses, as
// KubeVirt's MAC pool does. It needs the cluster's other VMs, which a ValidatingAdmissionPolicy
// cannot see, so it is a real webhook served by the simulator.
type macWebhook struct {
	c      client.Reader
	server *httptest.Server
}

const macWebhookName = "mac-uniqueness.sim.butler.butlerlabs.dev"

// startMACWebhook serves the webhook and registers it with the API server.
func startMACWebhook(ctx context.Context, c client.Client) (*macWebhook, error) {
	w := &macWebhook{c: c}
	w.server = httptest.NewTLSServer(http.HandlerFunc(w.serve))
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.server.Certificate().Raw})
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: macWebhookName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    macWebhookName,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(w.server.URL + "/validate-mac"), CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"kubevirt.io"}, APIVersions: []string{"v1"}, Resources: []string{"virtualmachines"}}}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		}},
	}
	if err := c.Create(ctx, cfg); err != nil {
		w.server.Close()
		return nil, fmt.Errorf("register the MAC webhook: %w", err)
	}
	return w, nil
}

func (w *macWebhook) serve(rw http.ResponseWriter, r *http.Request) {
	review := &admissionv1.AdmissionReview{}
	if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
		http.Error(rw, "bad AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	vm := &kubevirtv1.VirtualMachine{}
	if err := json.Unmarshal(review.Request.Object.Raw, vm); err == nil {
		if msg := w.conflict(r.Context(), vm); msg != "" {
			resp.Allowed = false
			resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: msg}
		}
	}
	review.Response = resp
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(review)
}

// conflict names the VM that already uses one of vm's MAC addresses ("" if none).
func (w *macWebhook) conflict(ctx context.Context, vm *kubevirtv1.VirtualMachine) string {
	macs := map[string]bool{}
	for _, m := range vmMACs(vm) {
		macs[m] = true
	}
	if len(macs) == 0 {
		return ""
	}
	vms := &kubevirtv1.VirtualMachineList{}
	if err := w.c.List(ctx, vms); err != nil {
		return "" // fail open on our own errors: the rule is about MACs, not about the simulator
	}
	for i := range vms.Items {
		other := &vms.Items[i]
		if other.Namespace == vm.Namespace && other.Name == vm.Name {
			continue
		}
		for _, m := range vmMACs(other) {
			if macs[m] {
				return fmt.Sprintf("failed to allocate requested mac address %s: already used by VirtualMachine %s/%s", m, other.Namespace, other.Name)
			}
		}
	}
	return ""
}

func vmMACs(vm *kubevirtv1.VirtualMachine) []string {
	if vm.Spec.Template == nil {
		return nil
	}
	var out []string
	for _, iface := range vm.Spec.Template.Spec.Domain.Devices.Interfaces {
		if iface.MacAddress != "" {
			out = append(out, iface.MacAddress)
		}
	}
	return out
}

func (w *macWebhook) close() { w.server.Close() }

package sim

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// webhooks are Harvester's admission webhooks (pkg/webhook/resources), served by the simulator:
// their rules need other objects, which a ValidatingAdmissionPolicy cannot read.
//
//   - The VM validator refuses a MAC address another VM already uses.
//   - The PVC validator refuses to delete a volume a VM uses, with the message and code of
//     Harvester v1.8.0 and later (409 Conflict; v1.7 and earlier answered 422 Invalid), unless the
//     garbage collector deletes it. It also stands in for a rule Harvester does not have: a
//     volume cloned from an image (harvesterhci.io/imageId) must use the image's storage class, and
//     an image of the CDI backend cannot be cloned that way at all. Harvester would silently give
//     such a volume a blank disk; refusing it makes the tests catch a provider that builds one.
//   - The VM mutator derives requests and guest memory from the limits and the overcommit
//     settings, fills in CPU topology defaults, the termination grace period, and a MAC address
//     for each interface (v1.8.0 and later).
type webhooks struct {
	c          client.Reader
	overcommit Overcommit
	// noPersistentState plays a KubeVirt without the VMPersistentState feature gate
	// (Config.NoVMPersistentState).
	noPersistentState bool
	server            *httptest.Server
}

// Names of Harvester's webhooks (pkg/webhook/server/server.go), and of its pcidevices-controller
// add-on's validator (harvester/pcidevices pkg/webhook/server.go) with the path the simulator
// serves it at.
const (
	validatorName            = "validator.harvesterhci.io"
	mutatorName              = "mutator.harvesterhci.io"
	pcidevicesValidatorName  = "pcidevices.harvesterhci.io"
	pcidevicesValidationPath = "/pcidevices/v1/webhook/validation"
	// gcUser is who the garbage collector acts as; Harvester's webhooks let it delete anything.
	gcUser = "system:serviceaccount:kube-system:generic-garbage-collector"
	// defaultTerminationGracePeriod is Harvester's default-vm-termination-grace-period-seconds.
	defaultTerminationGracePeriod = 120
)

// startWebhooks serves the webhooks and registers them with the API server.
func startWebhooks(ctx context.Context, c client.Client, cfg Config) (*webhooks, error) {
	w := &webhooks{c: c, overcommit: cfg.Overcommit, noPersistentState: cfg.NoVMPersistentState}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/webhook/validation", w.serve(w.validate))
	mux.HandleFunc("/v1/webhook/mutation", w.serve(w.mutate))
	mux.HandleFunc(pcidevicesValidationPath, w.serve(w.validateDevices))
	w.server = httptest.NewTLSServer(mux)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.server.Certificate().Raw})
	rule := func(group, resource string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
		}}
	}
	create, update, del := admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "harvester-validator"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    validatorName,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(w.server.URL + "/v1/webhook/validation"), CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule("kubevirt.io", "virtualmachines", create, update), rule("", "persistentvolumeclaims", create, del)},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		}, {
			// The pcidevices-controller add-on's own validator (harvester/pcidevices
			// pkg/webhook/server.go: ValidatorName, failurePolicy Ignore). It allows every VM
			// without devices: the API server calls it for VMs with devices only, so that the
			// benchmarks' thousands of VM writes cost no call that could not refuse them.
			Name: pcidevicesValidatorName,
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "has-devices", Expression: "has(object.spec) && has(object.spec.template) && " +
				"has(object.spec.template.spec) && has(object.spec.template.spec.domain) && has(object.spec.template.spec.domain.devices) && " +
				"(has(object.spec.template.spec.domain.devices.hostDevices) || has(object.spec.template.spec.domain.devices.gpus))"}},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(w.server.URL + pcidevicesValidationPath), CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule("kubevirt.io", "virtualmachines", create, update)},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
		}},
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "harvester-mutator"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    mutatorName,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(w.server.URL + "/v1/webhook/mutation"), CABundle: ca},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule("kubevirt.io", "virtualmachines", create, update)},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			// As Harvester's: a mutator that fails lets the object through unchanged.
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
		}},
	}
	for _, cfg := range []client.Object{validating, mutating} {
		if err := c.Create(ctx, cfg); err != nil {
			w.server.Close()
			return nil, fmt.Errorf("register Harvester's webhooks: %w", err)
		}
	}
	return w, nil
}

func (w *webhooks) close() { w.server.Close() }

// serve decodes an AdmissionReview, has handle answer it, and encodes the answer.
func (w *webhooks) serve(handle func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		review := &admissionv1.AdmissionReview{}
		if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
			http.Error(rw, "bad AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := handle(r.Context(), review.Request)
		resp.UID = review.Request.UID
		review.Response = resp
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(review)
	}
}

func allowed() *admissionv1.AdmissionResponse { return &admissionv1.AdmissionResponse{Allowed: true} }

// denied answers as Harvester's webhook errors do (pkg/webhook/error): the code, its reason, and
// the message.
func denied(code int32, reason metav1.StatusReason, message string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message}}
}

func (w *webhooks) validate(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	switch req.Resource.Resource {
	case "virtualmachines":
		vm := &kubevirtv1.VirtualMachine{}
		if err := json.Unmarshal(req.Object.Raw, vm); err != nil {
			return allowed()
		}
		if msg := w.macConflict(ctx, vm); msg != "" {
			return denied(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg)
		}
		if msg := cpuPinningRefusal(vm); msg != "" {
			return denied(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg) // KubeVirt's own webhook, played here
		}
		if msg := firmwareRefusal(vm, w.noPersistentState); msg != "" {
			return denied(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg) // KubeVirt's too
		}
		if msg := w.hostDevicesGateOff(ctx, vm); msg != "" {
			return denied(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, msg) // KubeVirt's too
		}
	case "persistentvolumeclaims":
		pvc := &corev1.PersistentVolumeClaim{}
		raw := req.Object.Raw
		if req.Operation == admissionv1.Delete {
			raw = req.OldObject.Raw
		}
		if err := json.Unmarshal(raw, pvc); err != nil {
			return allowed()
		}
		if req.Operation == admissionv1.Delete {
			if req.UserInfo.Username == gcUser {
				return allowed()
			}
			return w.claimInUse(ctx, pvc)
		}
		return w.claimFromImage(ctx, pvc)
	}
	return allowed()
}

// claimInUse is the PVC validator's Delete: a volume a VM (not being deleted) mounts cannot be
// deleted (409 since Harvester v1.8.0), nor one a VM owns (422).
func (w *webhooks) claimInUse(ctx context.Context, pvc *corev1.PersistentVolumeClaim) *admissionv1.AdmissionResponse {
	vms, err := vmsByIndex(ctx, w.c, pvc.Namespace, indexVMByClaim, pvc.Name)
	if err != nil {
		return denied(http.StatusInternalServerError, metav1.StatusReasonInternalError, fmt.Sprintf("failed to get VMs by index: harvesterhci.io/vm-by-pvc, PVC: %s/%s, err: %s", pvc.Namespace, pvc.Name, err))
	}
	for i := range vms {
		vm := &vms[i]
		if vm.DeletionTimestamp == nil {
			return denied(http.StatusConflict, metav1.StatusReasonConflict,
				fmt.Sprintf("can not delete the volume %s which is currently attached to VM: %s/%s", pvc.Name, vm.Namespace, vm.Name))
		}
	}
	var owners []string
	for _, ref := range pvc.OwnerReferences {
		vm := &kubevirtv1.VirtualMachine{}
		if ref.Kind == "VirtualMachine" && w.c.Get(ctx, client.ObjectKey{Namespace: pvc.Namespace, Name: ref.Name}, vm) == nil && vm.DeletionTimestamp == nil {
			owners = append(owners, ref.Name)
		}
	}
	if len(owners) > 0 {
		return denied(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			fmt.Sprintf("can not delete the volume %s which is currently owned by these VMs: %s", pvc.Name, strings.Join(owners, ",")))
	}
	return allowed()
}

// claimFromImage refuses a volume cloned from an image (harvesterhci.io/imageId) of another
// storage class than the image's status.storageClassName, or from an image of the CDI backend,
// whose volumes are cloned through a DataVolume. An image that does not exist or is not
// initialized yet decides nothing: the volume waits for it.
func (w *webhooks) claimFromImage(ctx context.Context, pvc *corev1.PersistentVolumeClaim) *admissionv1.AdmissionResponse {
	id := pvc.Annotations[annotationImageID]
	ns, name, ok := strings.Cut(id, "/")
	if !ok {
		return allowed()
	}
	image := &unstructured.Unstructured{}
	image.SetGroupVersionKind(VirtualMachineImageGVK)
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, image); err != nil {
		return allowed()
	}
	if imageBackend(image) == backendCDI {
		return denied(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			"virtualmachineimage %s uses the cdi backend: a volume of it must be a DataVolume cloned from PVC %s, not a PersistentVolumeClaim annotated %s (it would be blank)", id, id, annotationImageID))
	}
	sc, _, _ := unstructured.NestedString(image.Object, "status", "storageClassName")
	if sc != "" && ptr.Deref(pvc.Spec.StorageClassName, "") != sc {
		return denied(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf(
			"the storage class of a volume created from image %s must be the image's storage class %s (its status.storageClassName), not %q", id, sc, ptr.Deref(pvc.Spec.StorageClassName, "")))
	}
	return allowed()
}

// macConflict names the VM that already uses one of vm's MAC addresses ("" if none).
func (w *webhooks) macConflict(ctx context.Context, vm *kubevirtv1.VirtualMachine) string {
	macs := map[string]bool{}
	for _, m := range vmMACs(vm) {
		macs[m] = true
	}
	if len(macs) == 0 {
		return ""
	}
	for m := range macs {
		vms, err := vmsByIndex(ctx, w.c, "", indexVMByMAC, m)
		if err != nil {
			return "" // fail open on our own errors: the rule is about MACs, not about the simulator
		}
		for i := range vms {
			if other := &vms[i]; other.Namespace != vm.Namespace || other.Name != vm.Name {
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

// mutate is the VM mutator's Create and Update (pkg/webhook/resources/virtualmachine/mutator.go)
// with Harvester's default settings: on create, and on an update that changes the limits,
// requests = limits x 100 / overcommit (memory truncated to MiB) and the guest memory is the
// memory limit (additional-guest-memory-overhead-ratio is set by default, so no memory is reserved
// for QEMU unless the VM's annotation says so) with maxSockets = sockets; always, CPU cores, sockets
// and threads default to 1, the termination grace period to 120 seconds, and interfaces without a
// MAC address get a random locally administered one.
func (w *webhooks) mutate(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	vm := &kubevirtv1.VirtualMachine{}
	if err := json.Unmarshal(req.Object.Raw, vm); err != nil || vm.Spec.Template == nil || vm.DeletionTimestamp != nil {
		return allowed()
	}
	var ops []map[string]any
	add := func(path string, value any) {
		ops = append(ops, map[string]any{"op": "add", "path": path, "value": value})
	}
	const domain = "/spec/template/spec/domain"
	spec := &vm.Spec.Template.Spec
	limitsChanged := req.Operation == admissionv1.Create
	if req.Operation == admissionv1.Update {
		old := &kubevirtv1.VirtualMachine{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err == nil && old.Spec.Template != nil {
			oldLimits, newLimits := old.Spec.Template.Spec.Domain.Resources.Limits, spec.Domain.Resources.Limits
			limitsChanged = !oldLimits.Cpu().Equal(*newLimits.Cpu()) || !oldLimits.Memory().Equal(*newLimits.Memory()) ||
				old.Annotations[annotationReservedMemory] != vm.Annotations[annotationReservedMemory]
		}
	}
	if limitsChanged {
		requests := spec.Domain.Resources.Requests.DeepCopy()
		if requests == nil {
			requests = corev1.ResourceList{}
		}
		dedicated := spec.Domain.CPU != nil && spec.Domain.CPU.DedicatedCPUPlacement
		if cpu := spec.Domain.Resources.Limits.Cpu(); !cpu.IsZero() {
			requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(cpu.MilliValue()*100/w.overcommit.CPU, cpu.Format)
			if dedicated {
				requests[corev1.ResourceCPU] = cpu.DeepCopy() // pinned CPUs need guaranteed QoS
			}
		}
		if mem := spec.Domain.Resources.Limits.Memory(); !mem.IsZero() {
			requests[corev1.ResourceMemory] = *resource.NewQuantity(mem.Value()*100/w.overcommit.Memory/(1<<20)*(1<<20), mem.Format)
			if dedicated {
				requests[corev1.ResourceMemory] = mem.DeepCopy()
			}
			guest := mem.DeepCopy()
			if reserved, err := resource.ParseQuantity(vm.Annotations[annotationReservedMemory]); err == nil && reserved.Cmp(guest) < 0 {
				guest.Sub(reserved)
			}
			if spec.Domain.Memory == nil {
				add(domain+"/memory", map[string]any{"guest": guest.String()})
			} else {
				add(domain+"/memory/guest", guest.String())
			}
			sockets := uint32(1)
			if spec.Domain.CPU != nil && spec.Domain.CPU.Sockets != 0 {
				sockets = spec.Domain.CPU.Sockets
			}
			if spec.Domain.CPU == nil {
				add(domain+"/cpu", map[string]any{"cores": 1, "sockets": 1, "threads": 1})
				spec.Domain.CPU = &kubevirtv1.CPU{Cores: 1, Sockets: 1, Threads: 1}
			}
			add(domain+"/cpu/maxSockets", sockets)
		}
		if len(requests) > 0 {
			add(domain+"/resources/requests", requests)
		}
	}
	if cpu := spec.Domain.CPU; cpu == nil {
		add(domain+"/cpu", map[string]any{"cores": 1, "sockets": 1, "threads": 1})
	} else {
		for field, v := range map[string]uint32{"cores": cpu.Cores, "sockets": cpu.Sockets, "threads": cpu.Threads} {
			if v == 0 {
				add(domain+"/cpu/"+field, 1)
			}
		}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		add("/spec/template/spec/terminationGracePeriodSeconds", defaultTerminationGracePeriod)
	}
	if affinity, changed := cpuManagerAffinity(spec); changed {
		add("/spec/template/spec/affinity", affinity)
	}
	observed := map[string]string{}
	_ = json.Unmarshal([]byte(vm.Annotations[annotationMACAddress]), &observed)
	for i, iface := range spec.Domain.Devices.Interfaces {
		if _, seen := observed[iface.Name]; iface.MacAddress == "" && !seen {
			add(fmt.Sprintf("%s/devices/interfaces/%d/macAddress", domain, i), laaMAC())
		}
	}
	if len(ops) == 0 {
		return allowed()
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return allowed()
	}
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: ptr.To(admissionv1.PatchTypeJSONPatch)}
}

// cpuManagerAffinity is the VM mutator's makeAffinityFromVMTemplate and addNodeSelectorTerms
// for CPU pinning (since v1.6.0): every required node-affinity expression on the CPU manager
// label is dropped, and a VM with dedicated CPUs gets {<label> In [true]} in each required term
// (a new term if it has none), so that it runs only where virt-handler found the kubelet's
// static CPU manager policy. The label is the kubevirt.io/api constant the simulator is built on
// (kubevirt.io/cpumanager since KubeVirt 1.8, as Harvester v1.9 ships; cpumanager before).
// changed is false when the affinity is already so.
func cpuManagerAffinity(spec *kubevirtv1.VirtualMachineInstanceSpec) (*corev1.Affinity, bool) {
	dedicated := spec.Domain.CPU != nil && spec.Domain.CPU.DedicatedCPUPlacement
	affinity := &corev1.Affinity{}
	if spec.Affinity != nil {
		affinity = spec.Affinity.DeepCopy()
	}
	before := affinity.DeepCopy()
	if affinity.NodeAffinity == nil {
		affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	required := affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if required == nil {
		required = &corev1.NodeSelector{}
	}
	pinned := corev1.NodeSelectorRequirement{Key: kubevirtv1.CPUManager, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}
	for i := range required.NodeSelectorTerms {
		term := &required.NodeSelectorTerms[i]
		term.MatchExpressions = slices.DeleteFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool { return r.Key == kubevirtv1.CPUManager })
		if dedicated {
			term.MatchExpressions = append(term.MatchExpressions, pinned)
		}
	}
	if dedicated && len(required.NodeSelectorTerms) == 0 {
		required.NodeSelectorTerms = []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{pinned}}}
	}
	if len(required.NodeSelectorTerms) > 0 {
		affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = required
	}
	if equality.Semantic.DeepEqual(affinity.NodeAffinity, &corev1.NodeAffinity{}) {
		affinity.NodeAffinity = before.NodeAffinity
	}
	return affinity, !equality.Semantic.DeepEqual(before, affinity)
}

// cpuPinningRefusal is KubeVirt's validateCpuPinning (vmi-create-admitter.go, v1.8.3), which its
// VM admitter runs on the template: for dedicated CPUs, whole CPU requests and limits, CPU and
// memory requests equal to their limits where both are set, some memory, and at most two threads.
// "" if the VM passes. The messages are KubeVirt's, "interger" included.
func cpuPinningRefusal(vm *kubevirtv1.VirtualMachine) string {
	if vm.Spec.Template == nil || vm.Spec.Template.Spec.Domain.CPU == nil || !vm.Spec.Template.Spec.Domain.CPU.DedicatedCPUPlacement {
		return ""
	}
	const at = "spec.template.spec.domain"
	d := vm.Spec.Template.Spec.Domain
	requests, limits := d.Resources.Requests, d.Resources.Limits
	_, reqMem := requests[corev1.ResourceMemory]
	_, limMem := limits[corev1.ResourceMemory]
	reqCPU, hasReqCPU := requests[corev1.ResourceCPU]
	limCPU, hasLimCPU := limits[corev1.ResourceCPU]
	switch {
	case !reqMem && !limMem && (d.Memory == nil || (d.Memory.Hugepages == nil && d.Memory.Guest == nil)):
		return fmt.Sprintf("%[1]s.resources.requests.memory, %[1]s.resources.limits.memory, %[1]s.memory.hugepages or %[1]s.memory.guest should be provided", at)
	case hasReqCPU && reqCPU.MilliValue()%1000 != 0:
		return "provided resources CPU requests must be an interger"
	case hasLimCPU && limCPU.MilliValue()%1000 != 0:
		return "provided resources CPU limits must be an interger"
	case reqMem && limMem && !requests.Memory().Equal(*limits.Memory()):
		return fmt.Sprintf("%[1]s.resources.requests.memory must be equal to %[1]s.resources.limits.memory", at)
	case hasReqCPU && hasLimCPU && !reqCPU.Equal(limCPU):
		return fmt.Sprintf("%[1]s.resources.requests.cpu or %[1]s.resources.limits.cpu must be equal when DedicatedCPUPlacement is true ", at)
	case d.CPU.Threads > 2:
		return fmt.Sprintf("Not more than two threads must be provided at %s.cpu.threads (got %d) when DedicatedCPUPlacement is true", at, d.CPU.Threads)
	}
	return ""
}

// firmwareRefusal is what KubeVirt's VM admitter refuses of a template's firmware (""
// if nothing): Secure Boot without SMM (validateDomainSpec; an EFI bootloader whose secureBoot
// is unset counts as Secure Boot), and, without the VMPersistentState feature gate (KubeVirt 1.5
// and earlier, unless the KubeVirt CR enables it), a persistent TPM or persistent EFI
// (validatePersistentState, v1.5.0). Several causes are joined as KubeVirt's
// ToAdmissionResponse joins them.
func firmwareRefusal(vm *kubevirtv1.VirtualMachine, noPersistentState bool) string {
	if vm.Spec.Template == nil {
		return ""
	}
	const at = "spec.template.spec.domain"
	d := vm.Spec.Template.Spec.Domain
	var causes []string
	efi := d.Firmware != nil && d.Firmware.Bootloader != nil && d.Firmware.Bootloader.EFI != nil
	secureBoot := efi && ptr.Deref(d.Firmware.Bootloader.EFI.SecureBoot, true)
	smm := d.Features != nil && d.Features.SMM != nil && ptr.Deref(d.Features.SMM.Enabled, true)
	if secureBoot && !smm {
		causes = append(causes, at+" has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled.")
	}
	if noPersistentState {
		const gateOff = "VMPersistentState feature gate is not enabled in kubevirt-config"
		if d.Devices.TPM != nil && ptr.Deref(d.Devices.TPM.Persistent, false) {
			causes = append(causes, gateOff)
		}
		if efi && ptr.Deref(d.Firmware.Bootloader.EFI.Persistent, false) {
			causes = append(causes, gateOff)
		}
	}
	return strings.Join(causes, ", ")
}

// laaMAC is Harvester's GenerateLAAMacAddress: random, locally administered, unicast.
func laaMAC() string {
	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	buf[0] = buf[0]&^0x01 | 0x02
	return net.HardwareAddr(buf).String()
}

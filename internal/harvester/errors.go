package harvester

import (
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/butlerdotdev/butler-provider-harvester/api/reasons"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// Permanent returns a permanent failure in the engine's words (errkind.EnginePermanent): the
// machine, image or check cannot be served as asked until the user changes something.
func Permanent(reason, format string, args ...any) error {
	return errkind.EnginePermanent(reason, format, args...)
}

// Waiting returns a wait in the engine's words (errkind.EngineWaiting): nothing can progress
// yet, for the reason the message explains; look again after the given time.
func Waiting(reason string, after time.Duration, format string, args ...any) error {
	return errkind.EngineWaiting(reason, after, format, args...)
}

// permissionRetry is how long to wait before retrying after Harvester refused our credentials.
const permissionRetry = time.Minute

// quotaRetry is how long to wait before retrying after a ResourceQuota refused an object: quota is
// freed by other people's deletions, which the provider does not watch.
const quotaRetry = 15 * time.Second

// classify turns a Harvester API error into a waiting error where the user must act (quota,
// forbidden, unauthorized) and leaves everything else transient; a conflict stays recognisable
// (apierrors.IsConflict) so that the caller retries it without reporting it. action says what we
// tried, e.g. "create VirtualMachine default/cp-0".
func classify(err error, action string) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err) && quotaOf(err) != "":
		return Waiting(reasons.QuotaExceeded, quotaRetry,
			"Harvester refused to %s: it would exceed ResourceQuota %s (%s); raise the quota or free resources in that namespace, the provider retries",
			action, quotaOf(err), quotaDetail(err))
	case apierrors.IsForbidden(err):
		return Waiting(reasons.PermissionDenied, permissionRetry,
			"Harvester refused to %s: the credentials lack permission (%s); grant it in the Harvester Role bound to these credentials", action, apierrors.ReasonForError(err))
	case apierrors.IsUnauthorized(err):
		return Waiting(reasons.CredentialsUnavailable, permissionRetry,
			"Harvester did not accept the credentials when trying to %s: the kubeconfig's token or certificate is invalid or expired; update the credentials Secret", action)
	default:
		return fmt.Errorf("%s on Harvester: %w", action, err)
	}
}

// createError classifies the error of a create: an object refused by validation or admission (400,
// 422) is a permanent InvalidSpec naming the object, since the same object would be refused
// again; anything else is classified as usual.
func createError(err error, what string) error {
	if err == nil {
		return nil
	}
	if msg := statusMessage(err); strings.Contains(msg, unknownDeviceRefusal) {
		return Waiting(reasons.DeviceUnavailable, deviceRetry, "Harvester refused %s: %s. %s", what, msg, unknownDeviceAdvice(msg))
	}
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		msg := statusMessage(err)
		return Permanent(reasons.InvalidSpec, "Harvester rejected %s: %s%s", what, msg, refusalAdvice(msg))
	}
	return classify(err, "create "+what)
}

// unknownDeviceRefusal is in the message of Harvester's pcidevices VM webhook when it refuses a
// device resource it knows no device of (harvester/pcidevices pkg/webhook/vm_validatation.go:
// "hostdevice <name>: resource name <resource> not found in pcidevice and usbdevice cache", and
// v1.5 to v1.7 "gpu device <name>: resource name <resource> not found in pcidevice cache"). Its
// webhook framework answers it as an internal error (500), which would otherwise read as
// Harvester failing: it is a wait, since enabling a vGPU, or a device appearing, ends it.
const unknownDeviceRefusal = "not found in pcidevice"

// unknownDeviceAdvice says which field asked for the device the webhook refused, and the fix.
func unknownDeviceAdvice(msg string) string {
	field := "spec.hostDevices or spec.gpus"
	for _, word := range strings.Fields(msg) {
		if f, _ := deviceField(strings.TrimSuffix(word, ":")); f != "" {
			field = f
			break
		}
	}
	return fmt.Sprintf("Harvester knows no device of the resource %s names: a PCI device's resource is its PCIDevice's status.resourceName (Harvester's PCI Devices page), a vGPU type's is that of a vGPU enabled with the type (Advanced > vGPU Devices, Enable); correct the name or enable the vGPU, the provider retries every %s", field, deviceRetry)
}

// hostDevicesGateOff is how KubeVirt refuses host devices without its HostDevices feature gate
// (vmi-create-admitter.go, validateHostDevicesWithPassthroughEnabled).
const hostDevicesGateOff = "Host Devices feature gate is not enabled"

// persistentStateGateOff is how KubeVirt (before 1.6, which Harvester v1.7.0 ships) refuses a
// persistent TPM or EFI when its VMPersistentState feature gate is off.
const persistentStateGateOff = "VMPersistentState feature gate is not enabled"

// refusalAdvice is the fix for a refusal the provider knows the cause of ("" for others),
// starting with ". ".
func refusalAdvice(msg string) string {
	if strings.Contains(msg, hostDevicesGateOff) {
		return ". This Harvester's KubeVirt passes host devices through (spec.hostDevices, and spec.gpus on Harvester v1.8) only with its HostDevices feature gate, which Harvester turns on: add HostDevices to spec.configuration.developerConfiguration.featureGates of the KubeVirt CR (kubectl -n harvester-system edit kubevirt kubevirt), or make the machine without devices"
	}
	if strings.Contains(msg, persistentStateGateOff) {
		return ". This Harvester's KubeVirt keeps a persistent TPM or persistent EFI variables (spec.firmware.tpm: Persistent, spec.firmware.persistentEfi) only with its VMPersistentState feature gate, on by default from Harvester v1.7.0: add VMPersistentState to spec.configuration.developerConfiguration.featureGates of the KubeVirt CR (kubectl -n harvester-system edit kubevirt kubevirt), upgrade Harvester, or make the machine with an Ephemeral TPM and without persistentEfi"
	}
	return ""
}

// quotaExceededPrefix starts the message of Kubernetes' ResourceQuota admission when it refuses an
// object: "exceeded quota: <name>, requested: ..., used: ..., limited: ...".
const quotaExceededPrefix = "exceeded quota: "

// quotaOf returns the name of the ResourceQuota that refused a request ("" if none did).
func quotaOf(err error) string {
	_, rest, ok := strings.Cut(statusMessage(err), quotaExceededPrefix)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ",")
	return strings.TrimSpace(name)
}

// quotaDetail is what the quota admission says was requested, used and limited.
func quotaDetail(err error) string {
	_, rest, _ := strings.Cut(statusMessage(err), quotaExceededPrefix)
	if _, detail, ok := strings.Cut(rest, ", "); ok {
		return detail
	}
	return "no detail given"
}

// statusMessage is the API server's message for err, else err's text.
func statusMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

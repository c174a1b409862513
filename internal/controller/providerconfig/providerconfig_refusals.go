package providerconfig

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/butlerdotdev/butler-provider-harvester/api/v1alpha1"
	"github.com/butlerdotdev/butler-provider-harvester/internal/errkind"
)

// A ProviderConfig that passed its checks is not asked about again on a short timer: with many
// Harvester clusters that would be a steady stream of reviews and reads beside the watches, for
// news that the machines hear first. What its checks cover (credentials, permissions, image,
// network, storage classes) is met by every machine that uses it, so a machine that Harvester
// refuses for one of those reasons asks for a recheck (NoticeRefusal), and the ProviderConfig's
// status says what changed, in the words of the check, and gates the machines still to come.
// The recheck interval (--providerconfig-recheck-interval) is left for what no machine meets.

// recheckWakeBuffer bounds the ProviderConfigs waiting for a recheck a machine asked for. A wake
// that does not fit is dropped: the machine that met the refusal retries, and asks again.
const recheckWakeBuffer = 64

// refusalsChecked are the reasons of a machine's failure that one of the checks covers.
var refusalsChecked = map[string]bool{
	v1alpha1.ReasonPermissionDenied:       true,
	v1alpha1.ReasonCredentialsUnavailable: true,
	v1alpha1.ReasonImageNotFound:          true,
	v1alpha1.ReasonNetworkNotFound:        true,
	v1alpha1.ReasonStorageClassNotFound:   true,
}

// NoticeRefusal is told the outcome of a machine's reconcile against pc's Harvester. When
// Harvester refused it for a reason a check covers, and pc last passed its checks at least
// RefusalRecheckGap ago, the checks run again now. The gap bounds what refusals cost: a reason is
// not always about what the checks cover (a machine may name its own image, network or storage
// class, or use a device permission the checks do not require), so a tenant whose machine keeps
// being refused asks for no more than a check every gap, the cost of a fixed timer of that
// period. It never blocks; a nil reconciler does nothing.
func (r *Reconciler) NoticeRefusal(pc *v1alpha1.ProviderConfig, err error) {
	if r == nil || pc == nil || err == nil || !refusalsChecked[errkind.ReasonOf(err)] {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := client.ObjectKeyFromObject(pc)
	last, ok := r.seen[key]
	if !ok || last.uid != pc.UID || !last.ready || last.recheckAsked || time.Since(last.at) < r.RefusalRecheckGap {
		// Not validated yet, already failing (retried every NotReadyRetry), already asked, or
		// checked within the gap.
		return
	}
	select {
	case madeOnFirstUse(&r.recheckWake, recheckWakeBuffer) <- event.GenericEvent{Object: pc.DeepCopy()}:
		last.recheckAsked = true
		r.seen[key] = last
	default:
	}
}

// recheckRequests delivers the ProviderConfigs whose machines asked for a recheck.
func (r *Reconciler) recheckRequests() <-chan event.GenericEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return madeOnFirstUse(&r.recheckWake, recheckWakeBuffer)
}

// madeOnFirstUse returns *ch, made with room for size events if it is not yet: the channels that
// wake controllers exist from whichever comes first, the controller's watch or a wake. The
// reconciler's mu must be held.
func madeOnFirstUse(ch *chan event.GenericEvent, size int) chan event.GenericEvent {
	if *ch == nil {
		*ch = make(chan event.GenericEvent, size)
	}
	return *ch
}

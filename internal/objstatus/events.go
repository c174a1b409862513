package objstatus

import (
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// MaxEventNote is the longest note, in bytes, the API server accepts in an event.
const MaxEventNote = 1024

// RecordEvent records an event whose note is message, shortened to what the API server accepts.
// The message is passed as an argument, never as a format: it may contain '%'.
func RecordEvent(recorder events.EventRecorder, obj runtime.Object, eventType, reason, action, message string) {
	recorder.Eventf(obj, nil, eventType, reason, action, "%s", TruncateNote(message))
}

// TruncateNote cuts a note to MaxEventNote bytes on a rune boundary: a multibyte character cut in
// half would be replaced by a 3-byte U+FFFD when the event is encoded and push it over the limit.
func TruncateNote(message string) string {
	const ellipsis = " [...]"
	if len(message) <= MaxEventNote {
		return message
	}
	cut := MaxEventNote - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut] + ellipsis
}

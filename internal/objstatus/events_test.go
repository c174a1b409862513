package objstatus

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Event notes are cut on a rune boundary, within the API limit.
func TestTruncateNoteOnRuneBoundary(t *testing.T) {
	for _, msg := range []string{strings.Repeat("é", 700), strings.Repeat("a", 1019) + strings.Repeat("日本", 10), strings.Repeat("x", MaxEventNote)} {
		got := TruncateNote(msg)
		if len(got) > MaxEventNote || !utf8.ValidString(got) {
			t.Fatalf("note of %d bytes (valid UTF-8: %v)", len(got), utf8.ValidString(got))
		}
		if len(msg) <= MaxEventNote && got != msg {
			t.Fatal("a note within the limit was changed")
		}
	}
}

package app

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// Printable returns s with every control character escaped, so that a value read from the
// cluster is shown as text and never acts on the terminal: whoever may write a Lease, a pod, a
// plan's result or a server message could otherwise move the cursor, rewrite earlier lines or
// retitle the window with escape sequences. C0 controls (newline and tab included: a value is
// one line), DEL and C1 controls become \xNN or \u00NN, bytes that are not UTF-8 \xNN, and
// the bidirectional controls, which reorder how the rest of a line reads, \uNNNN.
func Printable(s string) string { return escapeControls(s, false) }

// PrintableText is Printable for a text the plugin composed of several lines, such as an error
// followed by advice: its newlines and tabs stay, every other control character is escaped.
func PrintableText(s string) string { return escapeControls(s, true) }

// escapeControls escapes what Printable describes; keepLayout keeps \n and \t.
func escapeControls(s string, keepLayout bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLayout && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f, bidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// bidiControl reports whether r is one of Unicode's bidirectional formatting characters.
func bidiControl(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// PrintError writes a failed command's error as the plugin prints it: with what to do next
// (Actionable), and escaped (PrintableText), since server messages are part of it.
func PrintError(w io.Writer, cmd *cobra.Command, err error) {
	fmt.Fprintf(w, "error: %s\n", PrintableText(Actionable(cmd, err).Error()))
}

package jobs

import "unicode/utf8"

// TruncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence: the result is the
// longest prefix of s within n bytes that ends on a sequence boundary, and "" when n < 1. Bytes
// that are not valid UTF-8 count as sequences of one byte and may be cut anywhere. It is the one
// truncation of the run model (result summaries, runner results) and of the text others wrote
// that the controller copies into bounded fields (condition messages, events).
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	// Find the last sequence that starts before n (at most utf8.UTFMax bytes back); cut before
	// it when it runs past n.
	for i := n - 1; i >= 0 && i > n-1-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if _, size := utf8.DecodeRuneInString(s[i:]); i+size > n {
				return s[:i]
			}
			break
		}
	}
	return s[:n]
}

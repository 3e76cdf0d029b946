package jobs

// TruncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence, for text others
// wrote that the controller copies into bounded fields (condition messages, events).
func TruncateUTF8(s string, n int) string { return truncateUTF8(s, n) }

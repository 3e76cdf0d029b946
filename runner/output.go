package runner

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// maxLogLine bounds how much of an unfinished output line the runner holds before it writes
// (or withholds) a part of it.
const maxLogLine = 64 << 10

// summaryPrefixes start the lines of a plan, apply, destroy or refresh that the log keeps: the
// counts and outcomes OpenTofu and Terraform print, and the notice of an interrupt. None carries
// a value.
var summaryPrefixes = []string{"Plan: ", "No changes.", "Apply complete!", "Destroy complete!", "Interrupt received."}

// summaryLine reports whether a line of a step's stdout is one the log keeps when the step's
// output shows planned values.
func summaryLine(line string) bool {
	for _, p := range summaryPrefixes {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// logWriter passes a runtime's output to the log (the pod log) one line at a time, each line
// scrubbed of every secret known when it is written. With summaryOnly it passes only summary
// lines and counts the others, since a plan's body shows every planned value that is not
// sensitive and the log is readable more widely than plans are. Close writes what is left.
type logWriter struct {
	mu          sync.Mutex
	dst         io.Writer
	secrets     *secretSet
	summaryOnly bool
	pending     []byte
	// long is set while the rest of an overlong line is being withheld.
	long     bool
	withheld int
}

func newLogWriter(dst io.Writer, secrets *secretSet, summaryOnly bool) *logWriter {
	return &logWriter{dst: dst, secrets: secrets, summaryOnly: summaryOnly}
}

// Write takes output as it comes and writes every complete line.
func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = append(w.pending, p...)
	done := 0
	for {
		i := bytes.IndexByte(w.pending[done:], '\n')
		if i < 0 {
			break
		}
		w.line(string(w.pending[done : done+i+1]))
		done += i + 1
	}
	w.pending = append(w.pending[:0], w.pending[done:]...)
	if len(w.pending) > max(maxLogLine, 2*w.secrets.longest()) {
		w.part()
	}
	return len(p), nil
}

// Close writes an unfinished last line, ended with a newline so the runner's next line starts
// on its own.
func (w *logWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) > 0 {
		w.line(string(w.pending) + "\n")
		w.pending = w.pending[:0]
	}
	return nil
}

// Withheld is the number of lines withheld so far.
func (w *logWriter) Withheld() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.withheld
}

func (w *logWriter) line(text string) {
	if w.summaryOnly {
		if w.long {
			// The end of an overlong line, counted when its first part was withheld.
			w.long = false
			return
		}
		if !summaryLine(strings.TrimRight(text, "\r\n")) {
			w.withheld++
			return
		}
	}
	_, _ = io.WriteString(w.dst, w.secrets.redact(text))
}

// part deals with an overlong unfinished line: withheld whole under summaryOnly, else written
// up to a point no secret straddles, keeping what could be the start of one.
func (w *logWriter) part() {
	if w.summaryOnly {
		if !w.long {
			w.withheld++
			w.long = true
		}
		w.pending = w.pending[:0]
		return
	}
	text := string(w.pending)
	cut := safeCut(text, w.secrets.list(), w.secrets.longest())
	_, _ = io.WriteString(w.dst, w.secrets.redact(text[:cut]))
	w.pending = append(w.pending[:0], text[cut:]...)
}

// safeCut is how much of text can be written before the rest arrives: all but its last
// longest-1 bytes, which could begin a secret, and never through a secret it holds. When secrets
// cover the whole text it returns len(text) rather than hold the output forever.
func safeCut(text string, secrets []string, longest int) int {
	cut := len(text) - max(longest-1, 0)
	for _, span := range occurrences(text, secrets) {
		if span[0] < cut && cut < span[1] {
			cut = span[0]
		}
	}
	if cut <= 0 {
		return len(text)
	}
	return cut
}

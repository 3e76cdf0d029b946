package runner

import (
	"bytes"
	"io"
	"sync"
)

// maxLogLine bounds how much of an unfinished output line the runner holds before it writes
// (or withholds) a part of it.
const maxLogLine = 64 << 10

// logWriter passes a runtime's output to the log (the pod log) one line at a time, each line
// scrubbed of every secret known when it is written. Close writes what is left.
type logWriter struct {
	mu      sync.Mutex
	dst     io.Writer
	secrets *secretSet
	pending []byte
}

func newLogWriter(dst io.Writer, secrets *secretSet) *logWriter {
	return &logWriter{dst: dst, secrets: secrets}
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

func (w *logWriter) line(text string) {
	_, _ = io.WriteString(w.dst, w.secrets.redact(text))
}

// part writes an overlong unfinished line up to a point no secret straddles, keeping what could
// be the start of one.
func (w *logWriter) part() {
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

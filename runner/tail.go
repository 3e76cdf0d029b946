package runner

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/captf/captf/jobs"
)

// maxStderrTail bounds the stderr a step keeps in memory for its error tail.
const maxStderrTail = 64 << 10

// ansiEscape matches the terminal escape sequences a runtime may print despite -no-color.
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]`)

// errorTail builds the curated summary of a failed step, at most jobs.MaxErrorSummaryBytes:
// the error diagnostics of `validate -json` when the step produced them, else the "Error:"
// lines of its stderr with escape sequences and box drawing removed, else "step X exited N".
// Every secret in sensitive is replaced by "(sensitive)".
func errorTail(step string, exit int, validateJSON []byte, stderr string, sensitive []string) string {
	tail := validateDiagnostics(validateJSON)
	if tail == "" {
		tail = errorLines(stderr)
	}
	if tail == "" {
		tail = fmt.Sprintf("step %s exited %d", step, exit)
	}
	return jobs.TruncateUTF8(redact(tail, sensitive), jobs.MaxErrorSummaryBytes)
}

// validateDiagnostics formats the error diagnostics of `validate -json` output, one a line, as
// "Error: <summary> (<file>:<line>): <detail>".
func validateDiagnostics(doc []byte) string {
	if len(doc) == 0 {
		return ""
	}
	var out struct {
		Diagnostics []struct {
			Severity string `json:"severity"`
			Summary  string `json:"summary"`
			Detail   string `json:"detail"`
			Range    *struct {
				Filename string `json:"filename"`
				Start    struct {
					Line int `json:"line"`
				} `json:"start"`
			} `json:"range"`
		} `json:"diagnostics"`
	}
	if err := json.Unmarshal(doc, &out); err != nil {
		return ""
	}
	var lines []string
	for _, d := range out.Diagnostics {
		if d.Severity != "error" {
			continue
		}
		line := "Error: " + oneLine(d.Summary)
		if d.Range != nil && d.Range.Filename != "" {
			line += fmt.Sprintf(" (%s:%d)", d.Range.Filename, d.Range.Start.Line)
		}
		if detail := oneLine(d.Detail); detail != "" {
			line += ": " + detail
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// errorLine matches an error line of OpenTofu/Terraform: "Error: <summary>", and the few older
// messages of the form "Error <doing something>: <reason>" (e.g. "Error loading state: …").
var errorLine = regexp.MustCompile(`^Error( [A-Za-z][A-Za-z ]*)?: `)

// errorLines returns the distinct error lines of a runtime's stderr, in order.
func errorLines(stderr string) string {
	var lines []string
	seen := map[string]bool{}
	for _, raw := range strings.Split(stripANSI(stderr), "\n") {
		line := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(raw), "│╷╵"))
		if !errorLine.MatchString(line) || seen[line] {
			continue
		}
		seen[line] = true
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

func stripANSI(s string) string { return ansiEscape.ReplaceAllString(s, "") }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ringBuffer keeps the last max bytes written to it.
type ringBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newRingBuffer(limit int) *ringBuffer { return &ringBuffer{max: limit} }

// Write keeps p, dropping the oldest bytes beyond the bound.
func (r *ringBuffer) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - r.max; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	return len(p), nil
}

// String returns the bytes kept.
func (r *ringBuffer) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.buf)
}

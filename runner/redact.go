package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// minRedactLen is the shortest sensitive string the runner scrubs. Shorter ones are left:
// replacing every "a" would wreck the output and protect nothing worth protecting.
const minRedactLen = 4

// redacted replaces a sensitive value wherever the runner writes.
const redacted = "(sensitive)"

// redact replaces every occurrence of a secret in text by "(sensitive)". Occurrences that
// overlap or touch are replaced as one, so no part of either secret is left, whatever the order
// of secrets. Secrets shorter than minRedactLen are ignored. It is the one function that scrubs
// whatever the runner writes: the error tail, its own log lines and the runtime's output.
func redact(text string, secrets []string) string {
	spans := occurrences(text, secrets)
	if len(spans) == 0 {
		return text
	}
	var out strings.Builder
	last := 0
	for _, span := range spans {
		out.WriteString(text[last:span[0]])
		out.WriteString(redacted)
		last = span[1]
	}
	out.WriteString(text[last:])
	return out.String()
}

// occurrences returns the byte ranges where secrets of at least minRedactLen bytes occur in
// text, in order, with ranges that overlap or touch merged.
func occurrences(text string, secrets []string) [][2]int {
	var spans [][2]int
	for _, s := range secrets {
		if len(s) < minRedactLen {
			continue
		}
		for from := 0; from < len(text); {
			i := strings.Index(text[from:], s)
			if i < 0 {
				break
			}
			spans = append(spans, [2]int{from + i, from + i + len(s)})
			from += i + 1
		}
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var merged [][2]int
	for _, span := range spans {
		if n := len(merged); n > 0 && span[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], span[1])
			continue
		}
		merged = append(merged, span)
	}
	return merged
}

// secretSet is what one run must never write: learnt from the rendered inputs, the
// credentials and the plan. It grows between steps while the output of a step may be read.
type secretSet struct {
	mu      sync.RWMutex
	secrets []string
	seen    map[string]bool
}

// add records values and the forms in which a runtime may print them (sensitiveForms).
func (s *secretSet) add(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	for _, v := range values {
		for _, form := range sensitiveForms(v) {
			if len(form) >= minRedactLen && !s.seen[form] {
				s.seen[form] = true
				s.secrets = append(s.secrets, form)
			}
		}
	}
}

// list returns the secrets; the caller must not change it.
func (s *secretSet) list() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.secrets
}

// redact scrubs text of every secret known so far.
func (s *secretSet) redact(text string) string { return redact(text, s.list()) }

// longest is the length of the longest secret.
func (s *secretSet) longest() int {
	n := 0
	for _, v := range s.list() {
		n = max(n, len(v))
	}
	return n
}

// sensitiveForms are the texts under which a value may be printed: the value; its JSON-escaped
// body, as a source snippet of terraform.tfvars.json shows it; each line of a value of several
// lines, because output is redacted line by line; and each word of a one-line value with spaces,
// because OpenTofu wraps its messages at spaces.
func sensitiveForms(v string) []string {
	forms := []string{v}
	for _, escapeHTML := range []bool{false, true} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(escapeHTML)
		if enc.Encode(v) == nil {
			quoted := strings.TrimSuffix(buf.String(), "\n")
			forms = append(forms, quoted[1:len(quoted)-1])
		}
	}
	if strings.ContainsAny(v, "\r\n") {
		for _, line := range strings.FieldsFunc(v, func(r rune) bool { return r == '\n' || r == '\r' }) {
			forms = append(forms, strings.TrimSpace(line))
		}
	}
	// Words only of a value on one line, such as a passphrase: the words of a document (bootstrap
	// data) are the words of any log line, and would leave the log unreadable.
	if words := strings.Fields(v); len(words) > 1 && !strings.ContainsAny(v, "\r\n") {
		forms = append(forms, words...)
	}
	return forms
}

// sensitiveValues returns the texts of a sensitive JSON value: each string leaf, the literal
// text of each number, and the compact JSON of an object or list as a whole (a module may print
// jsonencode of it). Booleans and null are no secrets.
func sensitiveValues(raw json.RawMessage) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case json.Number:
			out = append(out, v.String())
		case map[string]any:
			for _, child := range v {
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(v)
	switch v.(type) {
	case map[string]any, []any:
		var compact bytes.Buffer
		if json.Compact(&compact, raw) == nil {
			out = append(out, compact.String())
		}
	}
	return out
}

// configSecrets returns the values of the sensitive variables of the rendered root in config:
// main.tf.json declares them (`"sensitive": true`, as the controller marks variables from
// Secrets and sensitive inputs such as bootstrap data) and terraform.tfvars.json sets them. It
// fails closed: when the declarations cannot be read, every value counts as sensitive, and when
// the values do not parse, every line of their file does, since the runtime may quote it.
func configSecrets(config string) []string {
	data, err := os.ReadFile(filepath.Join(config, varsFile))
	if err != nil {
		return nil
	}
	var values map[string]json.RawMessage
	if err := json.Unmarshal(data, &values); err != nil {
		return strings.Split(string(data), "\n")
	}
	sensitive, known := sensitiveVariables(filepath.Join(config, mainFile))
	var out []string
	for name, raw := range values {
		if !known || sensitive[name] {
			out = append(out, sensitiveValues(raw)...)
		}
	}
	return out
}

// sensitiveVariables reads the variable declarations of a root module file in JSON syntax,
// where "variable" is an object of blocks by name, or a list of such objects. known is false
// when the file cannot be read or parsed. A declaration whose "sensitive" is anything but false
// counts as sensitive.
func sensitiveVariables(path string) (sensitive map[string]bool, known bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	var root struct {
		Variable json.RawMessage `json:"variable"`
	}
	if err := json.Unmarshal(data, &root); err != nil {
		return nil, false
	}
	var groups []map[string]map[string]json.RawMessage
	switch trimmed := bytes.TrimSpace(root.Variable); {
	case len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")):
	case trimmed[0] == '[':
		if err := json.Unmarshal(trimmed, &groups); err != nil {
			return nil, false
		}
	default:
		var one map[string]map[string]json.RawMessage
		if err := json.Unmarshal(trimmed, &one); err != nil {
			return nil, false
		}
		groups = append(groups, one)
	}
	sensitive = map[string]bool{}
	for _, group := range groups {
		for name, block := range group {
			if flag, ok := block["sensitive"]; ok && !bytes.Equal(bytes.TrimSpace(flag), []byte("false")) {
				sensitive[name] = true
			}
		}
	}
	return sensitive, true
}

// credentialSecrets returns the contents of the files in dir, the identity's credentials the
// Job mounts one file per key; the same values reach the runtime as environment variables. The
// Secret volume's own entries (..data) are skipped. A directory it cannot read is an error: the
// run would not know what to redact.
func credentialSecrets(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the credentials: %w", err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if info, err := os.Stat(path); err != nil || !info.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading the credentials: %w", err)
		}
		out = append(out, string(data))
	}
	return out, nil
}

// envSecrets returns the values that environ gives the variables named in names.
func envSecrets(environ, names []string) []string {
	wanted := map[string]bool{}
	for _, n := range names {
		wanted[n] = true
	}
	var out []string
	for _, kv := range environ {
		if name, value, ok := strings.Cut(kv, "="); ok && wanted[name] {
			out = append(out, value)
		}
	}
	return out
}

package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Bounds of the result summary.
const (
	// MaxSummaryBytes bounds the encoded captf.io/result annotation.
	MaxSummaryBytes = 8 << 10
	// MaxErrorSummaryBytes bounds an error summary, as in status.lastRun.error.summary.
	MaxErrorSummaryBytes = 512
	// MaxPlanResources bounds the resources listed with a plan.
	MaxPlanResources = 50
	// MaxDriftResources bounds the resources listed with drift.
	MaxDriftResources = 20
	// maxWordBytes bounds the short words of a summary (outcome, error kind, step), which only a
	// broken writer makes long.
	maxWordBytes = 128
)

// ResourceChange is one resource of a plan or of drift: its address and its actions in plan
// order (create, update, delete, ...). Like Changes, it is part of the runner result and of the
// captf.io/result annotation, not the runs API's type: those formats keep reading what older
// runners and controllers wrote, whatever the API's internal types become.
type ResourceChange struct {
	// Address is the resource address, e.g. module.net.aws_vpc.this.
	Address string `json:"address"`
	// Actions are the planned actions in plan order.
	Actions []string `json:"actions,omitempty"`
}

// Changes counts what an apply, destroy or refresh changed, as the runner result and the
// captf.io/result annotation carry it; the runs API shows it as runs.Changes.
type Changes struct {
	// Add counts created resources.
	Add int `json:"add"`
	// Change counts updated resources.
	Change int `json:"change"`
	// Destroy counts deleted resources.
	Destroy int `json:"destroy"`
	// Import counts imported resources.
	Import int `json:"import,omitempty"`
}

// ErrorSummary is why a run failed.
type ErrorSummary struct {
	// Kind is the runner's error kind.
	Kind ErrorKind `json:"kind"`
	// Step is the step that failed, when one did.
	Step string `json:"step,omitempty"`
	// Summary is a curated message of at most MaxErrorSummaryBytes.
	Summary string `json:"summary,omitempty"`
}

// PlanSummary is the plan a plan Job, or a guarded or approved apply, produced.
type PlanSummary struct {
	// Hash is the p3: plan hash; it is never dropped to fit.
	Hash string `json:"hash,omitempty"`
	// Add counts resources to create.
	Add int `json:"add"`
	// Change counts resources to update.
	Change int `json:"change"`
	// Destroy counts resources to delete or replace.
	Destroy int `json:"destroy"`
	// Resources lists at most MaxPlanResources changes.
	Resources []ResourceChange `json:"resources,omitempty"`
	// Truncated is set when Resources does not list every change.
	Truncated bool `json:"truncated,omitempty"`
	// Destructive is set when a change deletes or replaces.
	Destructive bool `json:"destructive,omitempty"`
}

// DriftSummary is what a drift check found.
type DriftSummary struct {
	// Detected is set when the infrastructure differs from the state.
	Detected bool `json:"detected"`
	// Add counts resources the remediation would create.
	Add int `json:"add"`
	// Change counts resources it would update.
	Change int `json:"change"`
	// Destroy counts resources it would delete or replace.
	Destroy int `json:"destroy"`
	// Resources lists at most MaxDriftResources drifted resources.
	Resources []ResourceChange `json:"resources,omitempty"`
	// Truncated is set when Resources does not list every drifted resource.
	Truncated bool `json:"truncated,omitempty"`
}

// Summary is the result of a finished Job, kept in its captf.io/result annotation because a
// bookkept Job's pod is not read again. Everything the API shows about a run's result comes
// from it.
type Summary struct {
	// Outcome is the Job's outcome at bookkeeping.
	Outcome Outcome `json:"outcome,omitempty"`
	// Error is set when the run failed.
	Error *ErrorSummary `json:"error,omitempty"`
	// Changes counts what the run changed.
	Changes *Changes `json:"changes,omitempty"`
	// Plan is the plan the run produced.
	Plan *PlanSummary `json:"plan,omitempty"`
	// Drift is what a drift check found.
	Drift *DriftSummary `json:"drift,omitempty"`
	// FinishedAt is when the Job finished.
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`

	// Unreadable is set by DecodeSummary on a value it could not read; it is never encoded.
	Unreadable bool `json:"-"`
}

// ErrSummaryTooLarge is returned when a summary cannot fit MaxSummaryBytes even with its
// resource lists and error summary dropped.
var ErrSummaryTooLarge = errors.New("result summary too large")

// EncodeSummary encodes s as compact JSON of at most MaxSummaryBytes. Resource lists are capped
// (MaxPlanResources, MaxDriftResources) and the error summary cut to MaxErrorSummaryBytes first;
// when that is still too large it drops listed resources from the end (drift first, then plan,
// marking the list truncated) and then cuts the error summary. The plan hash and the counts are
// never dropped.
func EncodeSummary(s Summary) (string, error) {
	s = normalizeSummary(s)
	for {
		b, err := CanonicalJSON(s)
		if err != nil {
			return "", fmt.Errorf("encoding result summary: %w", err)
		}
		excess := len(b) - MaxSummaryBytes
		if excess <= 0 {
			return string(b), nil
		}
		switch {
		case s.Drift != nil && len(s.Drift.Resources) > 0:
			s.Drift.Resources = dropTail(s.Drift.Resources, excess)
			s.Drift.Truncated = true
		case s.Plan != nil && len(s.Plan.Resources) > 0:
			s.Plan.Resources = dropTail(s.Plan.Resources, excess)
			s.Plan.Truncated = true
		case s.Error != nil && s.Error.Summary != "":
			// JSON escaping can make the encoded text longer than the string, so the loop
			// comes back here until it fits or the summary is gone.
			s.Error.Summary = TruncateUTF8(s.Error.Summary, len(s.Error.Summary)-excess)
		default:
			return "", fmt.Errorf("%w: %d bytes without lists and error summary, limit %d", ErrSummaryTooLarge, len(b), MaxSummaryBytes)
		}
	}
}

// DecodeSummary reads a captf.io/result value. It tolerates unknown fields and caps resource
// lists like EncodeSummary. A value that is oversized, not a JSON object or malformed gives a
// summary with Unreadable set and an error; it never panics.
func DecodeSummary(value string) (Summary, error) {
	if len(value) > MaxSummaryBytes {
		return Summary{Unreadable: true}, fmt.Errorf("%w: %d bytes, limit %d", ErrSummaryTooLarge, len(value), MaxSummaryBytes)
	}
	trimmed := bytes.TrimSpace([]byte(value))
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Summary{Unreadable: true}, errors.New("result summary: not a JSON object")
	}
	var s Summary
	if err := json.Unmarshal(trimmed, &s); err != nil {
		return Summary{Unreadable: true}, fmt.Errorf("decoding result summary: %w", err)
	}
	return normalizeSummary(s), nil
}

// normalizeSummary returns a deep copy of s within the per-field bounds, so that encoding
// never writes into the caller's slices.
func normalizeSummary(s Summary) Summary {
	s.Unreadable = false
	s.Outcome = Outcome(TruncateUTF8(string(s.Outcome), maxWordBytes))
	if s.Error != nil {
		e := *s.Error
		e.Kind = ErrorKind(TruncateUTF8(string(e.Kind), maxWordBytes))
		e.Step = TruncateUTF8(e.Step, maxWordBytes)
		e.Summary = TruncateUTF8(e.Summary, MaxErrorSummaryBytes)
		s.Error = &e
	}
	if s.Changes != nil {
		c := *s.Changes
		s.Changes = &c
	}
	if s.Plan != nil {
		p := *s.Plan
		p.Resources, p.Truncated = capResources(p.Resources, MaxPlanResources, p.Truncated)
		s.Plan = &p
	}
	if s.Drift != nil {
		d := *s.Drift
		d.Resources, d.Truncated = capResources(d.Resources, MaxDriftResources, d.Truncated)
		s.Drift = &d
	}
	if s.FinishedAt != nil {
		t := *s.FinishedAt
		s.FinishedAt = &t
	}
	return s
}

// capResources copies at most limit resources, reporting truncation when any was left out.
func capResources(in []ResourceChange, limit int, truncated bool) ([]ResourceChange, bool) {
	if len(in) == 0 {
		return nil, truncated
	}
	n := min(len(in), limit)
	out := make([]ResourceChange, n)
	for i := range out {
		out[i] = ResourceChange{Address: in[i].Address, Actions: append([]string(nil), in[i].Actions...)}
	}
	return out, truncated || n < len(in)
}

// dropTail removes elements from the end until their encoded size (with a comma each) covers
// excess bytes, and at least one.
func dropTail[T any](s []T, excess int) []T {
	removed := 0
	for len(s) > 0 && (removed == 0 || removed < excess) {
		b, _ := CanonicalJSON(s[len(s)-1])
		removed += len(b) + 1
		s = s[:len(s)-1]
	}
	return s
}

// dropHead is dropTail from the front.
func dropHead[T any](s []T, excess int) []T {
	removed := 0
	for len(s) > 0 && (removed == 0 || removed < excess) {
		b, _ := CanonicalJSON(s[0])
		removed += len(b) + 1
		s = s[1:]
	}
	return s
}

// CanonicalJSON encodes v as compact JSON with sorted object keys (as encoding/json writes maps)
// and without HTML escaping, which would only inflate addresses and messages that nothing
// renders as HTML. The inputs hash, the plan hash and the result annotation all use it, so the
// same value always has the same bytes.
func CanonicalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RunnerResultVersion is the version of the runner result document this package reads and
// writes.
const RunnerResultVersion = 1

// MaxRunnerResultBytes bounds the runner result: it travels as the container's termination
// message, which Kubernetes caps at 4096 bytes.
const MaxRunnerResultBytes = 4096

// ErrorKind is the kind of error a run ended with.
type ErrorKind string

// The runner's error kinds.
const (
	// ErrorKindImageLayout: the module image lacks a module or the runtime.
	ErrorKindImageLayout ErrorKind = "image-layout"
	// ErrorKindStep: a step failed, including preparing the run and parsing its flags.
	ErrorKindStep ErrorKind = "step"
	// ErrorKindInterrupted: the runner was stopped by a signal.
	ErrorKindInterrupted ErrorKind = "interrupted"
	// ErrorKindBlocked: a guarded apply stopped before a destructive plan.
	ErrorKindBlocked ErrorKind = "blocked"
	// ErrorKindPlanChanged: an approved apply planned something else than was approved.
	ErrorKindPlanChanged ErrorKind = "plan-changed"
)

// RunnerResult is the document the runner writes as its termination message. The runner writes
// it with EncodeRunnerResult and the controller reads it with ParseRunnerResult, so this is its
// only definition.
type RunnerResult struct {
	// Version is RunnerResultVersion.
	Version int `json:"version"`
	// Op is the op the runner ran.
	Op Op `json:"op"`
	// Image is the module image as the Job named it.
	Image *RunnerImage `json:"image,omitempty"`
	// Runtime is the Terraform or OpenTofu binary that ran.
	Runtime *RunnerRuntime `json:"runtime,omitempty"`
	// Steps are the steps that ran, in order.
	Steps []RunnerStep `json:"steps,omitempty"`
	// Drift is what a drift check found; nil for other ops.
	Drift *RunnerDrift `json:"drift,omitempty"`
	// Error is why the run failed; nil when it succeeded.
	Error *RunnerError `json:"error,omitempty"`
	// Changes counts what an apply, destroy or refresh changed.
	Changes *Changes `json:"changes,omitempty"`
	// Plan is the plan a plan Job, or a guarded or approved apply, produced.
	Plan *RunnerPlan `json:"plan,omitempty"`
}

// RunnerImage names the module image.
type RunnerImage struct {
	// Ref is the image reference the Job ran.
	Ref string `json:"ref"`
}

// RunnerRuntime describes the Terraform or OpenTofu binary.
type RunnerRuntime struct {
	// Command is the binary and its fixed arguments.
	Command []string `json:"command,omitempty"`
	// Version is the version it reported.
	Version string `json:"version,omitempty"`
}

// RunnerStep is one step of a run.
type RunnerStep struct {
	// Name is the step, e.g. init, plan, apply.
	Name string `json:"name"`
	// Exit is its exit code.
	Exit int `json:"exit"`
	// Seconds is how long it ran.
	Seconds float64 `json:"seconds"`
}

// Counts counts the resources a plan or drift check would add, change and destroy.
type Counts struct {
	// Add counts resources to create.
	Add int `json:"add"`
	// Change counts resources to update.
	Change int `json:"change"`
	// Destroy counts resources to delete or replace.
	Destroy int `json:"destroy"`
}

// RunnerDrift is what a drift check found.
type RunnerDrift struct {
	// Detected is set when the plan had changes.
	Detected bool `json:"detected"`
	// Counts counts the changes.
	Counts Counts `json:"counts"`
	// Resources lists at most MaxDriftResources drifted resources.
	Resources []ResourceChange `json:"resources,omitempty"`
	// Truncated is set when Resources does not list every drifted resource.
	Truncated bool `json:"truncated,omitempty"`
}

// RunnerError is why a run failed.
type RunnerError struct {
	// Kind is the error kind.
	Kind ErrorKind `json:"kind"`
	// Step is the step that failed, when one did.
	Step string `json:"step,omitempty"`
	// Tail is a curated, redacted message of at most MaxErrorSummaryBytes.
	Tail string `json:"tail,omitempty"`
}

// RunnerPlan is a plan the runner produced.
type RunnerPlan struct {
	// Hash is the p3: plan hash; it is never dropped to fit.
	Hash string `json:"hash,omitempty"`
	// Counts counts the changes; they are never dropped to fit.
	Counts Counts `json:"counts"`
	// Resources lists at most MaxPlanResources changes.
	Resources []ResourceChange `json:"resources,omitempty"`
	// Truncated is set when Resources does not list every change.
	Truncated bool `json:"truncated,omitempty"`
	// Destructive is set when a change deletes or replaces.
	Destructive bool `json:"destructive,omitempty"`
}

// ErrRunnerResultTooLarge is returned for a runner result that is, or cannot be made, at most
// MaxRunnerResultBytes.
var ErrRunnerResultTooLarge = errors.New("runner result too large")

// EncodeRunnerResult encodes r, with Version set, as compact JSON of at most
// MaxRunnerResultBytes. The error tail is cut to MaxErrorSummaryBytes and the resource lists to
// their caps first. When it is still too large it drops, in order and only as much as needed:
// the change counts, the error tail, listed resources from the end (drift, then plan, marking
// the list truncated) and the oldest steps. The plan hash and counts are never dropped.
func EncodeRunnerResult(r RunnerResult) ([]byte, error) {
	r = normalizeRunnerResult(r)
	for {
		b, err := CanonicalJSON(r)
		if err != nil {
			return nil, fmt.Errorf("encoding runner result: %w", err)
		}
		excess := len(b) - MaxRunnerResultBytes
		if excess <= 0 {
			return b, nil
		}
		switch {
		case r.Changes != nil:
			r.Changes = nil
		case r.Error != nil && r.Error.Tail != "":
			r.Error.Tail = TruncateUTF8(r.Error.Tail, len(r.Error.Tail)-excess)
		case r.Drift != nil && len(r.Drift.Resources) > 0:
			r.Drift.Resources = dropTail(r.Drift.Resources, excess)
			r.Drift.Truncated = true
		case r.Plan != nil && len(r.Plan.Resources) > 0:
			r.Plan.Resources = dropTail(r.Plan.Resources, excess)
			r.Plan.Truncated = true
		case len(r.Steps) > 0:
			// The newest step is the one that failed, so the oldest go first.
			r.Steps = dropHead(r.Steps, excess)
		default:
			return nil, fmt.Errorf("%w: %d bytes with every droppable field dropped, limit %d", ErrRunnerResultTooLarge, len(b), MaxRunnerResultBytes)
		}
	}
}

// normalizeRunnerResult returns a deep copy of r within the per-field bounds, with JSON-safe
// step durations.
func normalizeRunnerResult(r RunnerResult) RunnerResult {
	r.Version = RunnerResultVersion
	if r.Image != nil {
		i := *r.Image
		r.Image = &i
	}
	if r.Runtime != nil {
		rt := *r.Runtime
		rt.Command = append([]string(nil), rt.Command...)
		r.Runtime = &rt
	}
	if len(r.Steps) > 0 {
		steps := make([]RunnerStep, len(r.Steps))
		for i, s := range r.Steps {
			s.Seconds = jsonSeconds(s.Seconds)
			steps[i] = s
		}
		r.Steps = steps
	}
	if r.Drift != nil {
		d := *r.Drift
		d.Resources, d.Truncated = capResources(d.Resources, MaxDriftResources, d.Truncated)
		r.Drift = &d
	}
	if r.Error != nil {
		e := *r.Error
		e.Tail = TruncateUTF8(e.Tail, MaxErrorSummaryBytes)
		r.Error = &e
	}
	if r.Changes != nil {
		c := *r.Changes
		r.Changes = &c
	}
	if r.Plan != nil {
		p := *r.Plan
		p.Resources, p.Truncated = capResources(p.Resources, MaxPlanResources, p.Truncated)
		r.Plan = &p
	}
	return r
}

// jsonSeconds rounds a duration to milliseconds, which is all a step history needs, and maps
// the values JSON cannot carry (NaN, infinities) and negatives to 0.
func jsonSeconds(s float64) float64 {
	if math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
		return 0
	}
	return math.Round(s*1000) / 1000
}

// ParseRunnerResult reads a runner result. It rejects a document over MaxRunnerResultBytes,
// anything but a JSON object, and any version but RunnerResultVersion; unknown fields are
// ignored, so a newer runner can add some.
func ParseRunnerResult(b []byte) (RunnerResult, error) {
	if len(b) > MaxRunnerResultBytes {
		return RunnerResult{}, fmt.Errorf("%w: %d bytes, limit %d", ErrRunnerResultTooLarge, len(b), MaxRunnerResultBytes)
	}
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return RunnerResult{}, errors.New("runner result: not a JSON object")
	}
	var r RunnerResult
	if err := json.Unmarshal(trimmed, &r); err != nil {
		return RunnerResult{}, fmt.Errorf("decoding runner result: %w", err)
	}
	if r.Version != RunnerResultVersion {
		return RunnerResult{}, fmt.Errorf("runner result: unsupported version %d, want %d", r.Version, RunnerResultVersion)
	}
	return r, nil
}

// NewSummary builds the captf.io/result summary of a finished Job from its outcome, when it
// finished (zero when unknown) and the runner's result (nil when the pod left none or it was
// unreadable). The bounds of EncodeSummary apply.
func NewSummary(outcome Outcome, finishedAt time.Time, result *RunnerResult) Summary {
	s := Summary{Outcome: outcome}
	if !finishedAt.IsZero() {
		s.FinishedAt = &metav1.Time{Time: finishedAt}
	}
	if result == nil {
		return s
	}
	if e := result.Error; e != nil {
		s.Error = &ErrorSummary{Kind: e.Kind, Step: e.Step, Summary: e.Tail}
	}
	s.Changes = result.Changes
	if p := result.Plan; p != nil {
		s.Plan = &PlanSummary{
			Hash:        p.Hash,
			Add:         p.Counts.Add,
			Change:      p.Counts.Change,
			Destroy:     p.Counts.Destroy,
			Resources:   p.Resources,
			Truncated:   p.Truncated,
			Destructive: p.Destructive,
		}
	}
	if d := result.Drift; d != nil {
		s.Drift = &DriftSummary{
			Detected:  d.Detected,
			Add:       d.Counts.Add,
			Change:    d.Counts.Change,
			Destroy:   d.Counts.Destroy,
			Resources: d.Resources,
			Truncated: d.Truncated,
		}
	}
	// Copy and bound here, so the summary owns none of the result's slices.
	return normalizeSummary(s)
}

// BookkeepingMarks returns the marks bookkeeping writes on a finished Job, from its conditions
// and the runner's result (nil when there is none), so that OutcomeOf can classify the Job once
// its pod is gone:
//   - a failed Job whose runner reported blocked, plan-changed or interrupted gets that mark,
//     except that a Job the deadline killed gets none: it counts as a failure;
//   - a completed plan Job without a plan hash in its result is marked plan-unreadable.
//
// It returns nil for a running Job and for a Job that needs no mark. The caller adds
// AnnotationBookkept once the status that counts the Job is saved.
func BookkeepingMarks(job *batchv1.Job, result *RunnerResult) map[string]string {
	cond := FinishCondition(job)
	switch {
	case cond == nil:
		return nil
	case cond.Type == batchv1.JobComplete:
		if OpOf(job) == OpPlan && (result == nil || result.Plan == nil || result.Plan.Hash == "") {
			return map[string]string{AnnotationPlanUnreadable: "true"}
		}
		return nil
	case cond.Reason == batchv1.JobReasonDeadlineExceeded, result == nil, result.Error == nil:
		return nil
	}
	switch result.Error.Kind {
	case ErrorKindBlocked:
		return map[string]string{AnnotationDestructivePlanBlocked: "true"}
	case ErrorKindPlanChanged:
		return map[string]string{AnnotationPlanChanged: "true"}
	case ErrorKindInterrupted:
		return map[string]string{AnnotationInterrupted: "true"}
	}
	return nil
}

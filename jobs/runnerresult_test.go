package jobs

import (
	"errors"
	"maps"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

func fullRunnerResult() RunnerResult {
	return RunnerResult{
		Op:      OpApply,
		Image:   &RunnerImage{Ref: "registry.example/module:v1"},
		Runtime: &RunnerRuntime{Command: []string{"/captf/runtime"}, Version: "1.10.0"},
		Steps:   []RunnerStep{{Name: "init", Exit: 0, Seconds: 1.25}, {Name: "apply", Exit: 1, Seconds: 30}},
		Error:   &RunnerError{Kind: ErrorKindStep, Step: "apply", Tail: "Error: boom"},
		Changes: &Changes{Add: 1, Change: 2, Destroy: 3, Import: 4},
		Plan:    &RunnerPlan{Hash: "p3:abc", Counts: Counts{Add: 1, Change: 2, Destroy: 3}, Resources: resources(2, 10), Destructive: true},
		Drift:   &RunnerDrift{Detected: true, Counts: Counts{Change: 1}, Resources: resources(1, 10)},
	}
}

func TestRunnerResultRoundTrip(t *testing.T) {
	in := fullRunnerResult()
	b, err := EncodeRunnerResult(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseRunnerResult(b)
	if err != nil {
		t.Fatal(err)
	}
	in.Version = RunnerResultVersion
	if !reflect.DeepEqual(got, in) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, in)
	}
}

func TestParseRunnerResult(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr string
		check   func(t *testing.T, r RunnerResult)
	}{
		{
			name: "version 1 is read, unknown fields are ignored",
			doc:  `{"version":1,"op":"drift","image":{"ref":"x","providersMirror":true},"drift":{"detected":true,"counts":{"add":0,"change":2,"destroy":0}},"future":[1]}`,
			check: func(t *testing.T, r RunnerResult) {
				if r.Op != OpDrift || r.Image.Ref != "x" || !r.Drift.Detected || r.Drift.Counts.Change != 2 {
					t.Errorf("parsed %+v", r)
				}
			},
		},
		{
			name: "a null error and a null step are no error",
			doc:  `{"version":1,"op":"apply","error":null,"drift":null}` + "\n",
			check: func(t *testing.T, r RunnerResult) {
				if r.Error != nil || r.Drift != nil {
					t.Errorf("parsed %+v", r)
				}
			},
		},
		{name: "another version is rejected", doc: `{"version":2,"op":"apply"}`, wantErr: "unsupported version 2"},
		{name: "a missing version is rejected", doc: `{"op":"apply"}`, wantErr: "unsupported version 0"},
		{name: "a document over 4096 bytes is rejected", doc: `{"version":1,"op":"` + strings.Repeat("x", 4096) + `"}`, wantErr: "too large"},
		{name: "a truncated document is rejected", doc: `{"version":1,"op":"app`, wantErr: "decoding runner result"},
		{name: "an empty termination message is rejected", doc: ``, wantErr: "not a JSON object"},
		{name: "a plain-text termination message is rejected", doc: `runner: killed`, wantErr: "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRunnerResult([]byte(tt.doc))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseRunnerResult() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
		})
	}
}

func TestEncodeRunnerResultDropOrder(t *testing.T) {
	steps := make([]RunnerStep, 16)
	for i := range steps {
		steps[i] = RunnerStep{Name: "step-" + strings.Repeat("s", 40) + itoa(i), Exit: i, Seconds: float64(i)}
	}
	big := func() RunnerResult {
		return RunnerResult{
			Op:      OpApply,
			Steps:   steps,
			Error:   &RunnerError{Kind: ErrorKindStep, Step: "apply", Tail: strings.Repeat("t", 600)},
			Changes: &Changes{Add: 1},
			Plan:    &RunnerPlan{Hash: "p3:" + strings.Repeat("a", 64), Counts: Counts{Add: 7, Change: 8, Destroy: 9}, Resources: resources(50, 60)},
			Drift:   &RunnerDrift{Detected: true, Counts: Counts{Add: 1}, Resources: resources(20, 60)},
		}
	}
	tests := []struct {
		name  string
		in    RunnerResult
		check func(t *testing.T, r RunnerResult)
	}{
		{
			name: "an error tail is cut to 512 bytes even when the result fits",
			in:   RunnerResult{Op: OpApply, Error: &RunnerError{Kind: ErrorKindStep, Tail: strings.Repeat("t", 600)}},
			check: func(t *testing.T, r RunnerResult) {
				if len(r.Error.Tail) != MaxErrorSummaryBytes {
					t.Errorf("tail has %d bytes", len(r.Error.Tail))
				}
			},
		},
		{
			name: "the change counts are dropped first",
			in: func() RunnerResult {
				// Pad the image reference until the result fits without its changes only.
				r := RunnerResult{
					Op:      OpApply,
					Image:   &RunnerImage{},
					Error:   &RunnerError{Kind: ErrorKindStep, Tail: strings.Repeat("t", 100)},
					Changes: &Changes{Add: 1},
					Plan:    &RunnerPlan{Hash: "p3:x", Resources: resources(20, 40)},
				}
				for {
					r.Image.Ref += "r"
					b, _ := CanonicalJSON(r)
					if len(b) > MaxRunnerResultBytes {
						return r
					}
				}
			}(),
			check: func(t *testing.T, r RunnerResult) {
				if r.Changes != nil {
					t.Errorf("changes kept")
				}
				if len(r.Error.Tail) != 100 || len(r.Plan.Resources) != 20 || r.Plan.Truncated {
					t.Errorf("dropped more than the changes: tail %d, plan resources %d", len(r.Error.Tail), len(r.Plan.Resources))
				}
			},
		},
		{
			name: "then the error tail, then drift and plan resources, then the oldest steps; never the plan hash and counts",
			in:   big(),
			check: func(t *testing.T, r RunnerResult) {
				if r.Changes != nil || r.Error.Tail != "" {
					t.Errorf("changes %v or tail %q kept", r.Changes, r.Error.Tail)
				}
				if len(r.Drift.Resources) != 0 || !r.Drift.Truncated {
					t.Errorf("drift resources %d kept before plan resources went", len(r.Drift.Resources))
				}
				if !r.Plan.Truncated || len(r.Plan.Resources) >= 50 {
					t.Errorf("plan resources %d", len(r.Plan.Resources))
				}
				if len(r.Steps) != 16 {
					t.Errorf("steps went before the lists: %d", len(r.Steps))
				}
				if r.Plan.Hash != "p3:"+strings.Repeat("a", 64) || r.Plan.Counts != (Counts{Add: 7, Change: 8, Destroy: 9}) {
					t.Errorf("plan hash or counts dropped: %+v", r.Plan)
				}
			},
		},
		{
			name: "steps go oldest first, keeping the step that failed",
			in: func() RunnerResult {
				r := big()
				r.Runtime = &RunnerRuntime{Version: strings.Repeat("v", 3300)}
				return r
			}(),
			check: func(t *testing.T, r RunnerResult) {
				if len(r.Plan.Resources) != 0 || len(r.Steps) == 16 || len(r.Steps) == 0 {
					t.Errorf("plan resources %d, steps %d", len(r.Plan.Resources), len(r.Steps))
				}
				if last := r.Steps[len(r.Steps)-1]; last.Exit != 15 {
					t.Errorf("the newest step went: %+v", last)
				}
			},
		},
		{
			name: "step durations JSON cannot carry become 0 and the rest keep milliseconds",
			in:   RunnerResult{Op: OpApply, Steps: []RunnerStep{{Name: "a", Seconds: math.NaN()}, {Name: "b", Seconds: math.Inf(1)}, {Name: "c", Seconds: -1}, {Name: "d", Seconds: 1.23456}}},
			check: func(t *testing.T, r RunnerResult) {
				got := []float64{r.Steps[0].Seconds, r.Steps[1].Seconds, r.Steps[2].Seconds, r.Steps[3].Seconds}
				if !reflect.DeepEqual(got, []float64{0, 0, 0, 1.235}) {
					t.Errorf("seconds = %v", got)
				}
			},
		},
		{
			name: "resource lists are capped at 50 and 20",
			in:   RunnerResult{Op: OpDrift, Plan: &RunnerPlan{Resources: tiny(51)}, Drift: &RunnerDrift{Resources: tiny(21)}},
			check: func(t *testing.T, r RunnerResult) {
				if len(r.Plan.Resources) != 50 || !r.Plan.Truncated || len(r.Drift.Resources) != 20 || !r.Drift.Truncated {
					t.Errorf("plan %d, drift %d", len(r.Plan.Resources), len(r.Drift.Resources))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := EncodeRunnerResult(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > MaxRunnerResultBytes {
				t.Fatalf("encoded %d bytes", len(b))
			}
			r, err := ParseRunnerResult(b)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}
	t.Run("a result that cannot fit is an error", func(t *testing.T) {
		_, err := EncodeRunnerResult(RunnerResult{Op: OpPlan, Plan: &RunnerPlan{Hash: strings.Repeat("h", MaxRunnerResultBytes)}})
		if !errors.Is(err, ErrRunnerResultTooLarge) {
			t.Errorf("EncodeRunnerResult() error = %v", err)
		}
	})
	t.Run("encoding does not change its argument", func(t *testing.T) {
		in := big()
		_, _ = EncodeRunnerResult(in)
		if !reflect.DeepEqual(in, big()) {
			t.Errorf("argument changed")
		}
	})
}

func TestNewSummary(t *testing.T) {
	tests := []struct {
		name     string
		outcome  Outcome
		finished time.Time
		result   *RunnerResult
		want     Summary
	}{
		{
			name:    "a Job without a runner result keeps its outcome and finish",
			outcome: OutcomeFailed, finished: t0,
			want: Summary{Outcome: OutcomeFailed},
		},
		{
			name:    "error, changes, plan and drift are carried over; the tail becomes the summary",
			outcome: OutcomeFailed,
			result:  func() *RunnerResult { r := fullRunnerResult(); return &r }(),
			want: Summary{
				Outcome: OutcomeFailed,
				Error:   &ErrorSummary{Kind: ErrorKindStep, Step: "apply", Summary: "Error: boom"},
				Changes: &Changes{Add: 1, Change: 2, Destroy: 3, Import: 4},
				Plan:    &PlanSummary{Hash: "p3:abc", Add: 1, Change: 2, Destroy: 3, Resources: resources(2, 10), Destructive: true},
				Drift:   &DriftSummary{Detected: true, Change: 1, Resources: resources(1, 10)},
			},
		},
		{
			name:    "the summary's lists are capped",
			outcome: OutcomeSucceeded,
			result:  &RunnerResult{Plan: &RunnerPlan{Hash: "p3:x", Resources: resources(60, 5)}},
			want:    Summary{Outcome: OutcomeSucceeded, Plan: &PlanSummary{Hash: "p3:x", Resources: resources(50, 5), Truncated: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewSummary(tt.outcome, tt.finished, tt.result)
			if !tt.finished.IsZero() {
				if got.FinishedAt == nil || !got.FinishedAt.Time.Equal(tt.finished) {
					t.Errorf("FinishedAt = %v", got.FinishedAt)
				}
				got.FinishedAt = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("NewSummary():\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	t.Run("the summary shares no slice with the result", func(t *testing.T) {
		r := fullRunnerResult()
		s := NewSummary(OutcomeFailed, t0, &r)
		s.Plan.Resources[0].Address = "changed"
		if r.Plan.Resources[0].Address == "changed" {
			t.Errorf("summary aliases the result")
		}
	})
}

func TestBookkeepingMarks(t *testing.T) {
	withError := func(kind ErrorKind) *RunnerResult {
		return &RunnerResult{Version: 1, Error: &RunnerError{Kind: kind}}
	}
	withPlan := &RunnerResult{Version: 1, Plan: &RunnerPlan{Hash: "p3:abc"}}
	tests := []struct {
		name   string
		job    batchv1.Job
		result *RunnerResult
		want   map[string]string
	}{
		{"a running Job gets no mark", mkJob(OpApply, 1, running), withError(ErrorKindBlocked), nil},
		{"a runner stopped from outside marks the Job interrupted", mkJob(OpApply, 1, failed), withError(ErrorKindInterrupted), map[string]string{AnnotationInterrupted: "true"}},
		{"a deadline kill is not marked interrupted, so it counts", mkJob(OpApply, 1, deadline), withError(ErrorKindInterrupted), nil},
		{"a blocked apply is marked destructive-plan-blocked", mkJob(OpApply, 1, failed), withError(ErrorKindBlocked), map[string]string{AnnotationDestructivePlanBlocked: "true"}},
		{"an approved apply whose plan changed is marked plan-changed", mkJob(OpApply, 1, failed), withError(ErrorKindPlanChanged), map[string]string{AnnotationPlanChanged: "true"}},
		{"a step failure needs no mark", mkJob(OpApply, 1, failed), withError(ErrorKindStep), nil},
		{"a failure without a runner result needs no mark", mkJob(OpApply, 1, failed), nil, nil},
		{"a failure whose result has no error needs no mark", mkJob(OpApply, 1, failed), withPlan, nil},
		{"a plan that succeeded with a plan hash needs no mark", mkJob(OpPlan, 1, succeeded), withPlan, nil},
		{"a plan that succeeded without a result is plan-unreadable", mkJob(OpPlan, 1, succeeded), nil, map[string]string{AnnotationPlanUnreadable: "true"}},
		{"a plan that succeeded without a plan is plan-unreadable", mkJob(OpPlan, 1, succeeded), &RunnerResult{Version: 1}, map[string]string{AnnotationPlanUnreadable: "true"}},
		{"a plan that succeeded without a plan hash is plan-unreadable", mkJob(OpPlan, 1, succeeded), &RunnerResult{Version: 1, Plan: &RunnerPlan{}}, map[string]string{AnnotationPlanUnreadable: "true"}},
		{"a succeeded apply needs no plan", mkJob(OpApply, 1, succeeded), nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BookkeepingMarks(&tt.job, tt.result)
			if !maps.Equal(got, tt.want) {
				t.Errorf("BookkeepingMarks() = %v, want %v", got, tt.want)
			}
			// The marks classify the Job as the runner reported.
			j := tt.job
			j.Annotations = map[string]string{}
			for k, v := range got {
				j.Annotations[k] = v
			}
			if tt.want[AnnotationInterrupted] != "" && OutcomeOf(&j) != OutcomeInterrupted {
				t.Errorf("marked Job reads as %s", OutcomeOf(&j))
			}
		})
	}
}

// tiny returns n resources with short addresses and no actions.
func tiny(n int) []ResourceChange {
	out := make([]ResourceChange, n)
	for i := range out {
		out[i] = ResourceChange{Address: "r" + itoa(i)}
	}
	return out
}

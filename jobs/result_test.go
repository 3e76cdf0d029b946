package jobs

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// resources returns n resources with addresses of about width characters.
func resources(n, width int) []ResourceChange {
	out := make([]ResourceChange, n)
	for i := range out {
		addr := fmt.Sprintf("module.m.null_resource.r%03d", i)
		out[i] = ResourceChange{Address: addr + strings.Repeat("x", max(width-len(addr), 0)), Actions: []string{"delete", "create"}}
	}
	return out
}

func fullSummary() Summary {
	return Summary{
		Outcome:    OutcomeFailed,
		Error:      &ErrorSummary{Kind: ErrorKindStep, Step: "apply", Summary: "Error: boom"},
		Changes:    &Changes{Add: 1, Change: 2, Destroy: 3, Import: 4},
		Plan:       &PlanSummary{Hash: EmptyPlanHash, Add: 5, Change: 6, Destroy: 7, Resources: resources(2, 10), Destructive: true},
		Drift:      &DriftSummary{Detected: true, Add: 1, Resources: resources(1, 10)},
		FinishedAt: &metav1.Time{Time: t0},
	}
}

func TestSummaryRoundTrip(t *testing.T) {
	in := fullSummary()
	enc, err := EncodeSummary(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(enc, "\n") || strings.Contains(enc, `": `) {
		t.Errorf("encoding is not compact: %s", enc)
	}
	got, err := DecodeSummary(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !got.FinishedAt.Equal(in.FinishedAt) {
		t.Errorf("finishedAt = %v, want %v", got.FinishedAt, in.FinishedAt)
	}
	got.FinishedAt, in.FinishedAt = nil, nil
	if !reflect.DeepEqual(got, in) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, in)
	}
}

func TestEncodeSummaryBounds(t *testing.T) {
	hugeError := strings.Repeat("é", 2000)
	tests := []struct {
		name  string
		in    Summary
		check func(t *testing.T, s Summary)
	}{
		{
			name: "an error summary is cut to 512 bytes without splitting a character",
			in:   Summary{Error: &ErrorSummary{Kind: ErrorKindStep, Summary: hugeError}},
			check: func(t *testing.T, s Summary) {
				if len(s.Error.Summary) > MaxErrorSummaryBytes || len(s.Error.Summary) < MaxErrorSummaryBytes-1 || !strings.HasPrefix(hugeError, s.Error.Summary) {
					t.Errorf("summary has %d bytes", len(s.Error.Summary))
				}
			},
		},
		{
			name: "plan resources are capped at 50 and marked truncated",
			in:   Summary{Plan: &PlanSummary{Hash: "p3:x", Resources: resources(60, 10)}},
			check: func(t *testing.T, s Summary) {
				if len(s.Plan.Resources) != MaxPlanResources || !s.Plan.Truncated {
					t.Errorf("%d resources, truncated %v", len(s.Plan.Resources), s.Plan.Truncated)
				}
			},
		},
		{
			name: "drift resources are capped at 20 and marked truncated",
			in:   Summary{Drift: &DriftSummary{Detected: true, Resources: resources(21, 10)}},
			check: func(t *testing.T, s Summary) {
				if len(s.Drift.Resources) != MaxDriftResources || !s.Drift.Truncated {
					t.Errorf("%d resources, truncated %v", len(s.Drift.Resources), s.Drift.Truncated)
				}
			},
		},
		{
			name: "to fit, drift resources are dropped before plan resources",
			in: Summary{
				Plan:  &PlanSummary{Hash: "p3:x", Resources: resources(50, 100)},
				Drift: &DriftSummary{Detected: true, Resources: resources(20, 200)},
			},
			check: func(t *testing.T, s Summary) {
				if len(s.Plan.Resources) != 50 || s.Plan.Truncated {
					t.Errorf("plan lost resources: %d", len(s.Plan.Resources))
				}
				if len(s.Drift.Resources) == 20 || !s.Drift.Truncated {
					t.Errorf("drift kept %d resources, truncated %v", len(s.Drift.Resources), s.Drift.Truncated)
				}
			},
		},
		{
			name: "to fit, resource lists go before the error summary, and the first resources stay",
			in: Summary{
				Error: &ErrorSummary{Kind: ErrorKindStep, Summary: strings.Repeat("e", 512)},
				Plan:  &PlanSummary{Hash: "p3:x", Add: 50, Resources: resources(50, 300)},
			},
			check: func(t *testing.T, s Summary) {
				if len(s.Error.Summary) != 512 {
					t.Errorf("error summary cut to %d before the lists were", len(s.Error.Summary))
				}
				if !s.Plan.Truncated || len(s.Plan.Resources) == 0 || s.Plan.Resources[0].Address != resources(1, 300)[0].Address {
					t.Errorf("plan resources: %d, truncated %v", len(s.Plan.Resources), s.Plan.Truncated)
				}
			},
		},
		{
			name: "to fit, the error summary is cut once the lists are gone; hash and counts stay",
			in: Summary{
				Outcome: OutcomeFailed,
				Error:   &ErrorSummary{Kind: ErrorKindStep, Step: strings.Repeat("s", 300), Summary: strings.Repeat("\x01", 512)},
				Plan:    &PlanSummary{Hash: "p3:" + strings.Repeat("h", 7500), Add: 1, Change: 2, Destroy: 3, Resources: resources(3, 10)},
			},
			check: func(t *testing.T, s Summary) {
				if len(s.Plan.Resources) != 0 || len(s.Error.Summary) == 512 {
					t.Errorf("resources %d, error summary %d bytes", len(s.Plan.Resources), len(s.Error.Summary))
				}
				if len(s.Error.Step) != maxWordBytes {
					t.Errorf("step has %d bytes", len(s.Error.Step))
				}
				if s.Plan.Hash != "p3:"+strings.Repeat("h", 7500) || s.Plan.Add != 1 || s.Plan.Change != 2 || s.Plan.Destroy != 3 {
					t.Errorf("hash or counts dropped: %+v", s.Plan)
				}
			},
		},
		{
			name: "addresses are not HTML-escaped",
			in:   Summary{Plan: &PlanSummary{Resources: []ResourceChange{{Address: `a["<&>"]`}}}},
			check: func(t *testing.T, s Summary) {
				if s.Plan.Resources[0].Address != `a["<&>"]` {
					t.Errorf("address = %q", s.Plan.Resources[0].Address)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := fmt.Sprintf("%+v", tt.in.Plan)
			enc, err := EncodeSummary(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(enc) > MaxSummaryBytes {
				t.Fatalf("encoded %d bytes", len(enc))
			}
			if strings.Contains(enc, `\u003c`) {
				t.Errorf("encoding escapes HTML: %s", enc)
			}
			if after := fmt.Sprintf("%+v", tt.in.Plan); after != before {
				t.Errorf("EncodeSummary changed its argument")
			}
			got, err := DecodeSummary(enc)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
		})
	}
}

func TestEncodeSummaryTooLarge(t *testing.T) {
	// Only a broken writer produces a hash this long, and the hash is never dropped.
	_, err := EncodeSummary(Summary{Plan: &PlanSummary{Hash: strings.Repeat("h", MaxSummaryBytes)}})
	if !errors.Is(err, ErrSummaryTooLarge) {
		t.Errorf("EncodeSummary() error = %v, want ErrSummaryTooLarge", err)
	}
}

func TestDecodeSummary(t *testing.T) {
	tests := []struct {
		name           string
		value          string
		wantUnreadable bool
		check          func(t *testing.T, s Summary)
	}{
		{
			name:  "unknown fields are tolerated",
			value: `{"outcome":"Succeeded","newField":{"x":1},"changes":{"add":1,"change":0,"destroy":0,"moved":3}}`,
			check: func(t *testing.T, s Summary) {
				if s.Outcome != OutcomeSucceeded || s.Changes == nil || s.Changes.Add != 1 {
					t.Errorf("decoded %+v", s)
				}
			},
		},
		{
			name:  "surrounding space is tolerated",
			value: " \n{\"outcome\":\"Failed\"}\n",
			check: func(t *testing.T, s Summary) {
				if s.Outcome != OutcomeFailed {
					t.Errorf("decoded %+v", s)
				}
			},
		},
		{
			name:  "lists longer than their caps are cut on reading too",
			value: `{"drift":{"detected":true,"add":0,"change":0,"destroy":0,"resources":[` + strings.Repeat(`{"address":"a"},`, 24) + `{"address":"a"}]}}`,
			check: func(t *testing.T, s Summary) {
				if len(s.Drift.Resources) != MaxDriftResources || !s.Drift.Truncated {
					t.Errorf("%d resources, truncated %v", len(s.Drift.Resources), s.Drift.Truncated)
				}
			},
		},
		{"a malformed value is unreadable", `{"outcome":`, true, nil},
		{"a value of the wrong type is unreadable", `{"changes":{"add":"one"}}`, true, nil},
		{"a bad time is unreadable", `{"finishedAt":"yesterday"}`, true, nil},
		{"an empty value is unreadable", ``, true, nil},
		{"a JSON value that is not an object is unreadable", `null`, true, nil},
		{"an oversized value is unreadable", `{"outcome":"` + strings.Repeat("x", MaxSummaryBytes) + `"}`, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeSummary(tt.value)
			if (err != nil) != tt.wantUnreadable || got.Unreadable != tt.wantUnreadable {
				t.Fatalf("DecodeSummary() = %+v, %v; want unreadable %v", got, err, tt.wantUnreadable)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

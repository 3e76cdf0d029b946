package runner

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/captf/captf/jobs"
)

// bigResult is a result with every list full and long free text, far beyond the limit.
func bigResult(resources int, address string) jobs.RunnerResult {
	var changes []jobs.ResourceChange
	for i := range resources {
		changes = append(changes, jobs.ResourceChange{Address: fmt.Sprintf("%s[%d]", address, i), Actions: []string{"delete", "create"}})
	}
	var steps []jobs.RunnerStep
	for _, name := range []string{"init", "validate", "plan", "show", "apply"} {
		steps = append(steps, jobs.RunnerStep{Name: name, Exit: 0, Seconds: 1.5})
	}
	return jobs.RunnerResult{
		Op:      jobs.OpApply,
		Image:   &jobs.RunnerImage{Ref: "registry.example/module@sha256:" + strings.Repeat("0", 64)},
		Runtime: &jobs.RunnerRuntime{Command: []string{"/captf/runtime"}, Version: "1.10.10"},
		Steps:   steps,
		Error:   &jobs.RunnerError{Kind: jobs.ErrorKindBlocked, Tail: strings.Repeat("x", 600)},
		Changes: &jobs.Changes{Add: resources},
		Plan:    &jobs.RunnerPlan{Hash: jobs.EmptyPlanHash, Counts: jobs.Counts{Add: resources, Destroy: resources}, Resources: changes, Destructive: true},
		Drift:   &jobs.RunnerDrift{Detected: true, Counts: jobs.Counts{Change: resources}, Resources: changes},
	}
}

func TestEncodeResultKeepsHashAndCounts(t *testing.T) {
	tests := []struct {
		name string
		in   jobs.RunnerResult
	}{
		{"200 resources", bigResult(200, "module.workspace.terraform_data.item")},
		{"long addresses", bigResult(50, "module.workspace.module."+strings.Repeat("n", 300)+".terraform_data.item")},
		{"an image reference alone beyond the limit", func() jobs.RunnerResult {
			r := bigResult(3, "a")
			r.Image.Ref = strings.Repeat("i", 5000)
			return r
		}()},
		{"a runtime command alone beyond the limit", func() jobs.RunnerResult {
			r := bigResult(3, "a")
			r.Runtime.Command = []string{strings.Repeat("c", 3000), strings.Repeat("d", 3000)}
			return r
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := EncodeResult(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(doc) > jobs.MaxRunnerResultBytes {
				t.Fatalf("%d bytes, limit %d", len(doc), jobs.MaxRunnerResultBytes)
			}
			got, err := jobs.ParseRunnerResult(doc)
			if err != nil {
				t.Fatal(err)
			}
			if got.Plan == nil || got.Plan.Hash != tt.in.Plan.Hash || got.Plan.Counts != tt.in.Plan.Counts {
				t.Errorf("plan %+v, want hash and counts of %+v", got.Plan, tt.in.Plan)
			}
			if got.Drift == nil || got.Drift.Counts != tt.in.Drift.Counts {
				t.Errorf("drift %+v, want counts %+v", got.Drift, tt.in.Drift.Counts)
			}
			if got.Error == nil || got.Error.Kind != tt.in.Error.Kind {
				t.Errorf("error %+v, want kind %s", got.Error, tt.in.Error.Kind)
			}
		})
	}
}

// FuzzEncodeResult checks the result's size bound: whatever the runner puts in it, the
// document fits the termination message, parses, and keeps the op, error kind, plan hash and
// counts.
func FuzzEncodeResult(f *testing.F) {
	f.Add("apply", "registry/m:v1", "/captf/runtime", "1.10.10", "step", "apply", "Error: boom", jobs.EmptyPlanHash, "module.a.b", 200, 3, 1, 2)
	f.Add("plan", strings.Repeat("i", 5000), strings.Repeat("c", 5000), strings.Repeat("v", 5000), "plan-changed", "", strings.Repeat("é", 700), "p3:"+strings.Repeat("f", 64), strings.Repeat("x", 1000), 60, 0, 0, 0)
	f.Fuzz(func(t *testing.T, op, image, command, version, kind, step, tail, hash, address string, resources, add, change, destroy int) {
		// Past the caps (50 plan, 20 drift resources) more of the same adds only time.
		resources = min(max(resources, 0), 120)
		if len(address) > 2000 {
			address = address[:2000]
		}
		if len(hash) > 100 {
			hash = hash[:100] // a plan hash is 67 bytes; the runner never makes a longer one
		}
		var list []jobs.ResourceChange
		for i := range resources {
			list = append(list, jobs.ResourceChange{Address: fmt.Sprintf("%s[%d]", address, i), Actions: []string{"update"}})
		}
		counts := jobs.Counts{Add: add, Change: change, Destroy: destroy}
		in := jobs.RunnerResult{
			Op:      jobs.Op(op),
			Image:   &jobs.RunnerImage{Ref: image},
			Runtime: &jobs.RunnerRuntime{Command: []string{command}, Version: version},
			Steps:   []jobs.RunnerStep{{Name: step, Exit: 1, Seconds: 1}},
			Error:   &jobs.RunnerError{Kind: jobs.ErrorKind(kind), Step: step, Tail: tail},
			Changes: &jobs.Changes{Add: add},
			Plan:    &jobs.RunnerPlan{Hash: hash, Counts: counts, Resources: list},
			Drift:   &jobs.RunnerDrift{Detected: true, Counts: counts, Resources: list},
		}
		doc, err := EncodeResult(in)
		if err != nil {
			t.Fatalf("EncodeResult: %v", err)
		}
		if len(doc) > jobs.MaxRunnerResultBytes {
			t.Fatalf("%d bytes, limit %d", len(doc), jobs.MaxRunnerResultBytes)
		}
		got, err := jobs.ParseRunnerResult(doc)
		if err != nil {
			t.Fatalf("ParseRunnerResult: %v\n%s", err, doc)
		}
		// JSON replaces invalid UTF-8, which a real plan hash (ASCII) never holds.
		if got.Plan == nil || utf8.ValidString(hash) && got.Plan.Hash != hash || got.Plan.Counts != counts {
			t.Errorf("plan %+v, want hash %q and counts %+v", got.Plan, hash, counts)
		}
		if got.Drift == nil || got.Drift.Counts != counts {
			t.Errorf("drift %+v, want counts %+v", got.Drift, counts)
		}
		if got.Error == nil {
			t.Error("the error was dropped")
		}
	})
}

package aggregated

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// hiddenDelete is the fixture's current plan as someone who may patch Jobs would rewrite its
// result: the same hash, which the approval binds, with the replacement of terraform_data.net
// shown as an update and the destroy gone from the counts.
func hiddenDelete(t *testing.T) string {
	t.Helper()
	v, err := jobs.EncodeSummary(jobs.Summary{Plan: &jobs.PlanSummary{
		Hash: planHash, Change: 1, Resources: []jobs.ResourceChange{{Address: "terraform_data.net", Actions: []string{"update"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// planRow is the row of plan in `kubectl get plans`, as the real kubectl prints the server's
// table.
func planRow(t *testing.T, ns, plan string) (string, error) {
	t.Helper()
	out, err := kubectl(t, "get", "plans", "-n", ns)
	if err != nil {
		return "", fmt.Errorf("kubectl get plans: %w\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if fields := strings.Fields(line); len(fields) > 0 && fields[0] == plan {
			return line, nil
		}
	}
	return "", fmt.Errorf("no row of %s in\n%s", plan, out)
}

// TestARewrittenPlanIsUnverifiedAndNotApproved: someone who may patch Jobs (the edit role does)
// rewrites the annotations of a plan that awaits approval, so that the approver would see
// another plan than the one the hash, and so the apply, stands for. The plan's Job no longer
// carries the controller's signature of what it says: `kubectl get plans` shows it Unverified,
// and its approval is a 409 that writes nothing. A plan nobody touched is approved as ever.
func TestARewrittenPlanIsUnverifiedAndNotApproved(t *testing.T) {
	c := newClients(t)
	tests := []struct {
		name string
		// annotate is what the editor writes on the plan's Job with kubectl annotate.
		annotate func(t *testing.T) []string
	}{
		{name: "the resources and counts rewritten to hide a delete", annotate: func(t *testing.T) []string {
			return []string{jobs.AnnotationResult + "=" + hiddenDelete(t)}
		}},
		{name: "the result and its digest rewritten together", annotate: func(t *testing.T) []string {
			return []string{jobs.AnnotationResult + "=" + hiddenDelete(t), runkey.AnnotationResultDigest + "=" + runkey.ResultDigest(hiddenDelete(t))}
		}},
		{name: "the result digest rewritten", annotate: func(*testing.T) []string {
			return []string{runkey.AnnotationResultDigest + "=" + runkey.ResultDigest("another result")}
		}},
		{name: "nothing rewritten"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPlanFixture(t, c)
			approver := newUser(t, c, f.ns, "approver-"+f.ns, "captf-plan-approver")
			waitForRBAC(t, approver, "create", "plans.runs.captf.io/approval", f.ns, true)
			wantPhase := "AwaitingApproval"
			if tt.annotate != nil {
				wantPhase = "Unverified"
				editor := newUser(t, c, f.ns, "editor-"+f.ns, "edit")
				waitForRBAC(t, editor, "patch", "jobs.batch", f.ns, true)
				args := append([]string{"--kubeconfig=" + editor.kubeconfig, "annotate", "job", f.current, "-n", f.ns, "--overwrite"}, tt.annotate(t)...)
				mustKubectl(t, args...)
			}
			eventually(t, 10*time.Second, func(context.Context) error {
				row, err := planRow(t, f.ns, f.current)
				if err != nil {
					return err
				}
				if !strings.Contains(row, " "+wantPhase+" ") {
					return fmt.Errorf("the plan's row, want it %s: %s", wantPhase, row)
				}
				return nil
			})

			code, body := approver.approve(t, f.ns, f.current, approvalBody(f.current, planHash), false)
			if tt.annotate == nil {
				if code != http.StatusCreated {
					t.Fatalf("approval of the untouched plan: %d %s, want 201", code, body)
				}
				return
			}
			if code != http.StatusConflict || !strings.Contains(body, "the signature of Job "+f.current+" does not verify") || !strings.Contains(body, "kubectl captf replan web") {
				t.Errorf("approval of the rewritten plan: %d %s, want a 409 that says its Job's signature does not verify and asks for a new plan", code, body)
			}
			if got := f.annotationsOf(t, c); len(got) != 0 {
				t.Errorf("annotations written on %s: %v", f.cluster.Name, got)
			}
		})
	}
}

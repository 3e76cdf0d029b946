package workspace

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/jobstest"
)

var (
	statusNow = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	at        = stamp{generation: 3, now: statusNow}
)

func bookedJob(op jobs.Op, outcome jobs.Outcome, annotations ...string) *batchv1.Job {
	b := jobstest.Builder{Kind: jobs.KindCluster, Name: "web", Op: op, Attempt: 2, Outcome: outcome, Created: statusNow.Add(-time.Minute), Annotations: map[string]string{}}
	for i := 0; i+1 < len(annotations); i += 2 {
		b.Annotations[annotations[i]] = annotations[i+1]
	}
	j := b.Job()
	return &j
}

// wantCondition checks one condition's status and reason.
func wantCondition(t *testing.T, s *infrav1.WorkspaceStatus, conditionType string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := conditions.Get(s.Conditions, conditionType)
	if c == nil || c.Status != status || c.Reason != reason {
		t.Fatalf("%s = %+v, want %s/%s", conditionType, c, status, reason)
	}
	if c.ObservedGeneration != at.generation || c.Message == "" {
		t.Fatalf("%s = %+v, want generation %d and a message", conditionType, c, at.generation)
	}
}

func TestSetBooked(t *testing.T) {
	plan := &jobs.PlanSummary{Hash: "p3:abc", Add: 1, Resources: []jobs.ResourceChange{{Address: "a.b", Actions: []string{"delete", "create"}}}}
	remediate := infrav1.DriftSpec{Action: infrav1.DriftActionRemediate}
	for _, tc := range []struct {
		rule    string
		before  func(*infrav1.WorkspaceStatus)
		run     bookedRun
		drift   infrav1.DriftSpec
		planned bool
		check   func(*testing.T, *infrav1.WorkspaceStatus, *infrav1.PlanPreview)
	}{
		{rule: "a successful apply is ApplySucceeded and Ready; provisioning waits for its outputs",
			run: bookedRun{job: bookedJob(jobs.OpApply, jobs.OutcomeSucceeded)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.ApplyJobSucceeded, metav1.ConditionTrue, conditions.ReasonApplySucceeded)
				wantCondition(t, s, conditions.Ready, metav1.ConditionTrue, conditions.ReasonReady)
				if s.Initialization != nil {
					t.Fatal("provisioned by the apply alone")
				}
			}},
		{rule: "a successful apply resolves detected drift",
			before: func(s *infrav1.WorkspaceStatus) {
				at.set(&s.Conditions, conditions.DriftDetected, metav1.ConditionTrue, conditions.ReasonDriftPending, "x")
			},
			run: bookedRun{job: bookedJob(jobs.OpApply, jobs.OutcomeSucceeded)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.DriftDetected, metav1.ConditionFalse, conditions.ReasonNoDrift)
			}},
		{rule: "the successful apply of an approved plan clears status.plan", planned: true,
			run: bookedRun{job: bookedJob(jobs.OpApply, jobs.OutcomeSucceeded, jobs.AnnotationApprovedPlan, "p3:abc")},
			check: func(t *testing.T, _ *infrav1.WorkspaceStatus, p *infrav1.PlanPreview) {
				if p != nil {
					t.Fatalf("status.plan = %+v", p)
				}
			}},
		{rule: "a failed apply is ApplyFailed with the step and summary, not Ready",
			run: bookedRun{job: bookedJob(jobs.OpApply, jobs.OutcomeFailed), summary: jobs.Summary{Error: &jobs.ErrorSummary{Step: "plan", Summary: "boom"}}},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonApplyFailed)
				wantCondition(t, s, conditions.Ready, metav1.ConditionFalse, conditions.ReasonApplyFailed)
				if m := conditions.Get(s.Conditions, conditions.ApplyJobSucceeded).Message; !strings.Contains(m, "in step plan: boom") {
					t.Fatalf("message = %q", m)
				}
				if s.LastRun == nil || s.LastRun.Error == nil || s.LastRun.Error.Summary != "boom" {
					t.Fatalf("lastRun = %+v", s.LastRun)
				}
			}},
		{rule: "a deadline is JobDeadlineExceeded",
			run: bookedRun{job: bookedJob(jobs.OpApply, jobs.OutcomeDeadlineExceeded)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonJobDeadlineExceeded)
			}},
		{rule: "a drift check's deadline is DriftJobDeadlineExceeded",
			run: bookedRun{job: bookedJob(jobs.OpDrift, jobs.OutcomeDeadlineExceeded)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.DriftJobSucceeded, metav1.ConditionFalse, conditions.ReasonDriftJobDeadlineExceeded)
			}},
		{rule: "a failed destroy is DestroyFailed",
			run: bookedRun{job: bookedJob(jobs.OpDestroy, jobs.OutcomeFailed)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonDestroyFailed)
			}},
		{rule: "a failed restore is RestoreFailed",
			run: bookedRun{job: bookedJob(jobs.OpRestore, jobs.OutcomeFailed)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.RestoreJobSucceeded, metav1.ConditionFalse, conditions.ReasonRestoreFailed)
			}},
		{rule: "an interrupted run is Unknown, not a failure",
			run: bookedRun{job: bookedJob(jobs.OpApply, jobs.OutcomeInterrupted)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, conditions.ReasonJobInterrupted)
			}},
		{rule: "a blocked apply lists what it would delete or replace and how to approve",
			run: bookedRun{job: bookedJob(jobs.OpApply, jobs.OutcomeBlocked, jobs.AnnotationInputsHash, "h1:x"), summary: jobs.Summary{Plan: plan}},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonDestructivePlanBlocked)
				m := conditions.Get(s.Conditions, conditions.ApplyJobSucceeded).Message
				for _, want := range []string{"a.b (replace)", "h1:x", "kubectl captf approve captf-c-web-apply-a2-000000", "plans/captf-c-web-apply-a2-000000/approval"} {
					if !strings.Contains(m, want) {
						t.Fatalf("message = %q, want %q in it", m, want)
					}
				}
			}},
		{rule: "a successful plan fills status.plan and awaits approval", planned: true,
			run: bookedRun{job: bookedJob(jobs.OpPlan, jobs.OutcomeSucceeded, jobs.AnnotationInputsHash, "h1:x"), summary: jobs.Summary{Plan: plan}},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, p *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, conditions.ReasonPlanAwaitingApproval)
				if p == nil || p.PlanHash != "p3:abc" || p.InputsHash != "h1:x" || p.Add != 1 || p.Resources[0] != "a.b (delete, create)" {
					t.Fatalf("status.plan = %+v", p)
				}
			}},
		{rule: "a plan-changed apply replaces status.plan without failing", planned: true,
			run: bookedRun{job: bookedJob(jobs.OpApply, jobs.OutcomePlanChanged), summary: jobs.Summary{Plan: plan}},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, p *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, conditions.ReasonPlanChanged)
				if p == nil || p.PlanHash != "p3:abc" {
					t.Fatalf("status.plan = %+v", p)
				}
			}},
		{rule: "a successful refresh records lastRefresh",
			run: bookedRun{job: bookedJob(jobs.OpRefresh, jobs.OutcomeSucceeded)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.DriftJobSucceeded, metav1.ConditionTrue, conditions.ReasonDriftChecked)
				if s.LastRefresh == nil || !s.LastRefresh.Time.Equal(statusNow) {
					t.Fatalf("lastRefresh = %v", s.LastRefresh)
				}
			}},
		{rule: "a drift check that finds drift reports it under Report",
			run: bookedRun{job: bookedJob(jobs.OpDrift, jobs.OutcomeSucceeded), summary: jobs.Summary{Drift: &jobs.DriftSummary{Detected: true, Change: 2}}},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.DriftDetected, metav1.ConditionTrue, conditions.ReasonDriftReported)
				if s.LastDriftCheck == nil {
					t.Fatal("no lastDriftCheck")
				}
			}},
		{rule: "a drift check that finds drift leaves it pending under Remediate", drift: remediate,
			run: bookedRun{job: bookedJob(jobs.OpDrift, jobs.OutcomeSucceeded), summary: jobs.Summary{Drift: &jobs.DriftSummary{Detected: true}}},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.DriftDetected, metav1.ConditionTrue, conditions.ReasonDriftPending)
			}},
		{rule: "a drift check without drift is NoDrift",
			run: bookedRun{job: bookedJob(jobs.OpDrift, jobs.OutcomeSucceeded)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				wantCondition(t, s, conditions.DriftDetected, metav1.ConditionFalse, conditions.ReasonNoDrift)
			}},
		{rule: "an older Job does not replace a newer lastRun",
			before: func(s *infrav1.WorkspaceStatus) {
				s.LastRun = &infrav1.LastRun{Job: "newer", FinishedAt: ptr.To(metav1.NewTime(statusNow.Add(time.Hour)))}
			},
			run: bookedRun{job: bookedJob(jobs.OpApply, jobs.OutcomeSucceeded)},
			check: func(t *testing.T, s *infrav1.WorkspaceStatus, _ *infrav1.PlanPreview) {
				if s.LastRun.Job != "newer" {
					t.Fatalf("lastRun = %+v", s.LastRun)
				}
			}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var s infrav1.WorkspaceStatus
			if tc.before != nil {
				tc.before(&s)
			}
			var preview *infrav1.PlanPreview
			slot := &preview
			if !tc.planned {
				slot = nil
			} else {
				preview = &infrav1.PlanPreview{PlanHash: "p3:old"}
			}
			if tc.run.finished.IsZero() {
				tc.run.finished = statusNow
			}
			// Bookkeeping classifies the Job before it is booked; so does the test.
			tc.run.outcome = jobs.OutcomeOf(tc.run.job)
			setBooked(&s, slot, at, tc.run, tc.drift, "ns")
			setReady(&s, at, jobs.KindCluster, false)
			tc.check(t, &s, preview)
		})
	}
}

func TestSetStateReadable(t *testing.T) {
	for _, tc := range []struct {
		rule       string
		st         state.State
		err        error
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"no state yet is readable", state.State{}, nil, metav1.ConditionTrue, conditions.ReasonStateNotFound},
		{"a state is read", state.State{Exists: true, Serial: 4, Resources: 2}, nil, metav1.ConditionTrue, conditions.ReasonStateRead},
		{"a lost state is not readable", state.State{}, state.ErrLost, metav1.ConditionFalse, conditions.ReasonStateLost},
		{"a corrupt state is not readable", state.State{}, fmt.Errorf("x: %w", state.ErrCorrupt), metav1.ConditionFalse, conditions.ReasonStateCorrupt},
		{"an encrypted state is not readable without its key", state.State{}, state.ErrEncrypted, metav1.ConditionFalse, conditions.ReasonStateEncrypted},
		{"an encrypted state that does not open with its key is not readable", state.State{}, fmt.Errorf("x: %w", state.ErrStateKey), metav1.ConditionFalse, conditions.ReasonStateKeyMismatch},
		{"a state in the clear where an encrypted one was is not readable", state.State{}, state.ErrNotEncrypted, metav1.ConditionFalse, conditions.ReasonStateNotEncrypted},
		{"an encrypted state is read with its key", state.State{Exists: true, Serial: 4, KeyID: "k1"}, nil, metav1.ConditionTrue, conditions.ReasonStateRead},
		{"an unsupported state is not readable", state.State{}, state.ErrUnsupportedVersion, metav1.ConditionFalse, conditions.ReasonStateUnsupported},
		{"any other error is unreadable", state.State{}, errors.New("x"), metav1.ConditionFalse, conditions.ReasonStateUnreadable},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var s infrav1.WorkspaceStatus
			setStateReadable(&s, at, tc.st, tc.err)
			setReady(&s, at, jobs.KindCluster, false)
			wantCondition(t, &s, conditions.StateReadable, tc.wantStatus, tc.wantReason)
			if s.StateKeyID != tc.st.KeyID {
				t.Errorf("stateKeyID %q, want %q", s.StateKeyID, tc.st.KeyID)
			}
			if tc.wantStatus == metav1.ConditionFalse {
				wantCondition(t, &s, conditions.Ready, metav1.ConditionFalse, tc.wantReason)
			}
		})
	}
}

func TestSetInputsProblem(t *testing.T) {
	for _, tc := range []struct {
		rule, want string
		err        error
	}{
		{"bad variables are InputsInvalid", conditions.ReasonInputsInvalid, errors.New("spec.variables.x: invalid")},
		{"inputs past the limit are InputsTooLarge", conditions.ReasonInputsTooLarge, &inputs.TooLargeError{Size: 2_000_000}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var s infrav1.WorkspaceStatus
			setInputsProblem(&s, at, tc.err)
			wantCondition(t, &s, conditions.ApplyJobSucceeded, metav1.ConditionFalse, tc.want)
		})
	}
}

func TestSetWaiting(t *testing.T) {
	plan := &infrav1.PlanPreview{PlanHash: "p3:abc", Job: "captf-c-web-plan-a1-aaaaaa"}
	for _, tc := range []struct {
		rule       string
		before     func(*infrav1.WorkspaceStatus)
		reason     string
		plan       *infrav1.PlanPreview
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"a plan awaiting approval says how to approve it", nil, decide.PlanAwaitingApproval, plan, metav1.ConditionUnknown, conditions.ReasonPlanAwaitingApproval},
		{"a changed plan keeps saying so while it waits", func(s *infrav1.WorkspaceStatus) {
			at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, conditions.ReasonPlanChanged, "the new plan p3:abc waits")
		}, decide.PlanAwaitingApproval, plan, metav1.ConditionUnknown, conditions.ReasonPlanChanged},
		{"a blocked destructive apply waits for its approval", nil, decide.DestructivePlanBlocked, nil, metav1.ConditionFalse, conditions.ReasonDestructivePlanBlocked},
		{"a backoff wait keeps the failure's condition", func(s *infrav1.WorkspaceStatus) {
			at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonApplyFailed, "boom")
		}, decide.InputsChanged + decide.BackoffSuffix, nil, metav1.ConditionFalse, conditions.ReasonApplyFailed},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var s infrav1.WorkspaceStatus
			if tc.before != nil {
				tc.before(&s)
			}
			setWaiting(&s, at, tc.reason, tc.plan, "ns")
			wantCondition(t, &s, conditions.ApplyJobSucceeded, tc.wantStatus, tc.wantReason)
		})
	}
}

func TestSetDriftPending(t *testing.T) {
	checked := statusNow.Add(-time.Hour)
	found := jobstest.Builder{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpDrift, Attempt: 1, Outcome: jobs.OutcomeSucceeded, Created: checked,
		Annotations: map[string]string{jobs.AnnotationResult: `{"outcome":"Succeeded","drift":{"detected":true,"change":1}}`}}.Job()
	failed := func(attempt int32, minutes int) batchv1.Job {
		return jobstest.Builder{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpApply, Attempt: attempt, Outcome: jobs.OutcomeFailed, Created: checked.Add(time.Duration(minutes) * time.Minute),
			Annotations: map[string]string{jobs.AnnotationDriftRemediation: "true"}}.Job()
	}
	for _, tc := range []struct {
		rule    string
		in      decide.Input
		want    bool
		wantMsg string
	}{
		{"found drift waits for remediation", decide.Input{Drift: infrav1.DriftSpec{Action: infrav1.DriftActionRemediate}, Jobs: []batchv1.Job{found}, LastDriftCheck: checked}, true, "waits for remediation"},
		{"at the cap it says remediation stopped", decide.Input{Drift: infrav1.DriftSpec{Action: infrav1.DriftActionRemediate},
			Jobs: []batchv1.Job{found, failed(1, 5), failed(2, 10), failed(3, 20)}, LastDriftCheck: checked}, true, "remediation stopped after 3 failed applies"},
		{"Report does not remediate", decide.Input{Jobs: []batchv1.Job{found}, LastDriftCheck: checked}, false, ""},
		{"no drift found, nothing pending", decide.Input{Drift: infrav1.DriftSpec{Action: infrav1.DriftActionRemediate}}, false, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var s infrav1.WorkspaceStatus
			setDriftPending(&s, at, tc.in)
			c := conditions.Get(s.Conditions, conditions.DriftDetected)
			if (c != nil) != tc.want || c != nil && (c.Reason != conditions.ReasonDriftPending || !strings.Contains(c.Message, tc.wantMsg)) {
				t.Fatalf("DriftDetected = %+v", c)
			}
		})
	}
}

func TestSetJobStartedKeepsAnEarlierVerdict(t *testing.T) {
	var s infrav1.WorkspaceStatus
	setJobStarted(&s, at, "captf-c-web-destroy-a1-aaaaaa", jobs.OpDestroy, 1, decide.Deleting)
	wantCondition(t, &s, conditions.ApplyJobSucceeded, metav1.ConditionUnknown, conditions.ReasonDestroyRunning)
	if s.ActiveJob == nil || s.ActiveJob.Name != "captf-c-web-destroy-a1-aaaaaa" || s.ActiveJob.Attempt != 1 {
		t.Fatalf("activeJob = %+v", s.ActiveJob)
	}
	at.set(&s.Conditions, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonApplyFailed, "boom")
	setJobStarted(&s, at, "captf-c-web-apply-a2-aaaaaa", jobs.OpApply, 2, decide.LastApplyFailed)
	wantCondition(t, &s, conditions.ApplyJobSucceeded, metav1.ConditionFalse, conditions.ReasonApplyFailed)
}

func TestSetRunnerRBAC(t *testing.T) {
	var s infrav1.WorkspaceStatus
	setRunnerRBAC(&s, at, "deployer", "not opted in")
	setReady(&s, at, jobs.KindCluster, false)
	wantCondition(t, &s, conditions.RunnerRBACReady, metav1.ConditionFalse, conditions.ReasonServiceAccountNotOptedIn)
	wantCondition(t, &s, conditions.Ready, metav1.ConditionFalse, conditions.ReasonServiceAccountNotOptedIn)
	setRunnerRBAC(&s, at, "deployer", "")
	wantCondition(t, &s, conditions.RunnerRBACReady, metav1.ConditionTrue, conditions.ReasonRunnerReady)
}

func TestSetSource(t *testing.T) {
	var s infrav1.WorkspaceStatus
	setSource(&s, "net:v1", "sha256:"+strings.Repeat("a", 64))
	if s.Source == nil || s.Source.Image != "net:v1" {
		t.Fatalf("source = %+v", s.Source)
	}
	setSource(&s, "net:v1", "")
	if s.Source != nil {
		t.Fatalf("an apply without digest keeps the pin %+v", s.Source)
	}
}

func TestSetReconcileHandled(t *testing.T) {
	for _, tc := range []struct {
		rule     string
		recorded string
		request  string
		want     string
	}{
		{"a request is recorded as handled", "", "2026-12-03T10:00:00.123456789Z", "2026-12-03T10:00:00.123456789Z"},
		{"a newer request replaces the one handled before", "2026-12-03T10:00:00Z", "2026-12-03T10:05:00Z", "2026-12-03T10:05:00Z"},
		{"no request keeps the last one handled", "2026-12-03T10:00:00Z", "", "2026-12-03T10:00:00Z"},
		{"a value longer than the status holds is not recorded", "2026-12-03T10:00:00Z", strings.Repeat("x", maxReconcileRequest+1), "2026-12-03T10:00:00Z"},
		{"a value of the longest length the status holds is recorded", "", strings.Repeat("x", maxReconcileRequest), strings.Repeat("x", maxReconcileRequest)},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			s := infrav1.WorkspaceStatus{LastHandledReconcileAt: tc.recorded}
			setReconcileHandled(&s, tc.request)
			if s.LastHandledReconcileAt != tc.want {
				t.Fatalf("lastHandledReconcileAt = %q, want %q", s.LastHandledReconcileAt, tc.want)
			}
		})
	}
}

func TestSetDependencies(t *testing.T) {
	applied := func(s *infrav1.WorkspaceStatus) {
		setOpCondition(s, at, jobs.OpApply, metav1.ConditionTrue, conditions.ReasonApplySucceeded, "applied")
	}
	for _, tc := range []struct {
		rule       string
		before     func(*infrav1.WorkspaceStatus)
		deps       Dependencies
		wantReady  metav1.ConditionStatus
		wantReason string
	}{
		{"a wait keeps an object that never applied Unknown", nil, waiting(conditions.ReasonWaitingForBootstrapData, "no data"),
			metav1.ConditionUnknown, conditions.ReasonWaitingForBootstrapData},
		{"a wait leaves an applied object Ready", applied, waiting(conditions.ReasonWaitingForOwner, "no owner"),
			metav1.ConditionTrue, conditions.ReasonReady},
		{"an owner that does not name the object makes it not Ready", applied, refused(conditions.ReasonOwnerMismatch, "names another"),
			metav1.ConditionFalse, conditions.ReasonOwnerMismatch},
		{"ready dependencies leave Ready to the runs", nil, Dependencies{Status: metav1.ConditionTrue, Reason: conditions.ReasonDependenciesReady, Message: "owned"},
			metav1.ConditionUnknown, conditions.ReasonNoApplyYet},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var s infrav1.WorkspaceStatus
			if tc.before != nil {
				tc.before(&s)
			}
			setDependencies(&s, at, tc.deps)
			setReady(&s, at, jobs.KindCluster, false)
			wantCondition(t, &s, conditions.DependenciesReady, tc.deps.Status, tc.deps.Reason)
			wantCondition(t, &s, conditions.Ready, tc.wantReady, tc.wantReason)
		})
	}
}

func TestSetEndpointAvailable(t *testing.T) {
	provisioned := func(s *infrav1.WorkspaceStatus) {
		s.Initialization = &infrav1.Initialization{Provisioned: ptr.To(true)}
	}
	for _, tc := range []struct {
		rule   string
		before func(*infrav1.WorkspaceStatus)
		known  bool
		want   metav1.ConditionStatus
		reason string
	}{
		{"a known endpoint is available", nil, true, metav1.ConditionTrue, conditions.ReasonEndpointAvailable},
		{"a provisioned cluster without one waits for it", provisioned, false, metav1.ConditionFalse, conditions.ReasonWaitingForEndpoint},
		{"before provisioning nothing is said", nil, false, "", ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var s infrav1.WorkspaceStatus
			if tc.before != nil {
				tc.before(&s)
			}
			setEndpointAvailable(&s, at, tc.known)
			if tc.want == "" {
				if c := conditions.Get(s.Conditions, conditions.EndpointAvailable); c != nil {
					t.Fatalf("EndpointAvailable = %+v, want none", c)
				}
				return
			}
			wantCondition(t, &s, conditions.EndpointAvailable, tc.want, tc.reason)
		})
	}
}

func TestSetAutoscaling(t *testing.T) {
	for _, tc := range []struct {
		rule    string
		a       contract.Autoscaling
		problem string
		want    metav1.ConditionStatus
		reason  string
	}{
		{"usable bounds: the replicas follow the MachinePool", contract.Autoscaling{Enabled: true, Min: 1, Max: 3}, "", metav1.ConditionTrue, conditions.ReasonReplicasFollowMachinePool},
		{"unusable annotations are said so", contract.Autoscaling{}, "both must be set", metav1.ConditionFalse, conditions.ReasonAutoscalingAnnotationsInvalid},
		{"no annotations: no autoscaling", contract.Autoscaling{}, "", metav1.ConditionFalse, conditions.ReasonAutoscalingDisabled},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var s infrav1.WorkspaceStatus
			setAutoscaling(&s, at, tc.a, tc.problem)
			wantCondition(t, &s, conditions.AutoscalingActive, tc.want, tc.reason)
			if tc.problem != "" && !strings.Contains(conditions.Get(s.Conditions, conditions.AutoscalingActive).Message, tc.problem) {
				t.Fatal("the message does not say what is wrong")
			}
		})
	}
}

func TestSetHealthSample(t *testing.T) {
	provisioned := &infrav1.Initialization{Provisioned: ptr.To(true)}
	for _, tc := range []struct {
		rule    string
		before  infrav1.TerraformMachineStatus
		job     string
		reading healthReading
		want    int32
	}{
		{"an unhealthy reading counts", infrav1.TerraformMachineStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Initialization: provisioned}, UnhealthySamples: 1}, "j2", readingUnhealthy, 2},
		{"a healthy reading resets the count", infrav1.TerraformMachineStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Initialization: provisioned}, UnhealthySamples: 2}, "j2", readingHealthy, 0},
		{"a reading that says nothing leaves the count", infrav1.TerraformMachineStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Initialization: provisioned}, UnhealthySamples: 2}, "j2", readingNone, 2},
		{"the same Job is not counted twice", infrav1.TerraformMachineStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Initialization: provisioned}, UnhealthySamples: 1, LastHealthSample: "j2"}, "j2", readingUnhealthy, 1},
		{"nothing counts before provisioning", infrav1.TerraformMachineStatus{}, "j2", readingUnhealthy, 0},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			s := tc.before
			setHealthSample(&s, tc.job, tc.reading)
			if s.UnhealthySamples != tc.want {
				t.Fatalf("unhealthySamples = %d, want %d", s.UnhealthySamples, tc.want)
			}
		})
	}
}

func TestRemediationWanted(t *testing.T) {
	machine := func(annotate bool, samples int32, mutate ...func(*infrav1.TerraformMachine)) *infrav1.TerraformMachine {
		m := &infrav1.TerraformMachine{
			Spec:   infrav1.TerraformMachineSpec{Remediation: infrav1.MachineRemediationSpec{AnnotateMachine: annotate}},
			Status: infrav1.TerraformMachineStatus{WorkspaceStatus: infrav1.WorkspaceStatus{Initialization: &infrav1.Initialization{Provisioned: ptr.To(true)}}, UnhealthySamples: samples},
		}
		for _, f := range mutate {
			f(m)
		}
		return m
	}
	for _, tc := range []struct {
		rule    string
		m       *infrav1.TerraformMachine
		reading healthReading
		want    bool
	}{
		{"a terminated machine asks at once", machine(true, 0), readingTerminated, true},
		{"the threshold of unhealthy readings asks", machine(true, 3), readingUnhealthy, true},
		{"below the threshold does not ask", machine(true, 2), readingUnhealthy, false},
		{"a count alone does not ask while the state reads healthy", machine(true, 50), readingHealthy, false},
		{"without annotateMachine nothing asks", machine(false, 50), readingTerminated, false},
		{"an unprovisioned machine does not ask", machine(true, 0, func(m *infrav1.TerraformMachine) { m.Status.Initialization = nil }), readingTerminated, false},
		{"a deleting machine does not ask", machine(true, 0, func(m *infrav1.TerraformMachine) {
			m.DeletionTimestamp = &metav1.Time{Time: at.now}
		}), readingTerminated, false},
		{"a lower threshold asks sooner", machine(true, 1, func(m *infrav1.TerraformMachine) { m.Spec.Remediation.UnhealthyThreshold = ptr.To[int32](1) }), readingUnhealthy, true},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			if got := remediationWanted(tc.m, tc.reading) != ""; got != tc.want {
				t.Fatalf("remediation wanted = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSetProviderIDMissing(t *testing.T) {
	health := func(status metav1.ConditionStatus, reason, message string) *metav1.Condition {
		return &metav1.Condition{Type: conditions.InfrastructureHealthy, Status: status, Reason: reason, Message: message}
	}
	for _, tc := range []struct {
		rule       string
		prev       *metav1.Condition
		sample     string
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"the first reading without a provider ID is ProviderIDMissing", health(metav1.ConditionTrue, conditions.ReasonHealthy, "ok"), "j1",
			metav1.ConditionUnknown, conditions.ReasonProviderIDMissing},
		{"the same reading again stays ProviderIDMissing", health(metav1.ConditionUnknown, conditions.ReasonProviderIDMissing, "x (reading of Job j1)"), "j1",
			metav1.ConditionUnknown, conditions.ReasonProviderIDMissing},
		{"a later reading without one is InstanceTerminated", health(metav1.ConditionUnknown, conditions.ReasonProviderIDMissing, "x (reading of Job j1)"), "j2",
			metav1.ConditionFalse, conditions.ReasonInstanceTerminated},
		{"terminated stays terminated", health(metav1.ConditionFalse, conditions.ReasonInstanceTerminated, "gone"), "j3",
			metav1.ConditionFalse, conditions.ReasonInstanceTerminated},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			var s infrav1.WorkspaceStatus
			setProviderIDMissing(&s, at, tc.prev, tc.sample)
			wantCondition(t, &s, conditions.InfrastructureHealthy, tc.wantStatus, tc.wantReason)
		})
	}
}

// TestHealthVerdicts: one table says what each health state means, for the
// InfrastructureHealthy condition and for remediation.
func TestHealthVerdicts(t *testing.T) {
	for _, row := range []struct {
		name    string
		health  contract.Health
		status  metav1.ConditionStatus
		reason  string
		reading healthReading
		known   bool
	}{
		{"running and healthy is healthy", contract.Health{State: contract.HealthRunning, Healthy: true}, metav1.ConditionTrue, conditions.ReasonHealthy, readingHealthy, true},
		{"running but not healthy is unhealthy", contract.Health{State: contract.HealthRunning}, metav1.ConditionFalse, conditions.ReasonInstanceUnhealthy, readingUnhealthy, true},
		{"degraded is unhealthy", contract.Health{State: contract.HealthDegraded}, metav1.ConditionFalse, conditions.ReasonInstanceDegraded, readingUnhealthy, true},
		{"stopped is unhealthy", contract.Health{State: contract.HealthStopped}, metav1.ConditionFalse, conditions.ReasonInstanceStopped, readingUnhealthy, true},
		{"terminated is the terminal signal", contract.Health{State: contract.HealthTerminated}, metav1.ConditionFalse, conditions.ReasonInstanceTerminated, readingTerminated, true},
		{"pending is not healthy yet and asks for no replacement", contract.Health{State: contract.HealthPending}, metav1.ConditionFalse, conditions.ReasonInstancePending, readingNone, true},
		{"a state the contract does not name says nothing", contract.Health{State: "rebooting", Healthy: true}, "", "", readingNone, false},
	} {
		t.Run(row.name, func(t *testing.T) {
			v, ok := verdictOf(&row.health)
			if ok != row.known || v.status != row.status || v.reason != row.reason || v.reading != row.reading {
				t.Fatalf("verdict %+v (known %v), want %s/%s reading %d (known %v)", v, ok, row.status, row.reason, row.reading, row.known)
			}
			// Both readers of the verdict: the condition setHealth writes, and remediation.
			d := contract.Decoded{Valid: map[string]bool{contract.OutputHealth: true}}
			d.Outputs.Health = &row.health
			var s infrav1.WorkspaceStatus
			setHealth(&s, at, d)
			c := conditions.Get(s.Conditions, conditions.InfrastructureHealthy)
			wantStatus, wantReason := row.status, row.reason
			if !row.known {
				wantStatus, wantReason = metav1.ConditionUnknown, conditions.ReasonHealthUnknown
			}
			if c == nil || c.Status != wantStatus || c.Reason != wantReason {
				t.Fatalf("InfrastructureHealthy %+v, want %s/%s", c, wantStatus, wantReason)
			}
			if got := healthReadingOf(d); got != row.reading {
				t.Fatalf("remediation reads %d, want %d", got, row.reading)
			}
		})
	}
}

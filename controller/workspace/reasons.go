package workspace

import (
	"errors"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// The condition types, reasons and messages the status setters (status.go) choose: pure
// functions of what a pass learnt.

// conditionFor is the condition an op reports in: refresh and drift in DriftJobSucceeded, restore
// in RestoreJobSucceeded, everything else in ApplyJobSucceeded.
func conditionFor(op jobs.Op) string {
	switch op {
	case jobs.OpRefresh, jobs.OpDrift:
		return conditions.DriftJobSucceeded
	case jobs.OpRestore:
		return conditions.RestoreJobSucceeded
	}
	return conditions.ApplyJobSucceeded
}

// runningReason is the reason of an op's condition while its first Job runs.
func runningReason(op jobs.Op) string {
	switch op {
	case jobs.OpRefresh, jobs.OpDrift:
		return conditions.ReasonDriftJobRunning
	case jobs.OpDestroy:
		return conditions.ReasonDestroyRunning
	}
	return conditions.ReasonApplyRunning
}

// failureReason is the reason of an op's condition after its Job failed.
func failureReason(op jobs.Op, outcome jobs.Outcome) string {
	switch {
	case outcome == jobs.OutcomeDeadlineExceeded && (op == jobs.OpRefresh || op == jobs.OpDrift):
		return conditions.ReasonDriftJobDeadlineExceeded
	case outcome == jobs.OutcomeDeadlineExceeded:
		return conditions.ReasonJobDeadlineExceeded
	case op == jobs.OpRefresh || op == jobs.OpDrift:
		return conditions.ReasonDriftJobFailed
	case op == jobs.OpDestroy:
		return conditions.ReasonDestroyFailed
	case op == jobs.OpRestore:
		return conditions.ReasonRestoreFailed
	}
	return conditions.ReasonApplyFailed
}

// stateReason is the StateReadable reason of a state read error.
func stateReason(err error) string {
	switch {
	case errors.Is(err, state.ErrLost):
		return conditions.ReasonStateLost
	case errors.Is(err, state.ErrCorrupt):
		return conditions.ReasonStateCorrupt
	case errors.Is(err, state.ErrEncrypted):
		return conditions.ReasonStateEncrypted
	case errors.Is(err, state.ErrStateKey):
		return conditions.ReasonStateKeyMismatch
	case errors.Is(err, state.ErrNotEncrypted):
		return conditions.ReasonStateNotEncrypted
	case errors.Is(err, state.ErrUnsupportedVersion):
		return conditions.ReasonStateUnsupported
	}
	return conditions.ReasonStateUnreadable
}

// InterruptedApplyMessage is the condition message of an apply that disappeared while it ran.
func InterruptedApplyMessage(job string) string {
	return "Job " + job + ": disappeared while it ran and may have applied part of its change; an apply of the current inputs is due"
}

// approveMessage tells how to approve a plan that waits.
func approveMessage(namespace string, plan *infrav1.PlanPreview) string {
	return fmt.Sprintf("plan %s (%d to add, %d to change, %d to destroy) waits for approval: "+
		"kubectl captf approve %s, or POST a PlanApproval with this hash to plans/%s/approval of runs.captf.io/v1alpha1 in namespace %s",
		plan.PlanHash, plan.Add, plan.Change, plan.Destroy, plan.Job, plan.Job, namespace)
}

// blockedMessage lists what a blocked apply would have deleted or replaced.
func blockedMessage(job *batchv1.Job, plan *jobs.PlanSummary) string {
	msg := "Job " + job.Name + ": stopped before a destructive plan"
	if plan != nil {
		var listed []string
		for _, r := range plan.Resources {
			action := "delete"
			if len(r.Actions) > 1 {
				action = "replace"
			}
			if strings.Contains(strings.Join(r.Actions, ","), "delete") {
				listed = append(listed, r.Address+" ("+action+")")
			}
		}
		if len(listed) > 0 {
			msg += ": " + strings.Join(listed, ", ")
		}
	}
	return msg + "; approve its inputs " + job.Annotations[jobs.AnnotationInputsHash] + " with kubectl captf approve " + job.Name +
		", or POST a PlanApproval to plans/" + job.Name + "/approval of runs.captf.io/v1alpha1"
}

package registry

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/jobs"
)

// RunOf converts a retained Job to a Run. Every computed field comes from jobs.ViewRun over
// retained, the retained Jobs of the same object, with its history limits, read at now; this
// function only copies. The run's metadata (name, namespace, UID, resourceVersion, creation
// time, labels, controller owner reference) is the Job's.
func RunOf(job *batchv1.Job, retained []batchv1.Job, limits jobs.Limits, now time.Time) *runs.Run {
	return runOfView(job, jobs.ViewRun(*job, retained, limits, now))
}

// RunsOf converts every Job of an object's history to a Run, read at now, as RunOf would one
// by one; the shared history makes it linear in the number of Jobs rather than quadratic.
func RunsOf(h *jobs.History, now time.Time) []*runs.Run {
	out := make([]*runs.Run, h.Len())
	for i := range out {
		out[i] = runOfView(h.Job(i), h.ViewRun(i, now))
	}
	return out
}

// runOfView copies the view v of job into a Run.
func runOfView(job *batchv1.Job, v jobs.RunView) *runs.Run {
	run := &runs.Run{
		ObjectMeta: objectMetaOf(job),
		Spec: runs.RunSpec{
			Target:           v.Target,
			Operation:        string(v.Operation),
			Attempt:          v.Attempt,
			InputsHash:       v.InputsHash,
			DriftRemediation: v.DriftRemediation,
			ApprovedPlan:     v.ApprovedPlan,
		},
		Status: runs.RunStatus{
			Phase:               v.Phase,
			StartTime:           v.StartTime,
			CompletionTime:      v.CompletionTime,
			RetryNumber:         int32(v.RetryNumber),
			CountsTowardBackoff: v.CountsTowardBackoff,
			Retention:           v.Retention,
			ResultUnreadable:    v.ResultUnreadable,
		},
	}
	if v.Phase != runs.RunPhasePending {
		run.Status.Duration = &metav1.Duration{Duration: v.Duration}
	}
	if b := v.Backoff; b != nil {
		run.Status.Backoff = &runs.Backoff{
			Failures:   int32(b.Failures),
			Delay:      metav1.Duration{Duration: b.Delay},
			RetryAfter: metav1.NewTime(b.RetryAfter),
			Active:     v.BackoffActive,
		}
	}
	if e := v.Error; e != nil {
		run.Status.Error = &runs.RunError{Kind: string(e.Kind), Step: e.Step, Summary: e.Summary}
	}
	if c := v.Changes; c != nil {
		run.Status.Changes = &runs.Changes{Add: int32(c.Add), Change: int32(c.Change), Destroy: int32(c.Destroy), Import: int32(c.Import)}
	}
	if d := v.Drift; d != nil {
		run.Status.Drift = &runs.Drift{
			Detected:  d.Detected,
			Add:       int32(d.Add),
			Change:    int32(d.Change),
			Destroy:   int32(d.Destroy),
			Resources: resourcesOf(d.Resources),
			Truncated: d.Truncated,
		}
	}
	return run
}

// PlanOf converts a retained Job to a Plan, and returns false when the Job carries no plan
// (see jobs.PlanSourceOf). Every computed field comes from jobs.ViewPlan over retained, the
// retained Jobs of the same object, and owner, what the owning object says about its plan.
func PlanOf(job *batchv1.Job, retained []batchv1.Job, owner jobs.PlanOwner) (*runs.Plan, bool) {
	v, ok := jobs.ViewPlan(*job, retained, owner)
	if !ok {
		return nil, false
	}
	return &runs.Plan{
		ObjectMeta: objectMetaOf(job),
		Spec: runs.PlanSpec{
			Target:     v.Target,
			Source:     v.Source,
			InputsHash: v.InputsHash,
		},
		Status: runs.PlanStatus{
			Phase:            v.Phase,
			PlanHash:         v.PlanHash,
			ApprovalHash:     v.ApprovalHash,
			Add:              int32(v.Add),
			Change:           int32(v.Change),
			Destroy:          int32(v.Destroy),
			Resources:        resourcesOf(v.Resources),
			Truncated:        v.Truncated,
			Destructive:      v.Destructive,
			ApprovedBy:       v.ApprovedBy,
			ApprovedAt:       v.ApprovedAt,
			ResultUnreadable: v.ResultUnreadable,
		},
	}, true
}

// PlanOwnerOf returns what the plan phase needs from an owning object: its status.plan (a
// TerraformCluster's; nil for other kinds or when there is none) and its approvals, as
// jobs.ApprovalsOf reads them. The current inputs hash is left empty: only the controller
// renders inputs, so status.plan and the Jobs decide which plan is current.
func PlanOwnerOf(annotations map[string]string, plan *jobs.CurrentPlan) jobs.PlanOwner {
	a := jobs.ApprovalsOf(annotations)
	return jobs.PlanOwner{
		Plan:                   plan,
		ApprovePlan:            a.Plan,
		ApproveDestructivePlan: a.DestructivePlan,
		ApprovedBy:             a.By,
		ApprovedAt:             a.At,
	}
}

// objectMetaOf is the metadata a run or plan takes from its Job.
func objectMetaOf(job *batchv1.Job) metav1.ObjectMeta {
	meta := metav1.ObjectMeta{
		Name:              job.Name,
		Namespace:         job.Namespace,
		UID:               job.UID,
		ResourceVersion:   job.ResourceVersion,
		CreationTimestamp: job.CreationTimestamp,
		DeletionTimestamp: job.DeletionTimestamp,
		Labels:            job.Labels,
	}
	switch ref := metav1.GetControllerOfNoCopy(job); {
	case ref == nil:
	case len(job.OwnerReferences) == 1:
		// The Job's own slice is the controller reference alone: share it, as the labels are.
		meta.OwnerReferences = job.OwnerReferences[:1:1]
	default:
		meta.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	return meta
}

func resourcesOf(in []jobs.ResourceChange) []runs.ResourceChange {
	if len(in) == 0 {
		return nil
	}
	out := make([]runs.ResourceChange, len(in))
	for i, r := range in {
		out[i] = runs.ResourceChange{Address: r.Address, Actions: r.Actions}
	}
	return out
}

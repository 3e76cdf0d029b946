package jobs

import (
	batchv1 "k8s.io/api/batch/v1"

	"github.com/captf/captf/apis/runs"
)

// Prune returns the names of the Jobs to delete, given the retained Jobs of one object: per op,
// finished Jobs beyond the successful and failed history limits, oldest first. Each op keeps its
// own history, so refresh and drift never push out an apply's. Successes count against the
// successful limit; every other finished outcome (failed, deadline, interrupted, blocked,
// plan-changed, plan-unreadable) against the failed limit. Running Jobs, the op's newest success
// and its newest failure while no newer success exists are never returned. Ops come in the
// order of Ops.
//
// The marks written at bookkeeping decide the bucket, so call it after bookkeeping.
func Prune(jobs []batchv1.Job, limits Limits) []string {
	var names []string
	for _, op := range Ops() {
		opJobs := OpJobs(jobs, op)
		reasons := opRetentions(opJobs, limits)
		for i := len(opJobs) - 1; i >= 0; i-- {
			if reasons[i] == runs.RetentionBeyondLimit {
				names = append(names, opJobs[i].Name)
			}
		}
	}
	return names
}

// Retentions returns the runs.Retention of every Job in jobs, by name, by the same rule as
// Prune: a Job is BeyondLimit exactly when Prune returns it.
func Retentions(jobs []batchv1.Job, limits Limits) map[string]runs.Retention {
	out := make(map[string]runs.Retention, len(jobs))
	for i := range jobs {
		out[jobs[i].Name] = runs.RetentionUnknownOperation
	}
	for _, op := range Ops() {
		opJobs := OpJobs(jobs, op)
		for i, r := range opRetentions(opJobs, limits) {
			out[opJobs[i].Name] = r
		}
	}
	return out
}

// opRetentions classifies the newest-first Jobs of one op, index for index. An exemption wins
// over WithinLimit, since it holds whatever the limits are.
func opRetentions(newestFirst []*batchv1.Job, limits Limits) []runs.Retention {
	out := make([]runs.Retention, len(newestFirst))
	successes, failures := 0, 0
	for i, j := range newestFirst {
		o := OutcomeOf(j)
		switch {
		case !o.Finished():
			out[i] = runs.RetentionRunning
		case o.Succeeded():
			out[i] = bucketRetention(successes, limits.Successful(), runs.RetentionNewestSuccess)
			successes++
		default:
			// Only a failure with no success before it (newer, in this order) is unresolved.
			exempt := runs.RetentionUnresolvedFailure
			if successes > 0 {
				exempt = ""
			}
			out[i] = bucketRetention(failures, limits.Failed(), exempt)
			failures++
		}
	}
	return out
}

// bucketRetention classifies the Job at position pos (0 = newest) of a bucket. The newest of
// the bucket gets exempt, when one is given.
func bucketRetention(pos, limit int, exempt runs.Retention) runs.Retention {
	switch {
	case pos == 0 && exempt != "":
		return exempt
	case pos < limit:
		return runs.RetentionWithinLimit
	}
	return runs.RetentionBeyondLimit
}

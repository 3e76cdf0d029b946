package jobs

import (
	batchv1 "k8s.io/api/batch/v1"
)

// Retention says why a retained Job is kept, or that pruning will remove it.
type Retention string

// The retention reasons.
const (
	// RetentionRunning: running Jobs are never pruned.
	RetentionRunning Retention = "Running"
	// RetentionNewestSuccess: the op's newest success stays whatever the limits say, so that an
	// older failure cannot pose as the op's latest outcome.
	RetentionNewestSuccess Retention = "NewestSuccess"
	// RetentionUnresolvedFailure: the op's newest failure stays while no newer success exists,
	// because backoff and the remediation cap count it.
	RetentionUnresolvedFailure Retention = "UnresolvedFailure"
	// RetentionWithinLimit: the Job is within its op's successful or failed history limit.
	RetentionWithinLimit Retention = "WithinLimit"
	// RetentionBeyondLimit: the Job is beyond its limit and the next prune deletes it.
	RetentionBeyondLimit Retention = "BeyondLimit"
	// RetentionUnknownOperation: the Job's op label is missing or unknown, so no op's history
	// claims it and pruning leaves it alone.
	RetentionUnknownOperation Retention = "UnknownOperation"
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
			if reasons[i] == RetentionBeyondLimit {
				names = append(names, opJobs[i].Name)
			}
		}
	}
	return names
}

// Retentions returns the Retention of every Job in jobs, by name, computed by the same rule as
// Prune: a Job is BeyondLimit exactly when Prune returns it.
func Retentions(jobs []batchv1.Job, limits Limits) map[string]Retention {
	out := make(map[string]Retention, len(jobs))
	for i := range jobs {
		out[jobs[i].Name] = RetentionUnknownOperation
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
func opRetentions(newestFirst []*batchv1.Job, limits Limits) []Retention {
	out := make([]Retention, len(newestFirst))
	successes, failures := 0, 0
	for i, j := range newestFirst {
		o := OutcomeOf(j)
		switch {
		case !o.Finished():
			out[i] = RetentionRunning
		case o.Succeeded():
			out[i] = bucketRetention(successes, limits.Successful(), RetentionNewestSuccess)
			successes++
		default:
			// Only a failure with no success before it (newer, in this order) is unresolved.
			exempt := RetentionUnresolvedFailure
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
func bucketRetention(pos, limit int, exempt Retention) Retention {
	switch {
	case pos == 0 && exempt != "":
		return exempt
	case pos < limit:
		return RetentionWithinLimit
	}
	return RetentionBeyondLimit
}

// Package jobs is the pure run model shared by the controller and the aggregated API server:
// Job names, labels and annotations, outcomes, attempts, failure counting, backoff, remediation
// counts, pruning and the computed view of a run. It does no I/O and never reads the clock.
package jobs

package runner

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/captf/captf/jobs"
)

// maxFallbackField bounds each free-text field of the last-resort result.
const maxFallbackField = 256

// EncodeResult encodes a result with jobs.EncodeRunnerResult. The fields that encoder never
// drops (image, runtime, error kind and step) come from flags and the environment, so in the
// rare case they alone overflow the termination message, it drops the runtime command and the
// image, and last cuts every free-text field, keeping the op, the error kind, the plan hash and
// every count. It fails only for a result no cut can fit, which the runner does not produce.
func EncodeResult(r jobs.RunnerResult) ([]byte, error) {
	doc, err := jobs.EncodeRunnerResult(r)
	if !errors.Is(err, jobs.ErrRunnerResultTooLarge) {
		return doc, err
	}
	r.Image = nil
	if r.Runtime != nil {
		r.Runtime = &jobs.RunnerRuntime{Version: jobs.TruncateUTF8(r.Runtime.Version, maxFallbackField)}
	}
	if doc, err = jobs.EncodeRunnerResult(r); !errors.Is(err, jobs.ErrRunnerResultTooLarge) {
		return doc, err
	}
	minimal := jobs.RunnerResult{Op: jobs.Op(jobs.TruncateUTF8(string(r.Op), maxFallbackField))}
	if r.Error != nil {
		minimal.Error = &jobs.RunnerError{Kind: jobs.ErrorKind(jobs.TruncateUTF8(string(r.Error.Kind), maxFallbackField)), Step: jobs.TruncateUTF8(r.Error.Step, maxFallbackField)}
	}
	if r.Plan != nil {
		minimal.Plan = &jobs.RunnerPlan{Hash: jobs.TruncateUTF8(r.Plan.Hash, maxFallbackField), Counts: r.Plan.Counts, Truncated: true, Destructive: r.Plan.Destructive}
	}
	if r.Drift != nil {
		minimal.Drift = &jobs.RunnerDrift{Detected: r.Drift.Detected, Counts: r.Drift.Counts, Truncated: true}
	}
	doc, err = jobs.EncodeRunnerResult(minimal)
	if err != nil {
		return nil, fmt.Errorf("encoding the result: %w", err)
	}
	return doc, nil
}

// completeLine matches the summary OpenTofu and Terraform print after an apply or destroy,
// e.g. "Apply complete! Resources: 1 imported, 2 added, 0 changed, 1 destroyed."
var completeLine = regexp.MustCompile(`(?m)^(?:Apply|Destroy) complete! Resources: ([^\n]*?)\.?\s*$`)

// countItem matches one "<n> <what>" item of that line.
var countItem = regexp.MustCompile(`(\d+) (imported|added|changed|destroyed)`)

// parseChanges reads the change counts from a step's output; nil when it printed no summary.
func parseChanges(stdout []byte) *jobs.Changes {
	matches := completeLine.FindAllSubmatch(stdout, -1)
	if len(matches) == 0 {
		return nil
	}
	c := &jobs.Changes{}
	for _, item := range countItem.FindAllStringSubmatch(string(matches[len(matches)-1][1]), -1) {
		n, err := strconv.Atoi(item[1])
		if err != nil {
			continue
		}
		switch strings.TrimSpace(item[2]) {
		case "imported":
			c.Import = n
		case "added":
			c.Add = n
		case "changed":
			c.Change = n
		case "destroyed":
			c.Destroy = n
		}
	}
	return c
}

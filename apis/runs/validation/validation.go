// Package validation checks the bodies the runs.captf.io API accepts.
package validation

import (
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/captf/captf/apis/runs"
)

// MaxHashLength bounds spec.planHash. Plan and inputs hashes are a short prefix, a colon and
// 64 hex characters.
const MaxHashLength = 128

// hashPattern is the shape of the only two hashes an approval may quote: a plan hash (p3:<hex>)
// and the inputs hash of a blocked apply (h1:<hex>). Other hashes the controller keeps (such as
// the exports hash, e1:) are never approvable, so a body quoting one is refused here rather than
// found stale later.
var hashPattern = regexp.MustCompile(`^(p3|h1):[0-9a-f]+$`)

// ValidatePlanApproval checks an approval of the plan named in the URL: metadata.name is empty
// or that name, and spec.planHash is a hash.
func ValidatePlanApproval(approval *runs.PlanApproval, planName string) field.ErrorList {
	var errs field.ErrorList
	if approval.Name != "" && approval.Name != planName {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), approval.Name,
			"must be the name of the plan in the URL ("+planName+") or empty"))
	}
	hashPath := field.NewPath("spec", "planHash")
	switch hash := approval.Spec.PlanHash; {
	case hash == "":
		errs = append(errs, field.Required(hashPath, "the hash of the reviewed plan, as in the plan's status.approvalHash"))
	case len(hash) > MaxHashLength:
		errs = append(errs, field.TooLong(hashPath, "", MaxHashLength))
	case !hashPattern.MatchString(hash):
		errs = append(errs, field.Invalid(hashPath, hash, "must be a hash like p3:<hex> (a plan) or h1:<hex> (the inputs of a blocked apply), as in the plan's status.approvalHash"))
	}
	return errs
}

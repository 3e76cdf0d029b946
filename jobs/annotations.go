package jobs

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ViewAnnotations returns the Job annotations the run model reads: every function of this
// package that takes a Job (OutcomeOf, ViewRun, History, ViewPlan, PlanApprovalCheck, Backoff,
// Prune, ...) reads no other. Whoever keeps a reduced copy of Jobs for the views, as the
// aggregated API server does, keeps exactly these. A test of this package checks the list
// against the code, so a view cannot read an annotation that is not listed.
func ViewAnnotations() []string {
	return []string{
		AnnotationInputsHash,
		AnnotationDriftRemediation,
		AnnotationApprovedPlan,
		AnnotationBookkept,
		AnnotationInterrupted,
		AnnotationDestructivePlanBlocked,
		AnnotationPlanChanged,
		AnnotationPlanUnreadable,
		AnnotationResult,
		AnnotationApprovedBy,
		AnnotationApprovedAt,
	}
}

// ApprovalAnnotations returns the annotations of an owning object that ApprovalsOf reads.
func ApprovalAnnotations() []string {
	return []string{
		AnnotationApprovePlan,
		AnnotationApproveDestructivePlan,
		AnnotationApprovedBy,
		AnnotationApprovedAt,
	}
}

// Approvals are what an object's approval annotations say.
type Approvals struct {
	// Plan is captf.io/approve-plan: the hash of the plan a person approved.
	Plan string
	// DestructivePlan is captf.io/approve-destructive-plan: the inputs hash whose destructive
	// plan a person approved.
	DestructivePlan string
	// By is captf.io/approved-by: who wrote the approval.
	By string
	// At is captf.io/approved-at when it holds an RFC 3339 time, and nil otherwise.
	At *metav1.Time
}

// ApprovalsOf reads the approval annotations of an object (see ApprovalAnnotations). A missing
// annotation reads as empty; an approved-at that is not RFC 3339 reads as unknown.
func ApprovalsOf(annotations map[string]string) Approvals {
	by, at := approverOf(annotations)
	return Approvals{
		Plan:            annotations[AnnotationApprovePlan],
		DestructivePlan: annotations[AnnotationApproveDestructivePlan],
		By:              by,
		At:              at,
	}
}

// approverOf reads who wrote an approval and when, from an object or from the apply Job that
// carries the approval it consumed.
func approverOf(annotations map[string]string) (by string, at *metav1.Time) {
	if t, err := time.Parse(time.RFC3339, annotations[AnnotationApprovedAt]); err == nil {
		at = &metav1.Time{Time: t}
	}
	return annotations[AnnotationApprovedBy], at
}

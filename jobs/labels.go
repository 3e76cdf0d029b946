package jobs

import (
	"strconv"
)

// Labels on Jobs, their pods, and the Secrets and Leases that belong to an object's runs.
const (
	// LabelManaged marks every object CAPTF creates for a run; the manager's caches select on it.
	LabelManaged = "captf.io/managed"
	// ManagedValue is the only value LabelManaged takes.
	ManagedValue = "true"

	// LabelOwnerKind holds the kind of the object a run belongs to, e.g. TerraformCluster.
	LabelOwnerKind = "captf.infrastructure.cluster.x-k8s.io/owner-kind"
	// LabelOwnerName holds the name of the object a run belongs to, passed through LabelValue.
	LabelOwnerName = "captf.infrastructure.cluster.x-k8s.io/owner-name"
	// LabelClusterName is the Cluster API cluster-name label, passed through LabelValue.
	LabelClusterName = "cluster.x-k8s.io/cluster-name"
	// LabelOp holds the Op a Job runs.
	LabelOp = "captf.infrastructure.cluster.x-k8s.io/op"
	// LabelAttempt holds a Job's attempt number in decimal.
	LabelAttempt = "captf.infrastructure.cluster.x-k8s.io/attempt"
)

// Annotations the controller sets on a Job when it creates it.
const (
	// AnnotationInputsHash holds the inputs hash the Job runs (apply, plan, restore).
	AnnotationInputsHash = "captf.io/inputs-hash"
	// AnnotationRestoreSerial holds the state serial a restore Job pushes.
	AnnotationRestoreSerial = "captf.io/restore-serial"
	// AnnotationDriftRemediation marks an apply that remediates drift.
	AnnotationDriftRemediation = "captf.io/drift-remediation"
	// AnnotationApprovedPlan holds the plan hash an apply under applyPolicy Manual must plan again.
	AnnotationApprovedPlan = "captf.io/approved-plan"
	// AnnotationAfterFailedApply marks an apply started because the previous apply failed.
	AnnotationAfterFailedApply = "captf.io/after-failed-apply"
	// AnnotationAfterInterruptedApply names the vanished apply Job this apply was started after.
	AnnotationAfterInterruptedApply = "captf.io/after-interrupted-apply"
)

// Marks the controller writes on a finished Job at bookkeeping. They exist because a bookkept
// Job's pod is never read again, so the Job itself must carry how it ended.
const (
	// AnnotationBookkept marks a Job whose pod was read, Secret deleted and completion counted.
	AnnotationBookkept = "captf.io/bookkept"
	// AnnotationInterrupted marks a Job stopped from outside, not by its deadline.
	AnnotationInterrupted = "captf.io/interrupted"
	// AnnotationDestructivePlanBlocked marks an apply that stopped before a plan that deletes or
	// replaces.
	AnnotationDestructivePlanBlocked = "captf.io/destructive-plan-blocked"
	// AnnotationPlanChanged marks an approved apply whose plan no longer matched.
	AnnotationPlanChanged = "captf.io/plan-changed"
	// AnnotationPlanUnreadable marks a plan Job that succeeded without a readable plan.
	AnnotationPlanUnreadable = "captf.io/plan-unreadable"
	// AnnotationResult holds the Job's result summary; see EncodeSummary.
	AnnotationResult = "captf.io/result"
)

// Annotations on the owning object and on its durable inputs Secret.
const (
	// AnnotationApprovePlan on a TerraformCluster approves the plan with this hash.
	AnnotationApprovePlan = "captf.io/approve-plan"
	// AnnotationApproveDestructivePlan on an object approves a destructive plan of these inputs.
	AnnotationApproveDestructivePlan = "captf.io/approve-destructive-plan"
	// AnnotationApprovedBy names the user who wrote the approval.
	AnnotationApprovedBy = "captf.io/approved-by"
	// AnnotationApprovedAt holds when the approval was written, in RFC 3339.
	AnnotationApprovedAt = "captf.io/approved-at"
	// AnnotationRestoreState on an object asks for a restore of the backup with this serial.
	AnnotationRestoreState = "captf.io/restore-state"
	// AnnotationReplan on a TerraformCluster under applyPolicy Manual asks for a fresh plan:
	// each new value is one request. Every plan Job started while the object carries it records
	// the value on itself, so a request is planned once.
	AnnotationReplan = "captf.io/replan"
	// AnnotationReconcileRequestedAt on an object asks for a pass now (kubectl captf reconcile
	// writes the time): the object's change alone brings the pass, so nothing reads the value.
	AnnotationReconcileRequestedAt = "captf.io/reconcile-requested-at"
	// AnnotationInterruptedApply on the durable inputs Secret names an apply Job that vanished
	// while it ran.
	AnnotationInterruptedApply = "captf.io/interrupted-apply"
	// AnnotationApplied on the durable inputs Secret records that an apply once succeeded.
	AnnotationApplied = "captf.io/applied"
)

// MaxLabelValueLength is the Kubernetes limit on a label value.
const MaxLabelValueLength = 63

// LabelValue returns value when it fits a label, and otherwise the first 16 hex characters of
// its SHA-256, so that long object and cluster names still select their runs.
func LabelValue(value string) string {
	if len(value) <= MaxLabelValueLength {
		return value
	}
	return hash16(value)
}

// OwnerLabels returns the labels that select every run object of one owner: the managed mark,
// the owner kind and the owner name.
func OwnerLabels(kind Kind, name string) map[string]string {
	return map[string]string{
		LabelManaged:   ManagedValue,
		LabelOwnerKind: string(kind),
		LabelOwnerName: LabelValue(name),
	}
}

// Labels returns the labels of a Job and of its pods: the owner labels, the cluster name (left
// out when the object has none), the op and the attempt.
func Labels(kind Kind, name, clusterName string, op Op, attempt int32) map[string]string {
	labels := OwnerLabels(kind, name)
	if clusterName != "" {
		labels[LabelClusterName] = LabelValue(clusterName)
	}
	labels[LabelOp] = string(op)
	labels[LabelAttempt] = strconv.FormatInt(int64(attempt), 10)
	return labels
}

// hasMark reports whether a boolean annotation is set. Only presence matters, except that an
// explicit "false" reads as unset, so a hand-edited mark can be switched off.
func hasMark(annotations map[string]string, key string) bool {
	v, ok := annotations[key]
	return ok && v != "false"
}

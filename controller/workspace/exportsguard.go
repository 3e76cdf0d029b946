package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller/contract"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/jobs"
)

// The cluster-exports guard of machine pools. A pool re-applies whenever its inputs change, and
// its cluster's exports are inputs it does not own: a change there (a new subnet, say) may
// replace every instance of the pool. So a pool apply that renders exports other than those of
// its last successful apply stops before a plan that deletes or replaces, until a person approves
// it; while such a change waits, the pool keeps applying everything else with the exports it
// applied last.

// Records of the guard on a pool's durable inputs Secret.
const (
	// AnnotationAppliedClusterOutputsHash is the hash of the exports the last successful apply
	// rendered.
	AnnotationAppliedClusterOutputsHash = "captf.io/applied-cluster-outputs-hash"
	// AnnotationPendingClusterOutputs records a change of the exports whose guarded apply
	// stopped before a destructive plan, as JSON (pendingExports).
	AnnotationPendingClusterOutputs = "captf.io/pending-cluster-outputs"
	// AppliedClusterOutputsKey holds the exports the last successful apply rendered, which a
	// pool renders while a change waits for approval.
	AppliedClusterOutputsKey = "applied-cluster-outputs.json"
	// AnnotationPartialClusterOutputs records a change of the exports whose guarded apply
	// failed after it may have begun to apply, as JSON (partialExports): the exports applied
	// last are then no longer what the infrastructure has, so the change is never held.
	AnnotationPartialClusterOutputs = "captf.io/partial-cluster-outputs"
	// AnnotationClusterOutputsHash on a pool's apply Job is the hash of the exports it rendered.
	AnnotationClusterOutputsHash = "captf.io/cluster-outputs-hash"
	// AnnotationHeldClusterOutputs on a pool's apply Job says it rendered the exports applied
	// last, while a change of them waits for approval.
	AnnotationHeldClusterOutputs = "captf.io/held-cluster-outputs"
)

// ExportsGuard is how a pool renders and guards its cluster's exports.
type ExportsGuard string

// The states of the guard.
const (
	// ExportsSettled: the exports are those applied last (or none were ever applied): they
	// render as they are, unguarded.
	ExportsSettled ExportsGuard = "Settled"
	// ExportsHeld: the change of the exports waits for approval: the pool renders the exports it
	// applied last and applies the rest unguarded.
	ExportsHeld ExportsGuard = "Held"
	// ExportsGuarded: the exports changed and were not tried yet, or their change is approved,
	// or what was applied last is unknown: they render as they are and the apply is guarded.
	ExportsGuarded ExportsGuard = "Guarded"
)

// pendingExports is the record of a blocked change of the exports.
type pendingExports struct {
	// Hash is the exports' hash; InputsHash the blocked apply's inputs hash, which its approval
	// names; Job the blocked apply.
	Hash       string `json:"hash"`
	InputsHash string `json:"inputsHash"`
	Job        string `json:"job"`
}

// partialExports is the record of a change of the exports that may be partly applied.
type partialExports struct {
	Hash string `json:"hash"`
	Job  string `json:"job"`
}

// exportsHash is the hash of exports as a pool renders them.
func exportsHash(exports json.RawMessage) string {
	rendered, err := contract.CanonicalExports(exports)
	if err != nil {
		rendered = exports
	}
	sum := sha256.Sum256(rendered)
	return "e1:" + hex.EncodeToString(sum[:])
}

// exportsGuardOf decides how a pool renders its cluster's exports, from its durable inputs'
// records (annotations), whether it ever applied, the current exports' hash and the approval
// the object carries (captf.io/approve-destructive-plan).
func exportsGuardOf(annotations map[string]string, appliedBefore bool, current, approval string) ExportsGuard {
	applied, recorded := annotations[AnnotationAppliedClusterOutputsHash]
	// A change half applied: recorded after a failed apply, or an apply that vanished.
	_, partial := annotations[AnnotationPartialClusterOutputs]
	partial = partial || annotations[jobs.AnnotationInterruptedApply] != ""
	switch {
	case !recorded && !appliedBefore:
		return ExportsSettled
	case !recorded:
		// Applied before anything was recorded: what the exports were is unknown.
		return ExportsGuarded
	case current == applied && !partial:
		return ExportsSettled
	case partial:
		// A change may be half applied: whatever renders now is guarded.
		return ExportsGuarded
	}
	var pending pendingExports
	if err := json.Unmarshal([]byte(annotations[AnnotationPendingClusterOutputs]), &pending); err == nil &&
		pending.Hash == current && (approval == "" || approval != pending.InputsHash) {
		return ExportsHeld
	}
	return ExportsGuarded
}

// guardExports decides a pool's exports guard for this pass and, when held, puts the exports
// applied last in place of the current ones. durable is the durable inputs Secret read live (nil
// for none).
func guardExports(obj interface{ GetAnnotations() map[string]string }, durable *corev1.Secret, deps *Dependencies) (ExportsGuard, string) {
	var annotations map[string]string
	var data map[string][]byte
	if durable != nil {
		annotations, data = durable.Annotations, durable.Data
	}
	current := exportsHash(deps.Inputs.ClusterOutputs)
	guard := exportsGuardOf(annotations, annotations[jobs.AnnotationApplied] == "true", current, obj.GetAnnotations()[jobs.AnnotationApproveDestructivePlan])
	if guard == ExportsHeld {
		held := data[AppliedClusterOutputsKey]
		if len(held) == 0 {
			// The applied exports were not kept: the change can only be guarded.
			return ExportsGuarded, current
		}
		deps.Inputs.ClusterOutputs = held
		return ExportsHeld, exportsHash(held)
	}
	return guard, current
}

// recordAppliedExports records on a pool's durable inputs, after its apply Job succeeded, the
// exports that apply rendered (from the durable inputs it ran, which no later Job has replaced),
// and drops a pending change they settle.
func recordAppliedExports(durable *corev1.Secret, job *batchv1.Job) {
	hash := job.Annotations[AnnotationClusterOutputsHash]
	if hash == "" {
		return
	}
	if durable.Annotations == nil {
		durable.Annotations = map[string]string{}
	}
	durable.Annotations[AnnotationAppliedClusterOutputsHash] = hash
	var vars map[string]json.RawMessage
	if err := json.Unmarshal(durable.Data[inputs.VarsFile], &vars); err == nil && vars[contract.InputClusterOutputs] != nil &&
		exportsHash(vars[contract.InputClusterOutputs]) == hash && durable.Data != nil {
		durable.Data[AppliedClusterOutputsKey] = vars[contract.InputClusterOutputs]
	}
	var pending pendingExports
	if json.Unmarshal([]byte(durable.Annotations[AnnotationPendingClusterOutputs]), &pending) == nil && pending.Hash == hash {
		delete(durable.Annotations, AnnotationPendingClusterOutputs)
	}
	// Applied whole: nothing is half applied any more.
	delete(durable.Annotations, AnnotationPartialClusterOutputs)
}

// recordFailedExports records, after a pool's apply that carried a change of the exports failed
// (not blocked: it may have begun to apply), that the change may be partly applied.
func (p *pass) recordFailedExports(ctx context.Context, job *batchv1.Job) error {
	return p.recordExportsChange(ctx, job, AnnotationPartialClusterOutputs, func(hash string) any {
		return partialExports{Hash: hash, Job: job.Name}
	})
}

// recordBlockedExports records, after a pool's guarded apply stopped before a destructive
// plan, the change of the exports it carried: it is held until approved.
func (p *pass) recordBlockedExports(ctx context.Context, job *batchv1.Job) error {
	return p.recordExportsChange(ctx, job, AnnotationPendingClusterOutputs, func(hash string) any {
		return pendingExports{Hash: hash, InputsHash: job.Annotations[jobs.AnnotationInputsHash], Job: job.Name}
	})
}

// recordExportsChange writes record(hash) as JSON into the annotation key of the durable inputs,
// when the finished apply job carried a change of the exports (its hash differs from the
// applied one; with the same exports, something else made it fail or stop).
func (p *pass) recordExportsChange(ctx context.Context, job *batchv1.Job, key string, record func(hash string) any) error {
	hash := job.Annotations[AnnotationClusterOutputsHash]
	if hash == "" {
		return nil
	}
	durable, err := p.readDurable(ctx)
	if err != nil || durable.Name == "" || durable.Annotations[AnnotationAppliedClusterOutputsHash] == hash {
		return err
	}
	value, err := json.Marshal(record(hash))
	if err != nil {
		return err
	}
	patch := client.MergeFrom(durable.DeepCopy())
	if durable.Annotations == nil {
		durable.Annotations = map[string]string{}
	}
	durable.Annotations[key] = string(value)
	if err := p.r.Client.Patch(ctx, durable, patch); err != nil {
		return fmt.Errorf("recording %s on the durable inputs: %w", key, err)
	}
	return nil
}

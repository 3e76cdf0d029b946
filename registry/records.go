package registry

import (
	"unique"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

// jobAnnotations are the Job annotations the run model reads (jobs.ViewRun, jobs.ViewPlan); the
// server keeps only these, since the others are never shown.
var jobAnnotations = []string{
	jobs.AnnotationInputsHash,
	jobs.AnnotationDriftRemediation,
	jobs.AnnotationApprovedPlan,
	jobs.AnnotationBookkept,
	jobs.AnnotationInterrupted,
	jobs.AnnotationDestructivePlanBlocked,
	jobs.AnnotationPlanChanged,
	jobs.AnnotationPlanUnreadable,
	jobs.AnnotationResult,
	jobs.AnnotationApprovedBy,
	jobs.AnnotationApprovedAt,
}

// ownerAnnotations are the annotations of an owning object that the plan phase and the
// approval read.
var ownerAnnotations = []string{
	jobs.AnnotationApprovePlan,
	jobs.AnnotationApproveDestructivePlan,
	jobs.AnnotationApprovedBy,
	jobs.AnnotationApprovedAt,
}

// jobRecord is what the server keeps of a managed Job: the metadata the API shows and the run
// model reads, and the finish condition. It replaces the Job in the informer's store, because a
// batchv1.Job with its pod template is several times larger and the server shows none of it.
type jobRecord struct {
	metav1.ObjectMeta
	startTime      *metav1.Time
	completionTime *metav1.Time
	conditions     []batchv1.JobCondition
	// owner is the interned owner key; see ownerKey.
	owner string
}

var _ runtime.Object = &jobRecord{}

// GetObjectKind implements runtime.Object; a record has no kind of its own.
func (r *jobRecord) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (r *jobRecord) DeepCopyObject() runtime.Object {
	out := &jobRecord{startTime: r.startTime.DeepCopy(), completionTime: r.completionTime.DeepCopy(), owner: r.owner}
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	for i := range r.conditions {
		out.conditions = append(out.conditions, *r.conditions[i].DeepCopy())
	}
	return out
}

// job rebuilds the Job as far as the run model reads it. It shares the record's maps and
// slices, which nothing writes.
func (r *jobRecord) job() batchv1.Job {
	return batchv1.Job{
		ObjectMeta: r.ObjectMeta,
		Status: batchv1.JobStatus{
			StartTime:      r.startTime,
			CompletionTime: r.completionTime,
			Conditions:     r.conditions,
		},
	}
}

// ownerKey is the key of the object the Job runs for: namespace/kind/name of jobs.TargetOf.
func (r *jobRecord) ownerKey() string {
	if r.owner != "" {
		return r.owner
	}
	job := batchv1.Job{ObjectMeta: r.ObjectMeta}
	t := jobs.TargetOf(&job)
	return ownerKeyOf(r.Namespace, t.Kind, t.Name)
}

// ownerKeyOf joins namespace, kind and name into an owner key.
func ownerKeyOf(namespace string, kind jobs.Kind, name string) string {
	return namespace + "/" + string(kind) + "/" + name
}

// recordOfJob reduces a Job to a jobRecord: name, namespace, UID, resourceVersion, creation
// and deletion time, labels, the controller owner reference, the annotations the run model
// reads, start and completion time, and the true Complete or Failed condition without its
// message. Keys and repeated values are interned.
func recordOfJob(job *batchv1.Job) *jobRecord {
	r := &jobRecord{
		ObjectMeta: metav1.ObjectMeta{
			Name:              job.Name,
			Namespace:         intern(job.Namespace),
			UID:               job.UID,
			ResourceVersion:   job.ResourceVersion,
			CreationTimestamp: job.CreationTimestamp,
			DeletionTimestamp: job.DeletionTimestamp,
			Labels:            internMap(job.Labels, nil),
			Annotations:       internMap(job.Annotations, jobAnnotations),
		},
		startTime:      job.Status.StartTime,
		completionTime: job.Status.CompletionTime,
	}
	if ref := metav1.GetControllerOfNoCopy(job); ref != nil {
		r.OwnerReferences = []metav1.OwnerReference{{
			APIVersion:         intern(ref.APIVersion),
			Kind:               intern(ref.Kind),
			Name:               intern(ref.Name),
			UID:                ref.UID,
			Controller:         ref.Controller,
			BlockOwnerDeletion: ref.BlockOwnerDeletion,
		}}
	}
	r.owner = intern(r.ownerKey())
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			r.conditions = append(r.conditions, batchv1.JobCondition{
				Type:               c.Type,
				Status:             c.Status,
				Reason:             intern(c.Reason),
				LastTransitionTime: c.LastTransitionTime,
			})
		}
	}
	return r
}

// transformJob is the Job informer's transform: it stores a jobRecord instead of the Job. It
// is idempotent, as informers require.
func transformJob(obj any) (any, error) {
	if job, ok := obj.(*batchv1.Job); ok {
		return recordOfJob(job), nil
	}
	return obj, nil
}

// ownerRecord is what the server keeps of a TerraformCluster, TerraformMachine or
// TerraformMachinePool: its identity, approval annotations, history limits and, for a cluster,
// the plan waiting for approval.
type ownerRecord struct {
	metav1.ObjectMeta
	kind   jobs.Kind
	limits jobs.Limits
	plan   *jobs.CurrentPlan
}

var _ runtime.Object = &ownerRecord{}

// GetObjectKind implements runtime.Object; a record has no kind of its own.
func (r *ownerRecord) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object.
func (r *ownerRecord) DeepCopyObject() runtime.Object {
	out := &ownerRecord{kind: r.kind, limits: r.limits}
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if r.plan != nil {
		p := *r.plan
		out.plan = &p
	}
	return out
}

// key is the owner key of the object; see ownerKeyOf.
func (r *ownerRecord) key() string { return ownerKeyOf(r.Namespace, r.kind, r.Name) }

// recordOfOwner reduces a TerraformCluster, TerraformMachine or TerraformMachinePool to an
// ownerRecord; ok is false for any other object.
func recordOfOwner(obj any) (*ownerRecord, bool) {
	var (
		meta   *metav1.ObjectMeta
		kind   jobs.Kind
		policy infrav1.JobPolicy
		plan   *infrav1.PlanPreview
	)
	switch o := obj.(type) {
	case *infrav1.TerraformCluster:
		meta, kind, policy, plan = &o.ObjectMeta, jobs.KindCluster, o.Spec.Jobs, o.Status.Plan
	case *infrav1.TerraformMachine:
		meta, kind, policy = &o.ObjectMeta, jobs.KindMachine, o.Spec.Jobs
	case *infrav1.TerraformMachinePool:
		meta, kind, policy = &o.ObjectMeta, jobs.KindMachinePool, o.Spec.Jobs
	default:
		return nil, false
	}
	r := &ownerRecord{
		ObjectMeta: metav1.ObjectMeta{
			Name:            meta.Name,
			Namespace:       intern(meta.Namespace),
			UID:             meta.UID,
			ResourceVersion: meta.ResourceVersion,
			Annotations:     internMap(meta.Annotations, ownerAnnotations),
		},
		kind:   kind,
		limits: jobs.LimitsOf(policy),
	}
	if plan != nil {
		r.plan = &jobs.CurrentPlan{InputsHash: plan.InputsHash, PlanHash: plan.PlanHash, Job: plan.Job}
	}
	return r, true
}

// transformOwner is the owner informers' transform: it stores an ownerRecord instead of the
// object. It is idempotent.
func transformOwner(obj any) (any, error) {
	if r, ok := recordOfOwner(obj); ok {
		return r, nil
	}
	return obj, nil
}

// jobRecordOf returns the record in an informer event, also from a deletion tombstone.
func jobRecordOf(obj any) (*jobRecord, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	r, ok := obj.(*jobRecord)
	return r, ok
}

// ownerRecordOf returns the record in an informer event, also from a deletion tombstone.
func ownerRecordOf(obj any) (*ownerRecord, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	r, ok := obj.(*ownerRecord)
	return r, ok
}

// intern returns the canonical copy of s, so that the label keys, kinds, operations and owner
// names that thousands of Jobs repeat are held once.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// internMap copies in with interned keys and short values; with keep set, only those keys.
// Long values (the result summary) are copied as they are.
func internMap(in map[string]string, keep []string) map[string]string {
	var out map[string]string
	add := func(k, v string) {
		if out == nil {
			out = make(map[string]string, len(in))
		}
		if len(v) <= 64 {
			v = intern(v)
		}
		out[intern(k)] = v
	}
	if keep == nil {
		for k, v := range in {
			add(k, v)
		}
		return out
	}
	for _, k := range keep {
		if v, ok := in[k]; ok {
			add(k, v)
		}
	}
	return out
}

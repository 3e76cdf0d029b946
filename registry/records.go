package registry

import (
	"encoding/hex"
	"slices"
	"strings"
	"time"
	"unique"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// jobAnnotations are the Job annotations the run model reads (see jobs.ViewAnnotations). The
// server keeps these and the other captf.io/ ones (see keptAnnotations), since the others are
// never shown nor signed.
var jobAnnotations = jobs.ViewAnnotations()

// signedPrefix starts every label and annotation key the controller's signature of a Job covers
// (runkey.Key.SignJob): a record keeps them all, so that whether a plan's Job verifies can be
// told from its record.
const signedPrefix = "captf.io/"

// ownerAnnotations are the annotations of an owning object that the plan phase and the
// approval read (see jobs.ApprovalsOf).
var ownerAnnotations = jobs.ApprovalAnnotations()

// Bounds of the text a record keeps. Whoever may write Jobs in a namespace writes their labels,
// annotations and owner references, and Kubernetes bounds only their total (256 KiB of
// annotations, about 1.5 MiB per object), so each record would otherwise cost what that writer
// chose. The bounds sit well above anything the controller writes; a value past one is not the
// controller's and reads as unknown.
const (
	// maxResultBytes bounds the result summary: the controller encodes it within
	// jobs.MaxSummaryBytes, and jobs.DecodeSummary rejects anything longer anyway.
	maxResultBytes = jobs.MaxSummaryBytes
	// maxAnnotationBytes bounds the other kept annotations: hashes (67 bytes), RFC 3339 times,
	// marks ("true") and the approving user's name (a ServiceAccount's is at most 339 bytes).
	maxAnnotationBytes = 1 << 10
	// maxLabels bounds the labels kept per Job; the controller sets six (jobs.Labels), and other
	// tools a few more.
	maxLabels = 32
	// maxSignedAnnotations bounds the captf.io/ annotations kept per Job; the controller writes
	// about a dozen. A Job with more is not as the controller wrote it, and its record keeps the
	// views' annotations only, with an empty signature, which never verifies.
	maxSignedAnnotations = 32
	// maxLabelKeyBytes and maxLabelValueBytes are the API server's own limits on a label: a
	// 253-byte DNS prefix, a slash and a 63-byte name; a 63-byte value.
	maxLabelKeyBytes   = 253 + 1 + jobs.MaxLabelValueLength
	maxLabelValueBytes = jobs.MaxLabelValueLength
	// The bounds of a kept controller reference, which the API server checks only for being
	// set: an API version is shaped like a label key, a kind is a short word (captf's are
	// TerraformCluster and the like), a name a DNS subdomain, a UID a 36-byte UUID.
	maxRefAPIVersionBytes = maxLabelKeyBytes
	maxRefKindBytes       = 63
	maxRefNameBytes       = 253
	maxRefUIDBytes        = 63
	// maxReasonBytes bounds a finish condition's reason; the Job controller's are CamelCase
	// words such as BackoffLimitExceeded.
	maxReasonBytes = 256
)

// modelLabels are the labels the run model and the runs API's selectors read, kept first when a
// Job has more labels than maxLabels.
var modelLabels = [...]string{
	jobs.LabelManaged, jobs.LabelOwnerKind, jobs.LabelOwnerName, jobs.LabelClusterName, jobs.LabelOp, jobs.LabelAttempt,
}

// jobRecord is what the server keeps of a managed Job: what the API shows and the run model
// reads, in a compact form. It replaces the Job in the server's store, because a batchv1.Job
// with its pod template is many times larger and the server shows none of it. Strings repeated
// across Jobs are interned; the labels but the op and attempt, and the controller owner
// reference, are held once per object; times are nanoseconds. job rebuilds the Job as far as the model reads
// it. A record is never changed once stored.
type jobRecord struct {
	name            string
	uid             compactUID
	resourceVersion string
	// target is the Job's namespace, the object it runs for and the labels all its Jobs share.
	target unique.Handle[jobTarget]
	// own holds the values of perJobLabels; ownSet has bit i set when the Job has label i.
	own [len(perJobLabels)]string
	// annotations are the Job's captf.io/ annotations (see keptAnnotations), sorted by key.
	annotations []annotation
	// Times in Unix nanoseconds; 0 when unset.
	created, deleted, started, completed int64
	// finish is the Job's first true Complete or Failed condition, of kind finishKind;
	// notFinished while it has none.
	finish     finishCondition
	finishKind finishKind
	ownSet     uint8 // next to finishKind: the two bytes share one word
}

// jobTarget is the namespace of a Job, the owner key of the object it runs for, its controller
// owner reference, if it has one, and its labels but perJobLabels (see encodeLabels): what the
// Jobs of one object have in common.
type jobTarget struct {
	namespace, key string
	ref            ownerRef
	labels         string
}

// perJobLabels are the labels that differ among the Jobs of one object, kept in each record.
var perJobLabels = [...]string{jobs.LabelOp, jobs.LabelAttempt}

// perJobLabel returns the index of key in perJobLabels, or -1.
func perJobLabel(key string) int {
	for i, k := range perJobLabels {
		if k == key {
			return i
		}
	}
	return -1
}

// compactUID holds a UID in 16 bytes when it is a UUID in canonical form, as the API server
// makes them, and as text otherwise.
type compactUID struct {
	uuid [16]byte
	text *string
}

func compactUIDOf(uid types.UID) compactUID {
	var c compactUID
	if b, err := hex.DecodeString(strings.ReplaceAll(string(uid), "-", "")); err == nil && len(b) == 16 {
		copy(c.uuid[:], b)
		if c.value() == uid {
			return c
		}
	}
	text := string(uid)
	return compactUID{text: &text}
}

func (c compactUID) value() types.UID {
	if c.text != nil {
		return types.UID(*c.text)
	}
	h := hex.EncodeToString(c.uuid[:])
	return types.UID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32])
}

// ownerRef is a controller owner reference in comparable form, so that it can be interned.
type ownerRef struct {
	set                       bool
	apiVersion, kind, name    string
	uid                       types.UID
	controller, blockDeletion jobs.OptionalBool
}

// annotation is one kept annotation, with an interned key.
type annotation struct{ key, value string }

// finishCondition is a true Complete or Failed condition without its message: the message is
// never shown, and may be long.
type finishCondition struct {
	reason string
	at     int64
}

// finishKind is the type of a finish condition.
type finishKind uint8

const (
	notFinished finishKind = iota
	finishedComplete
	finishedFailed
)

var finishTypes = [...]batchv1.JobConditionType{finishedComplete: batchv1.JobComplete, finishedFailed: batchv1.JobFailed}

var _ runtime.Object = &jobRecord{}

// GetObjectKind implements runtime.Object; a record has no kind of its own.
func (r *jobRecord) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. A record is immutable, so its copy may share the
// interned and read-only parts.
func (r *jobRecord) DeepCopyObject() runtime.Object {
	out := *r
	out.annotations = slices.Clone(r.annotations)
	return &out
}

// GetObjectMeta implements metav1.ObjectMetaAccessor for the Reflector's keys: name, namespace,
// UID and resourceVersion.
func (r *jobRecord) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: r.name, Namespace: r.namespace(), UID: r.uid.value(), ResourceVersion: r.resourceVersion}
}

// namespace is the Job's namespace.
func (r *jobRecord) namespace() string {
	return r.target.Value().namespace
}

// labelSet returns the Job's labels as a labels.Labels, without building a map.
func (r *jobRecord) labelSet() recordLabels { return recordLabels{r} }

// recordLabels reads a record's labels for a selector.
type recordLabels struct{ r *jobRecord }

var _ labels.Labels = recordLabels{}

// Has implements labels.Labels.
func (l recordLabels) Has(key string) bool {
	_, ok := l.lookup(key)
	return ok
}

// Get implements labels.Labels.
func (l recordLabels) Get(key string) string {
	v, _ := l.lookup(key)
	return v
}

// Lookup implements labels.Labels.
func (l recordLabels) Lookup(key string) (string, bool) { return l.lookup(key) }

func (l recordLabels) lookup(key string) (string, bool) {
	if i := perJobLabel(key); i >= 0 {
		return l.r.own[i], l.r.ownSet&(1<<i) != 0
	}
	encoded := l.r.target.Value().labels
	for encoded != "" {
		var k, v string
		k, encoded, _ = strings.Cut(encoded, "\x00")
		v, encoded, _ = strings.Cut(encoded, "\x00")
		if k == key {
			return v, true
		}
	}
	return "", false
}

// encodeLabels joins the labels but perJobLabels as key NUL value NUL ..., sorted by key; label
// keys and values cannot hold NUL.
func encodeLabels(in map[string]string) string {
	keys := make([]string, 0, len(in))
	for k := range in {
		if perJobLabel(k) < 0 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(in[k])
	}
	return b.String()
}

// labelMap rebuilds the Job's labels.
func (r *jobRecord) labelMap() map[string]string {
	encoded := r.target.Value().labels
	if encoded == "" && r.ownSet == 0 {
		return nil
	}
	out := make(map[string]string, strings.Count(encoded, "\x00")/2+1+len(perJobLabels))
	for encoded != "" {
		var k, v string
		k, encoded, _ = strings.Cut(encoded, "\x00")
		v, encoded, _ = strings.Cut(encoded, "\x00")
		out[k] = v
	}
	for i, k := range perJobLabels {
		if r.ownSet&(1<<i) != 0 {
			out[k] = r.own[i]
		}
	}
	return out
}

// labelsKey identifies the labels of a record by content.
type labelsKey struct {
	target unique.Handle[jobTarget]
	own    [len(perJobLabels)]string
	ownSet uint8
}

// job rebuilds the Job as far as the run model reads it.
func (r *jobRecord) job() batchv1.Job { return r.jobWith(nil) }

// jobWith rebuilds the Job, taking its labels and owner references from memo when it has them
// and adding them when not; memo may be nil.
func (r *jobRecord) jobWith(memo *jobMemo) batchv1.Job {
	job := batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:              r.name,
			Namespace:         r.namespace(),
			UID:               r.uid.value(),
			ResourceVersion:   r.resourceVersion,
			CreationTimestamp: timeOf(r.created),
			DeletionTimestamp: timePtrOf(r.deleted),
		},
		Status: batchv1.JobStatus{
			StartTime:      timePtrOf(r.started),
			CompletionTime: timePtrOf(r.completed),
		},
	}
	if len(r.annotations) > 0 {
		job.Annotations = make(map[string]string, len(r.annotations))
		for _, a := range r.annotations {
			job.Annotations[a.key] = a.value
		}
	}
	job.Labels, job.OwnerReferences = memo.labels(r), memo.ownerReferences(r.target)
	if r.finishKind != notFinished {
		job.Status.Conditions = []batchv1.JobCondition{{
			Type: finishTypes[r.finishKind], Status: corev1.ConditionTrue, Reason: r.finish.reason,
			LastTransitionTime: timeOf(r.finish.at),
		}}
	}
	return job
}

// jobMemo lets the views the publisher computes share the label maps and owner references of
// the Jobs they rebuild, so that the runs and plans kept for replay hold one copy per set of
// labels, not one per event and version. It forgets everything past memoLimit entries, which
// bounds it. It is used under the publish lock only; its maps are never written once made.
type jobMemo struct {
	labelMaps map[labelsKey]map[string]string
	refs      map[unique.Handle[jobTarget]][]metav1.OwnerReference
}

// memoLimit is how many records and targets a jobMemo remembers: enough for the Jobs of the
// objects of recent events, few enough that the maps only it holds cost little.
const memoLimit = 1024

func newJobMemo() *jobMemo {
	return &jobMemo{labelMaps: map[labelsKey]map[string]string{}, refs: map[unique.Handle[jobTarget]][]metav1.OwnerReference{}}
}

// labels returns the labels of r, shared when memo is not nil.
func (m *jobMemo) labels(r *jobRecord) map[string]string {
	if m == nil {
		return r.labelMap()
	}
	key := labelsKey{target: r.target, own: r.own, ownSet: r.ownSet}
	if l, ok := m.labelMaps[key]; ok {
		return l
	}
	if len(m.labelMaps) >= memoLimit {
		clear(m.labelMaps)
	}
	l := r.labelMap()
	m.labelMaps[key] = l
	return l
}

// ownerReferences returns the owner references of a Job with target, shared when memo is not
// nil.
func (m *jobMemo) ownerReferences(target unique.Handle[jobTarget]) []metav1.OwnerReference {
	if m != nil {
		if refs, ok := m.refs[target]; ok {
			return refs
		}
	}
	ref := target.Value().ref
	if !ref.set {
		return nil
	}
	refs := []metav1.OwnerReference{{
		APIVersion: ref.apiVersion, Kind: ref.kind, Name: ref.name, UID: ref.uid,
		Controller: ref.controller.Pointer(), BlockOwnerDeletion: ref.blockDeletion.Pointer(),
	}}
	if m != nil {
		if len(m.refs) >= memoLimit {
			clear(m.refs)
		}
		m.refs[target] = refs
	}
	return refs
}

// unixNanos is t in Unix nanoseconds, 0 for the zero time.
func unixNanos(t metav1.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func unixNanosPtr(t *metav1.Time) int64 {
	if t == nil {
		return 0
	}
	return unixNanos(*t)
}

// timeOf is the metav1.Time of Unix nanoseconds, the zero time for 0.
func timeOf(nanos int64) metav1.Time {
	if nanos == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(0, nanos))
}

func timePtrOf(nanos int64) *metav1.Time {
	if nanos == 0 {
		return nil
	}
	t := timeOf(nanos)
	return &t
}

// ownerKey is the key of the object the Job runs for: namespace/kind/name of jobs.TargetOf.
func (r *jobRecord) ownerKey() string { return r.target.Value().key }

// ownerKeyOf joins namespace, kind and name into an owner key.
func ownerKeyOf(namespace string, kind jobs.Kind, name string) string {
	return namespace + "/" + string(kind) + "/" + name
}

// recordOfJob reduces a Job to a jobRecord: name, namespace, UID, resourceVersion, creation
// and deletion time, labels, the controller owner reference, the captf.io/ annotations (those
// the run model reads and those the signature covers), start and completion time, and the true
// Complete or Failed condition without its message. Text past the bounds above is left out, or
// kept empty where its presence counts.
func recordOfJob(job *batchv1.Job) *jobRecord {
	r := &jobRecord{
		name:            job.Name,
		uid:             compactUIDOf(job.UID),
		resourceVersion: job.ResourceVersion,
		created:         unixNanos(job.CreationTimestamp),
		deleted:         unixNanosPtr(job.DeletionTimestamp),
		started:         unixNanosPtr(job.Status.StartTime),
		completed:       unixNanosPtr(job.Status.CompletionTime),
	}
	jobLabels := boundedLabels(job.Labels)
	for i, k := range perJobLabels {
		if v, ok := jobLabels[k]; ok {
			r.own[i], r.ownSet = intern(v), r.ownSet|1<<i
		}
	}
	r.annotations = keptAnnotations(job.Annotations)
	controller := metav1.GetControllerOfNoCopy(job)
	ref := boundedRef(controller)
	t := jobs.TargetOf(job)
	if ref != controller || len(jobLabels) != len(job.Labels) {
		// Something was left out: the target as the run model reads it from what is kept.
		var refs []metav1.OwnerReference
		if ref != nil {
			refs = []metav1.OwnerReference{*ref}
		}
		t = jobs.TargetOf(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Labels: jobLabels, OwnerReferences: refs}})
	}
	target := jobTarget{namespace: job.Namespace, key: ownerKeyOf(job.Namespace, jobs.Kind(t.Kind), t.Name), labels: encodeLabels(jobLabels)}
	if ref != nil {
		target.ref = ownerRef{
			set: true, apiVersion: ref.APIVersion, kind: ref.Kind, name: ref.Name, uid: ref.UID,
			controller: jobs.OptionalBoolOf(ref.Controller), blockDeletion: jobs.OptionalBoolOf(ref.BlockOwnerDeletion),
		}
	}
	r.target = unique.Make(target)
	if c := jobs.FinishCondition(job); c != nil {
		kind := finishedComplete
		if c.Type == batchv1.JobFailed {
			kind = finishedFailed
		}
		reason := c.Reason
		if len(reason) > maxReasonBytes {
			reason = "" // not the Job controller's: no known reason
		}
		r.finishKind = kind
		r.finish = finishCondition{reason: intern(reason), at: unixNanos(c.LastTransitionTime)}
	}
	return r
}

// keptAnnotations are the annotations of a Job its record keeps, sorted by key: those the views
// read (jobAnnotations) and every other captf.io/ one, up to maxSignedAnnotations, for the
// signature check. A Job with more keeps the views' and an empty signature.
func keptAnnotations(in map[string]string) []annotation {
	signed := 0
	for k := range in {
		if strings.HasPrefix(k, signedPrefix) {
			signed++
		}
	}
	if signed == 0 {
		return nil
	}
	var out []annotation
	if signed > maxSignedAnnotations {
		out = make([]annotation, 0, len(jobAnnotations)+1)
		for _, k := range jobAnnotations {
			if v, ok := in[k]; ok {
				out = append(out, annotation{key: k, value: boundedAnnotation(k, v)})
			}
		}
		out = append(out, annotation{key: runkey.AnnotationSignature})
	} else {
		out = make([]annotation, 0, signed) // no spare capacity: records are many
		for k, v := range in {
			if strings.HasPrefix(k, signedPrefix) {
				out = append(out, annotation{key: intern(k), value: signedValue(k, v)})
			}
		}
	}
	slices.SortFunc(out, func(a, b annotation) int { return strings.Compare(a.key, b.key) })
	return out
}

// signedValue is boundedAnnotation, but a signature, which no other Job shares, is kept as it is
// rather than interned.
func signedValue(k, v string) string {
	if k == runkey.AnnotationSignature && len(v) <= maxAnnotationBytes {
		return v
	}
	return boundedAnnotation(k, v)
}

// boundedAnnotation is the value a record keeps of the kept annotation key: v itself within
// its bound (maxResultBytes for the result, maxAnnotationBytes else), and "" past it. The
// annotation stays present, so that a mark still reads as set and an oversized result as
// unreadable, as jobs.DecodeSummary reads one; its text, which no controller wrote, reads as
// unknown.
func boundedAnnotation(key, v string) string {
	limit := maxAnnotationBytes
	if key == jobs.AnnotationResult {
		limit = maxResultBytes
	}
	switch {
	case len(v) > limit:
		return ""
	case len(v) <= 64:
		return intern(v)
	}
	return v
}

// labelFits reports whether a label is within the API server's limits.
func labelFits(key, value string) bool {
	return key != "" && len(key) <= maxLabelKeyBytes && len(value) <= maxLabelValueBytes
}

// boundedLabels returns in when it is within the label bounds, and otherwise a copy without
// the labels past them: a label longer than the API server allows is left out, and of more than
// maxLabels the modelLabels are kept first, then the others in the order of their keys.
func boundedLabels(in map[string]string) map[string]string {
	within := len(in) <= maxLabels
	for k, v := range in {
		if !within {
			break
		}
		within = labelFits(k, v)
	}
	if within {
		return in
	}
	out := make(map[string]string, min(len(in), maxLabels))
	keep := func(k string) {
		if v, ok := in[k]; ok && len(out) < maxLabels && labelFits(k, v) {
			out[k] = v
		}
	}
	for _, k := range modelLabels {
		keep(k)
	}
	rest := make([]string, 0, len(in))
	for k := range in {
		if _, ok := out[k]; !ok && labelFits(k, in[k]) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		keep(k)
	}
	return out
}

// boundedRef returns a Job's controller reference ref when its fields are within the bounds,
// and nil otherwise: a reference that names no object the API server could hold is not kept,
// and the run's target then comes from its labels, as for a Job without one.
func boundedRef(ref *metav1.OwnerReference) *metav1.OwnerReference {
	if ref == nil || len(ref.APIVersion) > maxRefAPIVersionBytes || len(ref.Kind) > maxRefKindBytes ||
		len(ref.Name) > maxRefNameBytes || len(ref.UID) > maxRefUIDBytes {
		return nil
	}
	return ref
}

// transformJob is the Job Reflector's transform: it keeps a jobRecord instead of the Job. It is
// idempotent, as client-go requires.
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

// ownerRecordOf returns the record in an informer event, also from a deletion tombstone.
func ownerRecordOf(obj any) (*ownerRecord, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	r, ok := obj.(*ownerRecord)
	return r, ok
}

// intern is jobs.Intern: the label keys, kinds, operations and owner names that thousands of
// Jobs repeat are held once.
var intern = jobs.Intern

// internMap copies in with interned keys and short values; with keep set, only those keys.
// Values are bounded as boundedAnnotation bounds a Job's; long ones (the result summary) are
// copied as they are.
func internMap(in map[string]string, keep []string) map[string]string {
	var out map[string]string
	add := func(k, v string) {
		if out == nil {
			out = make(map[string]string, len(in))
		}
		out[intern(k)] = boundedAnnotation(k, v)
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

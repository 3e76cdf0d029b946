package registry

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// t0 is the reading time of the tests; Jobs are made relative to it.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// planHash and inputsHash are well-formed hashes.
var (
	planHash   = "p3:" + strings.Repeat("ab", 32)
	planHash2  = "p3:" + strings.Repeat("cd", 32)
	inputsHash = "h1:" + strings.Repeat("12", 32)
)

// testRunKey is the run key of the tests' install, made a day before t0: the Jobs of the tests,
// all made after it, verify only when signed.
var testRunKey = func() runkey.Key {
	key, err := runkey.Of(bytes.Repeat([]byte{7}, runkey.Size))
	if err != nil {
		panic(err)
	}
	return key
}()

// sign signs job as the controller does when it creates or books it: the digest of its result,
// if it has one, then the signature of its facts under testRunKey.
func sign(job *batchv1.Job) {
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	if result, ok := job.Annotations[jobs.AnnotationResult]; ok {
		job.Annotations[runkey.AnnotationResultDigest] = runkey.ResultDigest(result)
	}
	job.Annotations[runkey.AnnotationSignature] = testRunKey.SignJob(job)
}

// resign signs job again when it carries a signature: what the controller signed it re-signs
// after each of its writes; what it did not sign stays unsigned.
func resign(job *batchv1.Job) {
	if _, signed := job.Annotations[runkey.AnnotationSignature]; signed {
		sign(job)
	}
}

// rvCounter hands out increasing resourceVersions.
var rvCounter = 100

func nextRV() string {
	rvCounter++
	return strconv.Itoa(rvCounter)
}

// jobOpt changes a test Job.
type jobOpt func(*batchv1.Job)

// newJob returns a Job the controller would create for TerraformCluster owner in namespace
// ns, created attempt minutes after t0-1h, signed as the controller signs it once opts are
// applied.
func newJob(ns, owner string, op jobs.Op, attempt int32, opts ...jobOpt) *batchv1.Job {
	name, err := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: owner, Op: op, Attempt: attempt, InputsHash: inputsHash})
	if err != nil {
		panic(err)
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			Namespace:         ns,
			UID:               types.UID("uid-" + name),
			ResourceVersion:   nextRV(),
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour + time.Duration(attempt)*time.Minute)),
			Labels:            jobs.Labels(jobs.KindCluster, owner, "cl-"+owner, op, attempt),
			Annotations:       map[string]string{jobs.AnnotationInputsHash: inputsHash},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: infrav1.GroupVersion.String(), Kind: string(jobs.KindCluster), Name: owner,
				UID: types.UID("uid-" + owner), Controller: ptr.To(true),
			}},
		},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "runner", Image: "example.invalid/module:1", Args: []string{"--op", string(op)}}},
		}}},
	}
	for _, o := range opts {
		o(job)
	}
	sign(job)
	return job
}

// started sets status.startTime.
func started(at time.Time) jobOpt {
	return func(j *batchv1.Job) { j.Status.StartTime = ptr.To(metav1.NewTime(at)) }
}

// finished marks the Job Complete (or Failed with reason) at at, started a minute earlier.
func finished(condition batchv1.JobConditionType, reason string, at time.Time) jobOpt {
	return func(j *batchv1.Job) {
		j.Status.StartTime = ptr.To(metav1.NewTime(at.Add(-time.Minute)))
		j.Status.CompletionTime = ptr.To(metav1.NewTime(at))
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{
			Type: condition, Status: corev1.ConditionTrue, Reason: reason, Message: "a long message the server drops",
			LastTransitionTime: metav1.NewTime(at),
		})
	}
}

func succeeded(at time.Time) jobOpt { return finished(batchv1.JobComplete, "Completed", at) }

func failed(at time.Time) jobOpt { return finished(batchv1.JobFailed, "BackoffLimitExceeded", at) }

func deadline(at time.Time) jobOpt {
	return finished(batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded, at)
}

// annotated sets an annotation.
func annotated(key, value string) jobOpt {
	return func(j *batchv1.Job) { j.Annotations[key] = value }
}

// withResult sets the result summary annotation, as bookkeeping does.
func withResult(s jobs.Summary) jobOpt {
	return func(j *batchv1.Job) {
		v, err := jobs.EncodeSummary(s)
		if err != nil {
			panic(err)
		}
		j.Annotations[jobs.AnnotationResult] = v
		j.Annotations[jobs.AnnotationBookkept] = "true"
	}
}

// cluster returns a TerraformCluster with optional history limits, plan and annotations.
func cluster(ns, name string, failedLimit *int32, plan *infrav1.PlanPreview, annotations map[string]string) *infrav1.TerraformCluster {
	return &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: nextRV(), Annotations: annotations,
		},
		Spec:   infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Jobs: infrav1.JobPolicy{FailedJobsHistoryLimit: failedLimit}}},
		Status: infrav1.TerraformClusterStatus{Plan: plan},
	}
}

// newTestSource returns a synced Source over stores filled with objs (Jobs and captf objects),
// read at t0, that knows testRunKey.
func newTestSource(t testing.TB, objs ...runtime.Object) *Source {
	t.Helper()
	s := newUnsyncedTestSource(t, objs...)
	s.setRunKey(testRunKey)
	s.markSynced()
	return s
}

// newKeylessTestSource is newTestSource before the run key is known.
func newKeylessTestSource(t testing.TB, objs ...runtime.Object) *Source {
	t.Helper()
	s := newUnsyncedTestSource(t, objs...)
	s.markSynced()
	return s
}

// newUnsyncedTestSource returns a Source over stores filled with objs, read at t0, not yet
// marked synced.
func newUnsyncedTestSource(t testing.TB, objs ...runtime.Object) *Source {
	t.Helper()
	jobStore := newJobStore()
	owners := map[jobs.Kind]cache.Indexer{}
	for _, k := range []jobs.Kind{jobs.KindCluster, jobs.KindMachine, jobs.KindMachinePool} {
		owners[k] = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	}
	s := newSource(jobStore, owners, func() time.Time { return t0 })
	for _, o := range objs {
		if err := s.add(o); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// add stores a Job or captf object without publishing, as the initial list does; like the
// feed, it keeps only Jobs that are runs.
func (s *Source) add(obj runtime.Object) error {
	if job, ok := obj.(*batchv1.Job); ok {
		rv, _ := strconv.ParseUint(job.ResourceVersion, 10, 64)
		s.bumpProcessed(rv)
		if r := recordOfJob(job); r.isRun() {
			s.jobs.put(r)
		}
		return nil
	}
	r, ok := recordOfOwner(obj)
	if !ok {
		return fmt.Errorf("cannot store %T", obj)
	}
	return s.owners[r.kind].Add(r)
}

// Store changes that publish, through the feed the Job Reflector writes to.

func (s *Source) testAddJob(t testing.TB, job *batchv1.Job) {
	t.Helper()
	if err := (&jobFeed{src: s}).Add(job); err != nil {
		t.Fatal(err)
	}
}

func (s *Source) testUpdateJob(t testing.TB, job *batchv1.Job) {
	t.Helper()
	_, ok := s.job(job.Namespace, job.Name)
	if !ok {
		t.Fatalf("no Job %s to update", job.Name)
	}
	job.ResourceVersion = nextRV() // a new version, which the feed publishes
	resign(job)
	if err := (&jobFeed{src: s}).Update(job); err != nil {
		t.Fatal(err)
	}
}

func (s *Source) testDeleteJob(t testing.TB, job *batchv1.Job) {
	t.Helper()
	old, ok := s.job(job.Namespace, job.Name)
	if !ok {
		t.Fatalf("no Job %s to delete", job.Name)
	}
	// The delete event carries the Job at the version of its deletion.
	deleted := old.DeepCopyObject().(*jobRecord)
	deleted.resourceVersion = nextRV()
	if err := (&jobFeed{src: s}).Delete(deleted); err != nil {
		t.Fatal(err)
	}
}

func (s *Source) testUpdateOwner(t testing.TB, obj runtime.Object) {
	t.Helper()
	r, _ := recordOfOwner(obj)
	oldObj, ok, _ := s.owners[r.kind].GetByKey(r.Namespace + "/" + r.Name)
	var old *ownerRecord
	if ok {
		old = oldObj.(*ownerRecord)
	}
	if err := s.owners[r.kind].Update(r); err != nil {
		t.Fatal(err)
	}
	s.onOwnerEvent(old, r)
}

package runkey

import (
	"bytes"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/captf/captf/jobs"
)

func TestJobSignatures(t *testing.T) {
	key, err := Of(bytes.Repeat([]byte{7}, Size))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := Of(bytes.Repeat([]byte{8}, Size))
	signed := func() *batchv1.Job {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
			Name: "captf-c-web-apply-a1-abc", Namespace: "ns", UID: "job-uid",
			CreationTimestamp: metav1.NewTime(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)),
			Labels: map[string]string{jobs.LabelManaged: jobs.ManagedValue, "app": "x", jobs.LabelOp: "apply", jobs.LabelAttempt: "1",
				jobs.LabelOwnerName: "web", jobs.LabelClusterName: "web"},
			Annotations: map[string]string{jobs.AnnotationInputsHash: "h1:abc", "note": "free"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: string(jobs.KindCluster),
				Name: "web", UID: "owner-uid", Controller: ptrTrue()}},
		}}
		job.Annotations[AnnotationSignature] = key.SignJob(job)
		return job
	}
	for _, tc := range []struct {
		rule   string
		mutate func(*batchv1.Job)
		key    Key
		want   bool
	}{
		{"the controller's Job verifies", func(*batchv1.Job) {}, key, true},
		{"labels and annotations outside captf.io may change", func(j *batchv1.Job) { j.Labels["app"] = "y"; j.Annotations["note"] = "z" }, key, true},
		{"a captf.io annotation may not change", func(j *batchv1.Job) { j.Annotations[jobs.AnnotationInputsHash] = "h1:other" }, key, false},
		{"a captf.io annotation may not be added", func(j *batchv1.Job) { j.Annotations[jobs.AnnotationApprovedPlan] = "p3:x" }, key, false},
		{"a captf.io label may not change", func(j *batchv1.Job) { j.Labels[jobs.LabelManaged] = "false" }, key, false},
		{"the op label may not change", func(j *batchv1.Job) { j.Labels[jobs.LabelOp] = "destroy" }, key, false},
		{"the attempt label may not change", func(j *batchv1.Job) { j.Labels[jobs.LabelAttempt] = "7" }, key, false},
		{"the owner labels may not change", func(j *batchv1.Job) { j.Labels[jobs.LabelOwnerName] = "db" }, key, false},
		{"the cluster-name label may not change", func(j *batchv1.Job) { j.Labels[jobs.LabelClusterName] = "other" }, key, false},
		{"the result is left to its digest", func(j *batchv1.Job) { j.Annotations[jobs.AnnotationResult] = "{}" }, key, true},
		{"a signature copied onto another Job does not verify", func(j *batchv1.Job) { j.UID = "forged-uid" }, key, false},
		{"a signature under another name does not verify", func(j *batchv1.Job) { j.Name = "other" }, key, false},
		{"another controller owner does not verify", func(j *batchv1.Job) { j.OwnerReferences[0].UID = "other-owner" }, key, false},
		{"another key does not verify", func(*batchv1.Job) {}, other, false},
		{"an unsigned Job is not trusted", func(j *batchv1.Job) { delete(j.Annotations, AnnotationSignature) }, key, false},
		{"an unsigned Job made before the key is not trusted for its age", func(j *batchv1.Job) {
			delete(j.Annotations, AnnotationSignature)
			j.CreationTimestamp = metav1.NewTime(time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC))
		}, key, false},
		{"a signature of another scheme does not verify", func(j *batchv1.Job) { j.Annotations[AnnotationSignature] = "s0:x" }, key, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			job := signed()
			tc.mutate(job)
			if got := tc.key.JobSigned(job); got != tc.want {
				t.Fatalf("JobSigned = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestResultIntact(t *testing.T) {
	for _, tc := range []struct {
		rule        string
		annotations map[string]string
		want        bool
	}{
		{"no result has nothing to check", map[string]string{}, true},
		{"a result with its digest is intact", map[string]string{jobs.AnnotationResult: "{}", AnnotationResultDigest: ResultDigest("{}")}, true},
		{"a rewritten result is not", map[string]string{jobs.AnnotationResult: `{"x":1}`, AnnotationResultDigest: ResultDigest("{}")}, false},
		{"a result without a digest is not", map[string]string{jobs.AnnotationResult: "{}"}, false},
		{"a digest without a result is not", map[string]string{AnnotationResultDigest: ResultDigest("{}")}, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Annotations: tc.annotations, UID: types.UID("u")}}
			if got := ResultIntact(job); got != tc.want {
				t.Fatalf("ResultIntact = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestARunKeyHasThirtyTwoBytes(t *testing.T) {
	if _, err := Of(make([]byte, 16)); err == nil {
		t.Fatal("a 16-byte key was taken")
	}
	var zero Key
	if zero.Valid() || zero.Verify(zero.Sign("x"), "x") {
		t.Fatal("the zero key verifies")
	}
}

func ptrTrue() *bool { b := true; return &b }

package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// t0 is the fixed clock of the tests; no test reads the real one.
var t0 = time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)

// at returns t0 plus d minutes.
func at(minutes int) time.Time { return t0.Add(time.Duration(minutes) * time.Minute) }

// state is how a test Job ended.
type state string

const (
	pending        state = "pending"
	running        state = "running"
	succeeded      state = "succeeded"
	failed         state = "failed"
	deadline       state = "deadline"
	interrupted    state = "interrupted"
	blocked        state = "blocked"
	planChanged    state = "plan-changed"
	planUnreadable state = "plan-unreadable"
	// deadlineInterrupted: the deadline killed it and the runner reported interrupted.
	deadlineInterrupted state = "deadline+interrupted"
)

// mkJob builds a retained Job of the object TerraformCluster "web": op, attempt and state.
// Attempt n is created at minute 10n, starts at once and finishes 5 minutes later, so attempt
// order and time order agree as they do for real Jobs.
func mkJob(op Op, attempt int32, st state, opts ...func(*batchv1.Job)) batchv1.Job {
	created := at(10 * int(attempt))
	j := batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("%s-a%d", op, attempt),
			Namespace:         "ns",
			CreationTimestamp: metav1.NewTime(created),
			Labels:            Labels(KindCluster, "web", "prod", op, attempt),
			Annotations:       map[string]string{},
		},
	}
	if st != pending {
		j.Status.StartTime = ptr.To(metav1.NewTime(created))
	}
	finish := metav1.NewTime(created.Add(5 * time.Minute))
	complete := func() {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{
			Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: finish,
		})
		j.Status.CompletionTime = &finish
	}
	fail := func(reason string) {
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{
			Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, LastTransitionTime: finish,
		})
	}
	switch st {
	case succeeded:
		complete()
	case planUnreadable:
		complete()
		j.Annotations[AnnotationPlanUnreadable] = "true"
	case failed:
		fail(batchv1.JobReasonBackoffLimitExceeded)
	case deadline:
		fail(batchv1.JobReasonDeadlineExceeded)
	case deadlineInterrupted:
		fail(batchv1.JobReasonDeadlineExceeded)
		j.Annotations[AnnotationInterrupted] = "true"
	case interrupted:
		fail(batchv1.JobReasonBackoffLimitExceeded)
		j.Annotations[AnnotationInterrupted] = "true"
	case blocked:
		fail(batchv1.JobReasonBackoffLimitExceeded)
		j.Annotations[AnnotationDestructivePlanBlocked] = "true"
	case planChanged:
		fail(batchv1.JobReasonBackoffLimitExceeded)
		j.Annotations[AnnotationPlanChanged] = "true"
	}
	for _, o := range opts {
		o(&j)
	}
	return j
}

func annotate(key, value string) func(*batchv1.Job) {
	return func(j *batchv1.Job) { j.Annotations[key] = value }
}

func named(name string) func(*batchv1.Job) {
	return func(j *batchv1.Job) { j.Name = name }
}

func label(key, value string) func(*batchv1.Job) {
	return func(j *batchv1.Job) { j.Labels[key] = value }
}

// finishedAt moves the finish of a finished Job.
func finishedAt(t time.Time) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		for i := range j.Status.Conditions {
			j.Status.Conditions[i].LastTransitionTime = metav1.NewTime(t)
		}
		if j.Status.CompletionTime != nil {
			j.Status.CompletionTime = ptr.To(metav1.NewTime(t))
		}
	}
}

func createdAt(t time.Time) func(*batchv1.Job) {
	return func(j *batchv1.Job) { j.CreationTimestamp = metav1.NewTime(t) }
}

func withSummary(s Summary) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		v, err := EncodeSummary(s)
		if err != nil {
			panic(err)
		}
		j.Annotations[AnnotationResult] = v
	}
}

func ownedBy(kind Kind, name string) func(*batchv1.Job) {
	return func(j *batchv1.Job) {
		j.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: TargetAPIVersion, Kind: string(kind), Name: name, Controller: ptr.To(true),
		}}
	}
}

// jobs collects Jobs into a slice.
func jobs(js ...batchv1.Job) []batchv1.Job { return js }

// names returns the names of the Jobs, in order.
func names(js []*batchv1.Job) []string {
	out := []string{}
	for _, j := range js {
		out = append(out, j.Name)
	}
	return out
}

func limit(n int32) *int32 { return &n }

func itoa(n int) string { return strconv.Itoa(n) }

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

package aggregated

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// hashes used by the tests.
var (
	inputsHash = "h1:" + strings.Repeat("12", 32)
	planHash   = "p3:" + strings.Repeat("ab", 32)
	planHash2  = "p3:" + strings.Repeat("cd", 32)
)

// clients are admin clients of the control plane.
type clients struct {
	kube  kubernetes.Interface
	infra client.Client
}

func newClients(t testing.TB) clients {
	t.Helper()
	return clientsFor(t, getEnv(t).Config)
}

// newUnthrottledClients are admin clients without client-go's rate limit, for setting up
// benchmarks.
func newUnthrottledClients(t testing.TB) clients {
	t.Helper()
	cfg := rest.CopyConfig(getEnv(t).Config)
	cfg.QPS, cfg.Burst = -1, 0
	return clientsFor(t, cfg)
}

func clientsFor(t testing.TB, cfg *rest.Config) clients {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	infra, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return clients{kube: kubernetes.NewForConfigOrDie(cfg), infra: infra}
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// newNamespace creates a namespace for one test, named after it.
func (c clients) newNamespace(t testing.TB) string {
	t.Helper()
	name := strings.Trim(nonName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.Trim(name, "-") + fmt.Sprintf("-%d", time.Now().UnixNano()%100000)
	if _, err := c.kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// createCluster creates a TerraformCluster and writes its status.plan when plan is set.
func (c clients) createCluster(t testing.TB, ns, name string, plan *infrav1.PlanPreview) *infrav1.TerraformCluster {
	t.Helper()
	obj := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.TerraformClusterSpec{
			WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: "example.invalid/module:1"}},
			ApplyPolicy:   infrav1.ApplyPolicyManual,
		},
	}
	if err := c.infra.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	if plan != nil {
		obj.Status.Plan = plan
		if err := c.infra.Status().Update(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	return obj
}

// createJob creates the Job the controller would create for a run of owner, with its labels,
// annotations and controller owner reference, and signs it once it has its UID, as the
// controller does. No kubelet runs here, so tests write its status.
func (c clients) createJob(t testing.TB, owner *infrav1.TerraformCluster, op jobs.Op, attempt int32, annotations map[string]string) *batchv1.Job {
	t.Helper()
	name, err := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: owner.Name, Op: op, Attempt: attempt, InputsHash: inputsHash})
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{jobs.AnnotationInputsHash: inputsHash}
	for k, v := range annotations {
		all[k] = v
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   owner.Namespace,
			Labels:      jobs.Labels(jobs.KindCluster, owner.Name, "", op, attempt),
			Annotations: all,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: infrav1.GroupVersion.String(), Kind: string(jobs.KindCluster), Name: owner.Name, UID: owner.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			// No Job controller runs here; suspending keeps it that way wherever one does.
			Suspend: ptr.To(true),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "runner", Image: "example.invalid/runner:1", Args: []string{"--op", string(op)}}},
			}},
		},
	}
	created, err := c.kube.BatchV1().Jobs(owner.Namespace).Create(t.Context(), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sign(created)
	signed, err := c.kube.BatchV1().Jobs(owner.Namespace).Update(t.Context(), created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("signing Job %s: %v", created.Name, err)
	}
	return signed
}

// sign signs job as the controller does when it creates or books it: the digest of its result,
// if it has one, then the signature of its facts, UID included, under runKey.
func sign(job *batchv1.Job) {
	if result, ok := job.Annotations[jobs.AnnotationResult]; ok {
		job.Annotations[runkey.AnnotationResultDigest] = runkey.ResultDigest(result)
	}
	job.Annotations[runkey.AnnotationSignature] = runKey.SignJob(job)
}

// jobState is a state the tests put a Job in, as the Job controller and bookkeeping would.
type jobState int

const (
	jobRunning jobState = iota
	jobSucceeded
	jobFailed
	jobDeadline
)

// setJob writes the Job's status (started a minute before at, finished at at) and the
// annotations bookkeeping adds, signing the Job again with them when the controller signed it
// (a Job it did not make stays unsigned).
func (c clients) setJob(t testing.TB, job *batchv1.Job, state jobState, at time.Time, annotations map[string]string) *batchv1.Job {
	t.Helper()
	ctx := t.Context()
	if len(annotations) > 0 {
		cur, err := c.kube.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range annotations {
			cur.Annotations[k] = v
		}
		if _, signed := cur.Annotations[runkey.AnnotationSignature]; signed {
			sign(cur)
		}
		if job, err = c.kube.BatchV1().Jobs(job.Namespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := c.kube.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c.writeStatus(t, cur, state, at)
}

// writeStatus writes cur's status as setJob does, from cur as given: for a Job nobody else
// writes, the object its create returned saves a read.
func (c clients) writeStatus(t testing.TB, cur *batchv1.Job, state jobState, at time.Time) *batchv1.Job {
	t.Helper()
	start := metav1.NewTime(at.Add(-time.Minute).Truncate(time.Second))
	end := metav1.NewTime(at.Truncate(time.Second))
	if cur.Status.StartTime == nil {
		cur.Status.StartTime = &start
	}
	cond := func(typ batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, LastTransitionTime: end, LastProbeTime: end}
	}
	switch state {
	case jobRunning:
		cur.Status.Active = 1
	case jobSucceeded:
		cur.Status.Active, cur.Status.Succeeded = 0, 1
		cur.Status.CompletionTime = &end
		cur.Status.Conditions = append(cur.Status.Conditions, cond(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached), cond(batchv1.JobComplete, batchv1.JobReasonCompletionsReached))
	case jobFailed, jobDeadline:
		reason := batchv1.JobReasonBackoffLimitExceeded
		if state == jobDeadline {
			reason = batchv1.JobReasonDeadlineExceeded
		}
		cur.Status.Active, cur.Status.Failed = 0, 1
		cur.Status.Conditions = append(cur.Status.Conditions, cond(batchv1.JobFailureTarget, reason), cond(batchv1.JobFailed, reason))
	}
	updated, err := c.kube.BatchV1().Jobs(cur.Namespace).UpdateStatus(t.Context(), cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("writing the status of Job %s: %v", cur.Name, err)
	}
	return updated
}

// resultAnnotations are the annotations bookkeeping writes for a summary.
func resultAnnotations(t testing.TB, s jobs.Summary, marks ...string) map[string]string {
	t.Helper()
	v, err := jobs.EncodeSummary(s)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{jobs.AnnotationResult: v, runkey.AnnotationResultDigest: runkey.ResultDigest(v), jobs.AnnotationBookkept: "true"}
	for _, m := range marks {
		out[m] = "true"
	}
	return out
}

// kubectl runs the real kubectl as admin, or with another kubeconfig when the first argument
// is --kubeconfig=...; it returns the combined output.
func kubectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := getEnv(t).Kubectl(ctx, args...).CombinedOutput()
	return string(out), err
}

// mustKubectl is kubectl that fails the test on an error.
func mustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := kubectl(t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// eventually polls check until it returns nil or timeout passes.
func eventually(t testing.TB, timeout time.Duration, check func(ctx context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("not within %s: %v", timeout, last)
	}
}

// Package trust plants what someone with Job, pod, Secret or Lease rights in a namespace can
// write — Jobs and pods that carry captf's labels, a Secret under a backup's name, oversized
// annotations and lock text — next to a provisioned TerraformCluster, and drives the real engine
// against the real API server. Each row is one rule: the controller believes only what it can tie
// to itself, and stays within bounds whatever others write.
package trust

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/reliability/rel"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(testenv.Main(m, testenv.Options{}))
}

const name = "web"

var namespaces atomic.Int32

// env is one namespace with one provisioned TerraformCluster "web" and its reconciler.
type env struct {
	t        *testing.T
	ctx      context.Context
	c        client.Client
	ns       string
	clock    *clocktesting.FakePassiveClock
	recorder *rel.Recorder
	r        *workspace.Reconciler
	obj      *infrav1.TerraformCluster
	serial   int64
	// ready is the object's Ready once its first apply is booked, which nothing others write
	// may change.
	ready metav1.Condition
}

func newEnv(t *testing.T) *env {
	t.Helper()
	te := testenv.Get(t)
	c, err := client.New(te.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: context.Background(), c: c, ns: fmt.Sprintf("trust-%d", namespaces.Add(1)),
		clock: clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second)), recorder: rel.NewRecorder()}
	if err := c.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	runKey, err := runkey.New()
	if err != nil {
		t.Fatal(err)
	}
	e.r = workspace.New(workspace.Reconciler{Client: c, APIReader: c, Recorder: e.recorder, Clock: e.clock, Metrics: m, RunnerImage: "registry.example/captf/manager:test", RunKey: &runKey}, infrav1.ClusterKind)
	e.obj = &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: map[string]string{jobs.LabelClusterName: name}},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Source:    infrav1.SourceSpec{Image: "registry.example/modules/net:v1"},
			Variables: &apiextensionsv1.JSON{Raw: []byte(`{"v":0}`)},
		}},
	}
	if err := capitest.Own(e.ctx, c, e.obj); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(e.ctx, e.obj); err != nil {
		t.Fatal(err)
	}
	e.settle()
	e.finish(e.running(), true, jobs.RunnerResult{})
	e.settle()
	e.ready = *conditions.Get(e.current().Status.Conditions, conditions.Ready)
	return e
}

// settle runs passes while they ask to run again at once; none may fail.
func (e *env) settle() {
	e.t.Helper()
	for i := 0; i < 12; i++ {
		res, err := e.r.Reconcile(e.ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(e.obj)})
		if err != nil {
			e.t.Fatalf("pass: %v", err)
		}
		if !workspace.AgainAtOnce(res) {
			return
		}
	}
	e.t.Fatal("did not settle in 12 passes")
}

func (e *env) jobs() []batchv1.Job {
	e.t.Helper()
	var list batchv1.JobList
	if err := e.c.List(e.ctx, &list, client.InNamespace(e.ns), client.MatchingLabels(jobs.OwnerLabels(jobs.KindCluster, name))); err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// running returns the one running Job the object controls.
func (e *env) running() batchv1.Job {
	e.t.Helper()
	own, err := e.r.OwnJobs(e.ctx, e.c, e.obj)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []batchv1.Job
	for _, j := range own {
		if !jobs.OutcomeOf(&j).Finished() {
			out = append(out, j)
		}
	}
	if len(out) != 1 {
		e.t.Fatalf("%d running Jobs of the object, want 1", len(out))
	}
	return out[0]
}

// finish ends a Job with its own pod; a successful apply writes a new state serial first.
func (e *env) finish(job batchv1.Job, ok bool, result jobs.RunnerResult) {
	e.t.Helper()
	if ok && jobs.OpOf(&job) == jobs.OpApply {
		e.serial++
		if err := rel.WriteState(e.ctx, e.c, e.ns, jobs.KindCluster, name, e.serial); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := rel.Finish(e.ctx, e.c, job, ok, rel.Result(&job, result), e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) current() *infrav1.TerraformCluster {
	e.t.Helper()
	var cur infrav1.TerraformCluster
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(e.obj), &cur); err != nil {
		e.t.Fatal(err)
	}
	return &cur
}

// setVariables gives the object new inputs, so an apply is due.
func (e *env) setVariables(v string) {
	e.t.Helper()
	cur := e.current()
	cur.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(v)}
	if err := e.c.Update(e.ctx, cur); err != nil {
		e.t.Fatal(err)
	}
}

// forgedJob creates a Job with the object's run labels; owner names its controller reference.
func (e *env) forgedJob(jobName string, op jobs.Op, attempt int32, owner *metav1.OwnerReference, annotations map[string]string, outcome jobs.Outcome) batchv1.Job {
	e.t.Helper()
	job := batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: jobName, Namespace: e.ns, Labels: jobs.Labels(jobs.KindCluster, name, name, op, attempt), Annotations: annotations},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "x", Image: "registry.example/x:v1"}},
		}}},
	}
	if owner != nil {
		job.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if err := e.c.Create(e.ctx, &job); err != nil {
		e.t.Fatalf("creating the forged Job: %v", err)
	}
	now := metav1.NewTime(e.clock.Now())
	switch outcome {
	case jobs.OutcomeRunning:
		return job
	case jobs.OutcomeSucceeded:
		job.Status.StartTime, job.Status.Succeeded, job.Status.CompletionTime = &now, 1, &now
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: "CompletionsReached", LastTransitionTime: now},
		}
	default:
		job.Status.StartTime, job.Status.Failed = &now, 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
		}
	}
	if err := e.c.Status().Update(e.ctx, &job); err != nil {
		e.t.Fatal(err)
	}
	return job
}

// notBooked checks that the engine never booked job.
func (e *env) notBooked(job batchv1.Job) {
	e.t.Helper()
	var cur batchv1.Job
	if err := e.c.Get(e.ctx, client.ObjectKeyFromObject(&job), &cur); err != nil {
		e.t.Fatal(err)
	}
	if _, booked := cur.Annotations[jobs.AnnotationBookkept]; booked {
		e.t.Fatalf("the forged Job %s was booked", job.Name)
	}
}

func (e *env) ownerRef(uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: infrav1.GroupVersion.String(), Kind: "TerraformCluster", Name: name, UID: uid, Controller: ptr.To(true)}
}

// noNewRun checks that nothing the controller controls started or changed verdict.
func (e *env) noNewRun() {
	e.t.Helper()
	for _, j := range e.jobs() {
		if workspace.OwnedBy(&j, e.obj) && !jobs.OutcomeOf(&j).Finished() {
			e.t.Fatalf("Job %s started", j.Name)
		}
	}
	cur := e.current()
	ready := conditions.Get(cur.Status.Conditions, conditions.Ready)
	if !conditions.IsTrue(cur.Status.Conditions, conditions.ApplyJobSucceeded) || ready == nil || ready.Status != e.ready.Status || ready.Reason != e.ready.Reason {
		e.t.Fatalf("conditions changed: %+v", cur.Status.Conditions)
	}
}

// plantInterruptingPod fails a real apply, then plants a newer pod of its Job, with the Job's
// controller reference when owned and another image, whose result claims an interruption: the
// Job must book as Failed from its own pod, and no JobInterrupted be believed.
func (e *env) plantInterruptingPod(owned bool) {
	e.t.Helper()
	e.setVariables(`{"v":1}`)
	e.settle()
	job := e.running()
	e.finish(job, false, jobs.RunnerResult{Error: &jobs.RunnerError{Kind: jobs.ErrorKindStep, Step: "apply", Tail: "real failure"}})
	e.clock.SetTime(e.clock.Now().Add(time.Second))
	forgedPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-zzzzz", Namespace: e.ns, Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
		Spec:       corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "source", Image: "registry.example/x:v1"}}},
	}
	if owned {
		forgedPod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(&job, batchv1.SchemeGroupVersion.WithKind("Job"))}
	}
	if err := e.c.Create(e.ctx, forgedPod); err != nil {
		e.t.Fatal(err)
	}
	// An interruption would be free of backoff: a retry at once.
	forgedPod.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "source", Image: "registry.example/x:v1",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: rel.Result(&job, jobs.RunnerResult{Error: &jobs.RunnerError{Kind: jobs.ErrorKindInterrupted}})}}}}}
	if err := e.c.Status().Update(e.ctx, forgedPod); err != nil {
		e.t.Fatal(err)
	}
	e.settle()
	cur := e.current()
	if cur.Status.LastRun == nil || cur.Status.LastRun.Job != job.Name || cur.Status.LastRun.Outcome != string(jobs.OutcomeFailed) {
		e.t.Fatalf("lastRun = %+v, want the real failure", cur.Status.LastRun)
	}
	if e.recorder.ByJob[job.Name]["JobInterrupted"] != 0 {
		e.t.Fatal("the forged pod's interruption was believed")
	}
}

func TestWhatOthersWriteChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		rule string
		run  func(e *env)
	}{
		{"a forged failed apply without a controller reference is not the object's", func(e *env) {
			forged := e.forgedJob("forged-apply", jobs.OpApply, 2, nil, nil, jobs.OutcomeFailed)
			e.settle()
			e.noNewRun()
			e.notBooked(forged)
		}},
		{"a forged failed apply controlled by another UID is not the object's", func(e *env) {
			e.forgedJob("forged-other", jobs.OpApply, 2, e.ownerRef("00000000-0000-0000-0000-000000000000"), nil, jobs.OutcomeFailed)
			e.settle()
			e.noNewRun()
		}},
		{"an attempt label of 2147483647 does not wedge the next name", func(e *env) {
			// Even a Job that names the object as controller cannot push the attempt out of range.
			e.forgedJob("forged-attempt", jobs.OpApply, 2147483647, e.ownerRef(e.obj.UID), nil, jobs.OutcomeSucceeded)
			e.setVariables(`{"v":1}`)
			e.settle()
			next := e.running()
			if jobs.AttemptOf(&next) != 2 || jobs.OpOf(&next) != jobs.OpApply {
				e.t.Fatalf("the next apply is %s (attempt %d), want attempt 2", next.Name, jobs.AttemptOf(&next))
			}
		}},
		{"a running Job with an attempt out of range still lets the status through", func(e *env) {
			// Signed as the controller would, so it is a run: the status must still be written.
			forged := e.forgedJob("forged-running", jobs.OpApply, 2147483647, e.ownerRef(e.obj.UID), nil, jobs.OutcomeRunning)
			patch := client.MergeFrom(forged.DeepCopy())
			metav1.SetMetaDataAnnotation(&forged.ObjectMeta, runkey.AnnotationSignature, e.r.RunKey.SignJob(&forged))
			if err := e.c.Patch(e.ctx, &forged, patch); err != nil {
				e.t.Fatal(err)
			}
			e.settle()
			if a := e.current().Status.ActiveJob; a == nil || a.Name != forged.Name {
				e.t.Fatalf("status.activeJob = %+v, want the running Job", a)
			}
		}},
		{"a running Job with an unknown op is not the object's, whoever it names as owner", func(e *env) {
			forged := e.forgedJob("forged-op", jobs.OpApply, 2, e.ownerRef(e.obj.UID), nil, jobs.OutcomeRunning)
			forged.Labels[jobs.LabelOp] = "bogus"
			if err := e.c.Update(e.ctx, &forged); err != nil {
				e.t.Fatal(err)
			}
			e.setVariables(`{"v":1}`)
			e.settle()
			if next := e.running(); jobs.OpOf(&next) != jobs.OpApply || jobs.AttemptOf(&next) != 2 {
				e.t.Fatalf("the next Job is %s, want the apply of attempt 2", next.Name)
			}
		}},
		{"a forged failed apply that copies a run's controller reference and signature is not the object's", func(e *env) {
			var run batchv1.Job
			for _, j := range e.jobs() {
				if workspace.OwnedBy(&j, e.obj) {
					run = j
				}
			}
			forged := e.forgedJob("forged-signed-apply", jobs.OpApply, 2, e.ownerRef(e.obj.UID),
				map[string]string{runkey.AnnotationSignature: run.Annotations[runkey.AnnotationSignature]}, jobs.OutcomeFailed)
			e.settle()
			e.noNewRun()
			e.notBooked(forged)
		}},
		{"a succeeded apply whose inputs hash was rewritten is no run of the object", func(e *env) {
			for _, j := range e.jobs() {
				if workspace.OwnedBy(&j, e.obj) && jobs.OpOf(&j) == jobs.OpApply {
					patch := client.MergeFrom(j.DeepCopy())
					j.Annotations[jobs.AnnotationInputsHash] = "h1:rewritten"
					if err := e.c.Patch(e.ctx, &j, patch); err != nil {
						e.t.Fatal(err)
					}
				}
			}
			own, err := e.r.OwnJobs(e.ctx, e.c, e.obj)
			if err != nil {
				e.t.Fatal(err)
			}
			for _, j := range own {
				if j.Annotations[jobs.AnnotationInputsHash] == "h1:rewritten" {
					e.t.Fatalf("the rewritten Job %s counts as a run", j.Name)
				}
			}
		}},
		{"a forged pod that copies a real Job's controller reference does not speak for it", func(e *env) {
			e.plantInterruptingPod(true)
		}},
		{"durable inputs rewritten by someone else run nothing", func(e *env) {
			var durable corev1.Secret
			if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: jobs.InputsSecretName(jobs.KindCluster, name)}, &durable); err != nil {
				e.t.Fatal(err)
			}
			durable.Annotations[jobs.AnnotationImage] = "registry.example/attacker:v1"
			if err := e.c.Update(e.ctx, &durable); err != nil {
				e.t.Fatal(err)
			}
			cur := e.current()
			if err := e.c.Delete(e.ctx, cur); err != nil {
				e.t.Fatal(err)
			}
			e.settle()
			for _, j := range e.jobs() {
				if jobs.OpOf(&j) == jobs.OpDestroy {
					e.t.Fatalf("destroy Job %s started from rewritten durable inputs", j.Name)
				}
			}
		}},
		{"a Secret named in spec.jobs.env without opting in is not read into a run", func(e *env) {
			if err := e.c.Create(e.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: e.ns}, StringData: map[string]string{"p": "x"}}); err != nil {
				e.t.Fatal(err)
			}
			cur := e.current()
			cur.Spec.Jobs.Env = []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "db-password"}, Key: "p"}}}}
			cur.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`{"v":9}`)}
			if err := e.c.Update(e.ctx, cur); err != nil {
				e.t.Fatal(err)
			}
			e.settle()
			for _, j := range e.jobs() {
				if workspace.OwnedBy(&j, e.obj) && !jobs.OutcomeOf(&j).Finished() {
					e.t.Fatalf("Job %s started with a Secret that did not opt in", j.Name)
				}
			}
		}},
		{"a forged newer pod of a real Job does not speak for it", func(e *env) {
			e.plantInterruptingPod(false)
		}},
		{"a Secret planted under a backup's name is not restored", func(e *env) {
			suffix := jobs.StateSecretSuffix(e.ns, jobs.KindCluster, name)
			planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: workspace.BackupName(suffix, 7), Namespace: e.ns,
				Labels: map[string]string{workspace.LabelStateBackup: "true", workspace.LabelStateBackupSuffix: suffix}},
				Data: map[string][]byte{"tfstate": []byte("their state")}}
			if err := e.c.Create(e.ctx, planted); err != nil {
				e.t.Fatal(err)
			}
			cur := e.current()
			cur.Annotations = map[string]string{jobs.AnnotationRestoreState: "7"}
			if err := e.c.Update(e.ctx, cur); err != nil {
				e.t.Fatal(err)
			}
			e.settle()
			for _, j := range e.jobs() {
				if jobs.OpOf(&j) == jobs.OpRestore {
					e.t.Fatalf("restore Job %s started from a planted Secret", j.Name)
				}
			}
			if c := conditions.Get(e.current().Status.Conditions, conditions.RestoreJobSucceeded); c == nil || c.Reason != conditions.ReasonRestoreBackupNotFound {
				e.t.Fatalf("RestoreJobSucceeded = %+v", c)
			}
		}},
		{"oversized annotations on a forged Job change nothing", func(e *env) {
			e.forgedJob("forged-big", jobs.OpApply, 3, nil, map[string]string{
				jobs.AnnotationResult: strings.Repeat("x", 200<<10), jobs.AnnotationApprovedPlan: strings.Repeat("p", 20<<10),
			}, jobs.OutcomeFailed)
			e.settle()
			e.noNewRun()
		}},
		{"an oversized result annotation on a real Job is no result, and no failure", func(e *env) {
			var owned batchv1.Job
			for _, j := range e.jobs() {
				if workspace.OwnedBy(&j, e.obj) {
					owned = j
				}
			}
			owned.Annotations[jobs.AnnotationResult] = strings.Repeat("{", 200<<10)
			if err := e.c.Update(e.ctx, &owned); err != nil {
				e.t.Fatal(err)
			}
			e.settle()
			e.noNewRun()
		}},
		{"a 40 KiB lock holder still lets the status through", func(e *env) {
			suffix := jobs.StateSecretSuffix(e.ns, jobs.KindCluster, name)
			info := fmt.Sprintf(`{"ID":"lock-1","Operation":"OperationTypeApply","Who":"%s@laptop","Version":"1.10.10","Created":"2026-11-01T00:00:00Z","Path":""}`, strings.Repeat("w", 40<<10))
			// The controller made the lock Lease before the first run; a holder takes it as the
			// backend does, by an update.
			lock := &coordinationv1.Lease{}
			if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: state.LockLeaseName(suffix)}, lock); err != nil {
				e.t.Fatal(err)
			}
			lock.Annotations = map[string]string{workspace.LockInfoAnnotation: info}
			lock.Spec.HolderIdentity = ptr.To("lock-1")
			if err := e.c.Update(e.ctx, lock); err != nil {
				e.t.Fatal(err)
			}
			e.setVariables(`{"v":1}`)
			e.settle()
			cur := e.current()
			c := conditions.Get(cur.Status.Conditions, conditions.StateReadable)
			if c == nil || c.Reason != conditions.ReasonStateLocked || len(c.Message) > 4096 {
				e.t.Fatalf("StateReadable = %v (message of %d bytes)", c, len(c.Message))
			}
			if cur.Status.ActiveJob == nil {
				e.t.Fatal("the apply did not start next to a held lock")
			}
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) { tc.run(newEnv(t)) })
	}
}

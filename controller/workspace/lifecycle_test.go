package workspace_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

func TestFirstApplyStartsOneJobInTheSeedOrder(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)

	h.get(tc)
	job := h.runningJob(jobs.KindCluster, "web")
	want, _ := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpApply, Attempt: 1, InputsHash: h.inputsHash(tc)})
	if job.Name != want {
		t.Errorf("Job name = %s, want %s", job.Name, want)
	}
	if tc.Status.ActiveJob == nil || tc.Status.ActiveJob.Name != job.Name || tc.Status.ActiveJob.Attempt != 1 {
		t.Errorf("status.activeJob = %+v", tc.Status.ActiveJob)
	}
	if !slices.Contains(tc.Finalizers, infrav1.ClusterKind.Finalizer()) {
		t.Errorf("finalizers = %v", tc.Finalizers)
	}
	runSecret := h.secret(jobs.RunSecretName(job.Name))
	if runSecret == nil || metav1.GetControllerOf(runSecret).UID != job.UID || len(runSecret.Data) != 2 {
		t.Fatalf("per-run Secret = %+v, want one owned by the Job with two files", runSecret)
	}
	durable := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))
	if durable == nil {
		t.Fatal("no durable inputs Secret")
	}
	if vars := string(durable.Data["terraform.tfvars.json"]); !strings.Contains(vars, `"region":"eu"`) ||
		!strings.Contains(vars, `"captf_cluster":{"name":"web","namespace":"`+h.ns+`"}`) {
		t.Fatalf("durable inputs Secret = %+v, want the spec's variables and the contract inputs", durable)
	}
	if l := h.runLease(jobs.KindCluster, "web"); l == nil || *l.Spec.HolderIdentity != job.Name {
		t.Fatalf("run Lease = %+v, want it held by %s", l, job.Name)
	}
	if ev := h.events(); countPrefix(ev, "Normal JobCreated") != 1 {
		t.Errorf("events = %v", ev)
	}

	// Passes while the Job runs start nothing more.
	h.settle(tc)
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 1 {
		t.Fatalf("%d Jobs after a second pass, want 1", n)
	}
}

func TestSuccessfulApplyIsBookedOnce(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	job := h.runningJob(jobs.KindCluster, "web")
	h.writeState(jobs.KindCluster, "web", 2)
	h.finish(job, jobs.OutcomeSucceeded, &jobs.RunnerResult{Changes: &jobs.Changes{Add: 2}})
	h.events()
	h.settle(tc)

	h.get(tc)
	var booked batchv1.Job
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(&job), &booked); err != nil {
		t.Fatal(err)
	}
	if booked.Annotations[jobs.AnnotationBookkept] != "true" || !strings.Contains(booked.Annotations[jobs.AnnotationResult], `"add":2`) {
		t.Errorf("Job annotations = %v", booked.Annotations)
	}
	if h.secret(jobs.RunSecretName(job.Name)) != nil {
		t.Error("the per-run Secret outlived bookkeeping")
	}
	if h.runLease(jobs.KindCluster, "web") != nil {
		t.Error("the run Lease was not given back")
	}
	if st := h.stateSecret(jobs.KindCluster, "web"); st.Annotations[state.InputsHashAnnotation] != h.inputsHash(tc) {
		t.Errorf("state inputs hash = %q", st.Annotations[state.InputsHashAnnotation])
	}
	if !conditions.IsTrue(tc.Status.Conditions, conditions.ApplyJobSucceeded) || !conditions.IsTrue(tc.Status.Conditions, conditions.Ready) {
		t.Errorf("conditions = %+v", tc.Status.Conditions)
	}
	if tc.Status.ActiveJob != nil || tc.Status.LastRun == nil || tc.Status.LastRun.Job != job.Name || !ptr.Deref(tc.Status.Initialization.Provisioned, false) {
		t.Errorf("status = %+v", tc.Status)
	}
	if ev := h.events(); countPrefix(ev, "Normal JobSucceeded") != 1 {
		t.Errorf("events = %v", ev)
	}
	// Converged: later passes start nothing and book nothing again.
	h.settle(tc)
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 1 {
		t.Fatalf("%d Jobs once converged, want 1", n)
	}
	if ev := h.events(); countPrefix(ev, "Normal JobSucceeded") != 0 {
		t.Errorf("booked twice: %v", ev)
	}
}

// lagging hides the object's Jobs from List, as a Job cache that has not seen a new Job yet.
type lagging struct {
	client.Client
}

func (l lagging) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if jl, ok := list.(*batchv1.JobList); ok {
		jl.Items = nil
		return nil
	}
	return l.Client.List(ctx, list, opts...)
}

// A crash after the Job was created and signed: the next pass adopts it. (One before it was
// signed leaves a Job that is replaced: TestAJobCountsOnlyWithTheControllersSignature.)
func TestRestartBetweenJobAndSecretAdoptsTheJob(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.reconcile(tc) // the finalizer
	// A crashed pass created and signed the Job, and did nothing after it.
	h.get(tc)
	name, _ := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpApply, Attempt: 1, InputsHash: h.inputsHash(tc)})
	crashed := jobspec.Build(jobspec.Params{
		Kind: jobs.KindCluster, Namespace: h.ns, ObjectName: "web", Name: name, Op: jobs.OpApply, Attempt: 1,
		Owner:  *metav1.NewControllerRef(tc, infrav1.GroupVersion.WithKind("TerraformCluster")),
		Source: tc.Spec.Source, RunnerImage: runnerImage, StateSuffix: "x",
	})
	if err := h.c.Create(h.ctx, crashed); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(crashed.DeepCopy())
	metav1.SetMetaDataAnnotation(&crashed.ObjectMeta, runkey.AnnotationSignature, h.runKey.SignJob(crashed))
	if err := h.c.Patch(h.ctx, crashed, patch); err != nil {
		t.Fatal(err)
	}
	// The restarted controller's cache has not seen it yet.
	h.r.Client = lagging{h.c}
	h.reconcile(tc)

	all := h.jobs(jobs.KindCluster, "web")
	if len(all) != 1 || all[0].UID != crashed.UID {
		t.Fatalf("Jobs = %d, want the crashed pass's Job adopted and no second one", len(all))
	}
	runSecret := h.secret(jobs.RunSecretName(name))
	if runSecret == nil || metav1.GetControllerOf(runSecret).UID != crashed.UID {
		t.Fatal("the adopted Job got no per-run Secret")
	}
	h.get(tc)
	if tc.Status.ActiveJob == nil || tc.Status.ActiveJob.Name != name {
		t.Fatalf("status.activeJob = %+v", tc.Status.ActiveJob)
	}
}

func TestStaleRunSecretOfAPrunedJobIsReplaced(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.reconcile(tc)
	name, _ := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpApply, Attempt: 1, InputsHash: h.inputsHash(tc)})
	// A per-run Secret left by an earlier Job of the same name, whose collection is pending.
	stale := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: jobs.RunSecretName(name), Namespace: h.ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: name, UID: "0000-gone", Controller: ptr.To(true)}},
	}, Data: map[string][]byte{"main.tf.json": []byte("old")}}
	if err := h.c.Create(h.ctx, stale); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	job := h.runningJob(jobs.KindCluster, "web")
	got := h.secret(jobs.RunSecretName(name))
	if got == nil || got.UID == stale.UID || metav1.GetControllerOf(got).UID != job.UID {
		t.Fatalf("per-run Secret = %+v, want a new one owned by Job %s", got, job.UID)
	}
}

func TestRejectedCreateGivesTheLeaseBack(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	// The API server rejects a pod template whose memory request exceeds its limit.
	tc := h.cluster("web", func(c *infrav1.TerraformCluster) {
		c.Spec.Jobs.Resources = &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		}
	})
	h.reconcile(tc)
	if _, err := h.r.Reconcile(h.ctx, requestFor(tc)); err == nil || !apierrors.IsInvalid(err) {
		t.Fatalf("reconcile error = %v, want the Invalid create", err)
	}
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 0 {
		t.Fatalf("%d Jobs", n)
	}
	if l := h.runLease(jobs.KindCluster, "web"); l != nil {
		t.Fatalf("the run Lease %v was kept after a rejected create", l.Spec.HolderIdentity)
	}
}

func TestFailedApplyBacksOffOneTwoThenTenMinutes(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		job := h.runningJob(jobs.KindCluster, "web")
		if got := jobs.AttemptOf(&job); got != int32(i+1) {
			t.Fatalf("attempt %d, want %d", got, i+1)
		}
		h.finish(job, jobs.OutcomeFailed, &jobs.RunnerResult{Error: &jobs.RunnerError{Kind: jobs.ErrorKindStep, Step: "apply", Tail: "Error: boom"}})
		res := h.settle(tc)
		if res.RequeueAfter != want {
			t.Fatalf("after failure %d: requeue %v, want a %v backoff", i+1, res.RequeueAfter, want)
		}
		h.get(tc)
		if c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded); c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonApplyFailed || !strings.Contains(c.Message, "Error: boom") {
			t.Fatalf("ApplyJobSucceeded = %+v", c)
		}
		h.clock.SetTime(h.clock.Now().Add(want - time.Second))
		h.settle(tc)
		if n := len(h.jobs(jobs.KindCluster, "web")); n != min(i+1, 3) {
			t.Fatalf("a Job started inside the backoff window (%d Jobs)", n)
		}
		h.clock.SetTime(h.clock.Now().Add(time.Second))
		h.settle(tc)
	}
	// Pruning kept three failures: a1 is gone, and the next attempt is a6, never a reused name.
	job := h.runningJob(jobs.KindCluster, "web")
	if got := jobs.AttemptOf(&job); got != 5 {
		t.Fatalf("attempt %d, want 5", got)
	}
}

func TestDeadlineCountsInterruptionDoesNot(t *testing.T) {
	for _, tc := range []struct {
		rule        string
		outcome     jobs.Outcome
		result      *jobs.RunnerResult
		wantBackoff bool
	}{
		{"a deadline kill counts toward backoff", jobs.OutcomeDeadlineExceeded, &jobs.RunnerResult{Error: &jobs.RunnerError{Kind: jobs.ErrorKindInterrupted}}, true},
		{"an interruption from outside is free", jobs.OutcomeFailed, &jobs.RunnerResult{Error: &jobs.RunnerError{Kind: jobs.ErrorKindInterrupted}}, false},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			obj := h.cluster("web")
			h.settle(obj)
			h.finish(h.runningJob(jobs.KindCluster, "web"), tc.outcome, tc.result)
			h.settle(obj)
			h.settle(obj)
			running := 0
			for _, j := range h.jobs(jobs.KindCluster, "web") {
				if !jobs.OutcomeOf(&j).Finished() {
					running++
				}
			}
			if gotBackoff := running == 0; gotBackoff != tc.wantBackoff {
				t.Fatalf("backing off = %v, want %v", gotBackoff, tc.wantBackoff)
			}
		})
	}
}

func TestPruningKeepsTheNewestSuccess(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web", func(c *infrav1.TerraformCluster) {
		c.Spec.Jobs.FailedJobsHistoryLimit = ptr.To[int32](1)
		c.Spec.Jobs.SuccessfulJobsHistoryLimit = ptr.To[int32](0)
	})
	h.settle(tc)
	first := h.runningJob(jobs.KindCluster, "web")
	h.writeState(jobs.KindCluster, "web", 1)
	h.finish(first, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	// New inputs, then two failures.
	h.get(tc)
	tc.Spec.Variables.Raw = []byte(`{"region":"us"}`)
	if err := h.c.Update(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		h.settle(tc)
		h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeFailed, nil)
		h.settle(tc)
		h.clock.SetTime(h.clock.Now().Add(10 * time.Minute))
	}
	names := map[string]bool{}
	for _, j := range h.jobs(jobs.KindCluster, "web") {
		if j.DeletionTimestamp == nil {
			names[j.Name] = true
		}
	}
	if !names[first.Name] {
		t.Errorf("the newest success %s was pruned with a successful limit of 0: %v", first.Name, names)
	}
	if len(names) != 2 {
		t.Errorf("retained %v, want the newest success and the newest failure", names)
	}
}

func TestStuckJobIsDeleted(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	job := h.runningJob(jobs.KindCluster, "web")
	// Its per-run Secret is gone and no pod ever started.
	if err := h.c.Delete(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: jobs.RunSecretName(job.Name)}}); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 1 {
		t.Fatal("a young Job was deleted")
	}
	h.clock.SetTime(job.CreationTimestamp.Add(workspace.StuckAge + time.Second))
	h.reconcile(tc)
	var gone batchv1.Job
	err := h.c.Get(h.ctx, client.ObjectKeyFromObject(&job), &gone)
	if err == nil && gone.DeletionTimestamp == nil {
		t.Fatal("the stuck Job was not deleted")
	}
	if ev := h.events(); countPrefix(ev, "Warning StuckJobDeleted") != 1 {
		t.Errorf("events = %v", ev)
	}
}

func TestPausedObjectStartsNothing(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web", func(c *infrav1.TerraformCluster) {
		c.Annotations = map[string]string{workspace.PausedAnnotation: "true"}
	})
	h.settle(tc)
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 0 {
		t.Fatalf("%d Jobs on a paused object", n)
	}
}

func TestDeletionDestroysThenCleansUp(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	h.writeState(jobs.KindCluster, "web", 1)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, nil)
	h.settle(tc)

	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	destroy := h.runningJob(jobs.KindCluster, "web")
	if jobs.OpOf(&destroy) != jobs.OpDestroy {
		t.Fatalf("op %s, want destroy", jobs.OpOf(&destroy))
	}
	h.writeState(jobs.KindCluster, "web", 0)
	h.finish(destroy, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.settle(tc)

	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(tc), tc); !apierrors.IsNotFound(err) {
		t.Fatalf("the object is still there (%v): finalizers %v", err, tc.Finalizers)
	}
	if h.stateSecret(jobs.KindCluster, "web") != nil || h.secret(jobs.InputsSecretName(jobs.KindCluster, "web")) != nil || h.runLease(jobs.KindCluster, "web") != nil {
		t.Fatal("cleanup left the state, the durable inputs or the run Lease")
	}
}

// A pass that starts from an object older than the server's (a lagging cache) writes nothing:
// its status patch would replace the newer conditions with the older ones.
func TestAPassFromAStaleObjectWritesNothingOverANewerOne(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	h.get(tc)
	stale := tc.DeepCopy()
	h.writeState(jobs.KindCluster, "web", 1)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, &jobs.RunnerResult{Changes: &jobs.Changes{Add: 1}})
	h.settle(tc)
	h.get(tc)
	fresh := tc.DeepCopy()
	if !conditions.IsTrue(fresh.Status.Conditions, conditions.OutputsValid) {
		t.Fatalf("conditions after the apply = %+v", fresh.Status.Conditions)
	}

	r := h.laggingReconciler(stale)
	res, err := r.Reconcile(h.ctx, requestFor(tc))
	if err != nil || !workspace.AgainAtOnce(res) {
		t.Fatalf("the stale pass = %+v, %v; want a quiet pass at once", res, err)
	}
	h.get(tc)
	if tc.ResourceVersion != fresh.ResourceVersion {
		t.Fatalf("the stale pass wrote the object: %+v", tc.Status.Conditions)
	}
}

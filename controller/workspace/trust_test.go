package workspace_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
	"github.com/captf/captf/test/testenv"
)

// forgedJob creates a Job that carries the object's run labels but no controller reference to
// it, as anyone who may create Jobs in the namespace can; finished with outcome unless Running.
func (h *harness) forgedJob(name string, op jobs.Op, attempt int32, outcome jobs.Outcome) batchv1.Job {
	h.t.Helper()
	job := batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Labels: jobs.Labels(jobs.KindCluster, "web", "web", op, attempt)},
		Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "x", Image: image}},
		}}},
	}
	if err := h.c.Create(h.ctx, &job); err != nil {
		h.t.Fatalf("creating the forged Job: %v", err)
	}
	if outcome != jobs.OutcomeRunning {
		now := metav1.NewTime(h.clock.Now())
		job.Status.StartTime = &now
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
		}
		if err := h.c.Status().Update(h.ctx, &job); err != nil {
			h.t.Fatalf("failing the forged Job: %v", err)
		}
	}
	return job
}

func TestOnlyJobsTheObjectControlsCount(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(nil)
	// A failed apply with a forged attempt label: counted, it would start a retry (LastApplyFailed)
	// named after an attempt that can never be created.
	forged := h.forgedJob("forged-apply", jobs.OpApply, 2147483647, jobs.OutcomeFailed)
	h.events()
	h.settle(tc)

	for _, j := range h.jobs(jobs.KindCluster, "web") {
		if j.Name != forged.Name && !jobs.OutcomeOf(&j).Finished() {
			t.Fatalf("the forged failure started Job %s", j.Name)
		}
	}
	var cur batchv1.Job
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(&forged), &cur); err != nil {
		t.Fatal(err)
	}
	if _, booked := cur.Annotations[jobs.AnnotationBookkept]; booked {
		t.Error("the forged Job was booked")
	}
	h.get(tc)
	if !conditions.IsTrue(tc.Status.Conditions, conditions.ApplyJobSucceeded) || tc.Status.LastRun.Job == forged.Name {
		t.Errorf("the forged Job changed the status: %+v", tc.Status)
	}
	if ev := h.events(); countPrefix(ev, "Warning JobFailed") != 0 {
		t.Errorf("events = %v", ev)
	}
}

// TestAJobCountsOnlyWithTheControllersSignature: the controller reference, the labels and the
// annotations of a run can all be copied or rewritten by whoever may create or patch Jobs; only
// the signature, bound to the Job's UID, tells the controller's Jobs from others.
func TestAJobCountsOnlyWithTheControllersSignature(t *testing.T) {
	t.Run("a Job that copies a run's controller reference and signature is no run", func(t *testing.T) {
		h := newHarness(t, jobs.KindCluster)
		tc := h.provisioned(nil)
		runs := h.jobs(jobs.KindCluster, "web")
		if len(runs) == 0 || runs[0].Annotations[runkey.AnnotationSignature] == "" {
			t.Fatalf("the controller's Job carries no signature: %+v", runs)
		}
		run := runs[0]
		forged := batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "forged-apply", Namespace: h.ns, Labels: jobs.Labels(jobs.KindCluster, "web", "web", jobs.OpApply, 2),
				Annotations:     map[string]string{runkey.AnnotationSignature: run.Annotations[runkey.AnnotationSignature], jobs.AnnotationInputsHash: run.Annotations[jobs.AnnotationInputsHash]},
				OwnerReferences: run.OwnerReferences},
			Spec: batchv1.JobSpec{Suspend: ptr.To(true), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "x", Image: image}},
			}}},
		}
		if err := h.c.Create(h.ctx, &forged); err != nil {
			t.Fatal(err)
		}
		h.finish(forged, jobs.OutcomeFailed, nil)
		h.events()
		h.settle(tc)

		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(&forged), &forged); err != nil {
			t.Fatal(err)
		}
		if _, booked := forged.Annotations[jobs.AnnotationBookkept]; booked {
			t.Error("the forged Job was booked")
		}
		h.get(tc)
		if !conditions.IsTrue(tc.Status.Conditions, conditions.ApplyJobSucceeded) || tc.Status.LastRun.Job == forged.Name {
			t.Errorf("the forged Job changed the status: %+v", tc.Status)
		}
		for _, j := range h.jobs(jobs.KindCluster, "web") {
			if j.Name != forged.Name && !jobs.OutcomeOf(&j).Finished() {
				t.Fatalf("the forged failure started Job %s", j.Name)
			}
		}
		if ev := h.events(); countPrefix(ev, "Warning JobFailed") != 0 {
			t.Errorf("events = %v", ev)
		}
	})
	t.Run("a run whose annotations were rewritten is no run", func(t *testing.T) {
		h := newHarness(t, jobs.KindCluster)
		tc := h.cluster("web")
		h.settle(tc)
		job := h.runningJob(jobs.KindCluster, "web")
		patch := client.MergeFrom(job.DeepCopy())
		job.Annotations[jobs.AnnotationInputsHash] = "h1:rewritten"
		if err := h.c.Patch(h.ctx, &job, patch); err != nil {
			t.Fatal(err)
		}
		h.finish(job, jobs.OutcomeFailed, nil)
		h.events()
		h.settle(tc)

		if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(&job), &job); err != nil {
			t.Fatal(err)
		}
		if _, booked := job.Annotations[jobs.AnnotationBookkept]; booked {
			t.Error("the rewritten Job was booked")
		}
		h.get(tc)
		c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded)
		if c == nil || c.Reason != conditions.ReasonJobNameTaken {
			t.Fatalf("ApplyJobSucceeded = %+v, want %s: the rewritten Job holds the apply's name", c, conditions.ReasonJobNameTaken)
		}
	})
	t.Run("an unsigned Job of the decided name is replaced by a signed one", func(t *testing.T) {
		h := newHarness(t, jobs.KindCluster)
		tc := h.cluster("web")
		h.settle(tc)
		job := h.runningJob(jobs.KindCluster, "web")
		// As if the controller stopped between creating the Job and signing it.
		patch := client.MergeFrom(job.DeepCopy())
		delete(job.Annotations, runkey.AnnotationSignature)
		if err := h.c.Patch(h.ctx, &job, patch); err != nil {
			t.Fatal(err)
		}
		h.settle(tc)
		again := h.runningJob(jobs.KindCluster, "web")
		if again.Name != job.Name || again.UID == job.UID || !h.runKey.JobSigned(&again) {
			t.Fatalf("Job %s (UID %s, signed %v), want a new signed Job %s", again.Name, again.UID, h.runKey.JobSigned(&again), job.Name)
		}
	})
	t.Run("a Job whose status is written before it is signed is signed, not replaced", func(t *testing.T) {
		h := newHarness(t, jobs.KindCluster)
		tc := h.cluster("web")
		// The Job controller writes a new Job's status at once, racing the signature.
		h.r.Client = h.afterJobCreate(func(ctx context.Context, c client.Client, job *batchv1.Job) error {
			written := job.DeepCopy()
			written.Status.StartTime = ptr.To(metav1.NewTime(h.clock.Now()))
			return c.Status().Update(ctx, written)
		})
		h.settle(tc)
		job := h.runningJob(jobs.KindCluster, "web")
		if !h.runKey.JobSigned(&job) || job.Status.StartTime == nil {
			t.Fatalf("Job %s signed %v, started %v: want the first Job signed", job.Name, h.runKey.JobSigned(&job), job.Status.StartTime)
		}
		if n := len(h.jobs(jobs.KindCluster, "web")); n != 1 {
			t.Fatalf("Jobs = %d, want the first one kept", n)
		}
	})
	t.Run("a Job whose labels are rewritten before it is signed is not signed", func(t *testing.T) {
		h := newHarness(t, jobs.KindCluster)
		tc := h.cluster("web")
		h.r.Client = h.afterJobCreate(func(ctx context.Context, c client.Client, job *batchv1.Job) error {
			rewritten := job.DeepCopy()
			rewritten.Labels[jobs.LabelAttempt] = "9"
			return c.Update(ctx, rewritten)
		})
		var err error
		for pass := 0; pass < 10 && err == nil; pass++ {
			var res ctrl.Result
			if res, err = h.r.Reconcile(h.ctx, requestFor(tc)); err == nil && !workspace.AgainAtOnce(res) {
				break
			}
		}
		if err == nil {
			t.Fatal("the passes signed a Job whose labels changed after its create")
		}
		for _, j := range h.jobs(jobs.KindCluster, "web") {
			if h.runKey.JobSigned(&j) {
				t.Fatalf("Job %s is signed with labels the controller did not write", j.Name)
			}
		}
	})
}

// afterJobCreate gives the reconciler a client that runs also after each Job it creates, as a
// concurrent writer would between the create and the signature.
func (h *harness) afterJobCreate(also func(context.Context, client.Client, *batchv1.Job) error) client.Client {
	h.t.Helper()
	direct, err := client.NewWithWatch(testenv.Get(h.t).Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		h.t.Fatal(err)
	}
	return interceptor.NewClient(direct, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			if job, ok := obj.(*batchv1.Job); ok {
				return also(ctx, c, job)
			}
			return nil
		},
	})
}

func TestAJobNameTakenBySomeoneElseIsNotAdopted(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	name, err := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpApply, Attempt: 1, InputsHash: h.inputsHash(tc)})
	if err != nil {
		t.Fatal(err)
	}
	forged := h.forgedJob(name, jobs.OpApply, 1, jobs.OutcomeRunning)
	h.settle(tc)

	h.get(tc)
	c := conditions.Get(tc.Status.Conditions, conditions.ApplyJobSucceeded)
	if c == nil || c.Reason != conditions.ReasonJobNameTaken || tc.Status.ActiveJob != nil {
		t.Fatalf("status = %+v, want ApplyJobSucceeded %s and no active Job", tc.Status, conditions.ReasonJobNameTaken)
	}
	if h.secret(jobs.RunSecretName(forged.Name)) != nil {
		t.Error("a per-run Secret was created for someone else's Job")
	}
	if l := h.runLease(jobs.KindCluster, "web"); l != nil && ptr.Deref(l.Spec.HolderIdentity, "") != "" {
		t.Errorf("the run Lease is still held by %q", ptr.Deref(l.Spec.HolderIdentity, ""))
	}
	if ev := h.events(); countPrefix(ev, "Warning JobNameTaken") != 1 {
		t.Errorf("events = %v", ev)
	}
}

// TestAResultIsReadOnlyFromAPodThatRunsTheJobsTemplate: a pod of the Job's name speaks for it
// only when the Job owns it and it runs the Job's template. The Job's UID is readable, so a pod
// created with its controller reference is the Job's pod to the Job controller as well.
func TestAResultIsReadOnlyFromAPodThatRunsTheJobsTemplate(t *testing.T) {
	for _, tc := range []struct {
		rule    string
		unowned bool
		mutate  func(spec *corev1.PodSpec)
	}{
		{"a pod the Job does not own", true, func(*corev1.PodSpec) {}},
		{"another image", false, func(s *corev1.PodSpec) { s.Containers[0].Image = "registry.example/attacker:v1" }},
		{"another command", false, func(s *corev1.PodSpec) { s.Containers[0].Command = []string{"/bin/true"} }},
		{"another environment", false, func(s *corev1.PodSpec) {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "TF_CLI_ARGS", Value: "-var=x"})
		}},
		{"a volume of its own over the module", false, func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "evil", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
			s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "evil", MountPath: "/captf/module"})
		}},
		{"another ServiceAccount", false, func(s *corev1.PodSpec) { s.ServiceAccountName = "default" }},
		{"a sidecar that writes the work directory", false, func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "sidecar", Image: "registry.example/x:v1",
				VolumeMounts: []corev1.VolumeMount{{Name: s.Containers[0].VolumeMounts[1].Name, MountPath: "/w"}}})
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			obj := h.cluster("web")
			h.settle(obj)
			job := h.runningJob(jobs.KindCluster, "web")
			forgedResult, err := jobs.EncodeRunnerResult(jobs.RunnerResult{Version: jobs.RunnerResultVersion, Op: jobs.OpApply,
				Error: &jobs.RunnerError{Kind: jobs.ErrorKindStep, Step: "apply", Tail: "FORGED"}})
			if err != nil {
				t.Fatal(err)
			}
			spec := job.Spec.Template.Spec.DeepCopy()
			tc.mutate(spec)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-zzzzz", Namespace: h.ns, Labels: map[string]string{batchv1.JobNameLabel: job.Name}},
				Spec:       *spec,
			}
			if !tc.unowned {
				pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(&job, batchv1.SchemeGroupVersion.WithKind("Job"))}
			}
			if err := h.c.Create(h.ctx, pod); err != nil {
				t.Fatal(err)
			}
			pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
				Name: jobspec.SourceContainer, Image: image, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: string(forgedResult)}},
			}}}
			if err := h.c.Status().Update(h.ctx, pod); err != nil {
				t.Fatal(err)
			}
			// The Job fails without a pod that runs its template having reported anything.
			now := metav1.NewTime(h.clock.Now())
			job.Status.StartTime, job.Status.Failed = &now, 1
			job.Status.Conditions = []batchv1.JobCondition{
				{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
				{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: now},
			}
			if err := h.c.Status().Update(h.ctx, &job); err != nil {
				t.Fatal(err)
			}
			h.settle(obj)
			h.get(obj)
			if obj.Status.LastRun == nil || obj.Status.LastRun.Job != job.Name {
				t.Fatalf("the Job was not booked: %+v", obj.Status.LastRun)
			}
			if e := obj.Status.LastRun.Error; e != nil && strings.Contains(e.Summary, "FORGED") {
				t.Fatalf("the result came from a pod that does not speak for the Job: %+v", e)
			}
		})
	}
}

func TestMissingStateAfterASuccessfulApplyIsLost(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(nil)
	durable := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))
	if durable == nil || durable.Annotations[jobs.AnnotationApplied] != "true" {
		t.Fatalf("the durable inputs carry no %s after a successful apply: %v", jobs.AnnotationApplied, durable)
	}
	if err := h.c.Delete(h.ctx, h.stateSecret(jobs.KindCluster, "web")); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.settle(tc)
	h.settle(tc)

	if n := len(h.jobs(jobs.KindCluster, "web")); n != 1 {
		t.Fatalf("%d Jobs: a lost state must not be applied again", n)
	}
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.StateReadable); c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonStateLost {
		t.Fatalf("StateReadable = %+v, want False/%s", c, conditions.ReasonStateLost)
	}
	if ev := h.events(); countPrefix(ev, "Warning StateLost") != 1 {
		t.Errorf("events = %v, want one StateLost", ev)
	}

	// Deletion is held: no destroy, the finalizer stays.
	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	h.get(tc)
	if len(tc.Finalizers) == 0 {
		t.Fatal("the deletion of an object with a lost state was not held")
	}
	for _, j := range h.jobs(jobs.KindCluster, "web") {
		if jobs.OpOf(&j) == jobs.OpDestroy {
			t.Fatalf("a destroy started on a lost state: %s", j.Name)
		}
	}
}

func TestTheAppliedMarkerGoesOnlyWithTheDurableSecret(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(nil)
	// Taken off by hand, it comes back: the state records an inputs hash, so it was applied.
	durable := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))
	delete(durable.Annotations, jobs.AnnotationApplied)
	if err := h.c.Update(h.ctx, durable); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	if d := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web")); d.Annotations[jobs.AnnotationApplied] != "true" {
		t.Fatalf("reading a state with an inputs hash did not mark the durable inputs: %v", d.Annotations)
	}
	// Deleting the Secret with the state starts over: no state is new state.
	if err := h.c.Delete(h.ctx, h.stateSecret(jobs.KindCluster, "web")); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Delete(h.ctx, h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	running := h.runningJob(jobs.KindCluster, "web")
	if jobs.OpOf(&running) != jobs.OpApply {
		t.Fatalf("op %s, want a new apply", jobs.OpOf(&running))
	}
}

func TestStuckJobDeletionForgetsTheJobFirst(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	job := h.runningJob(jobs.KindCluster, "web")
	if err := h.c.Delete(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: jobs.RunSecretName(job.Name)}}); err != nil {
		t.Fatal(err)
	}
	h.clock.SetTime(job.CreationTimestamp.Add(workspace.StuckAge + time.Second))

	// The pass dies right after deleting the Job.
	crashed := errors.New("crashed after the delete")
	crashing := *h.r
	crashing.Client = crashAfterJobDelete{Client: h.c, err: crashed}
	if _, err := crashing.Reconcile(h.ctx, requestFor(tc)); !errors.Is(err, crashed) {
		t.Fatalf("the pass did not reach the Job's deletion: %v", err)
	}
	h.get(tc)
	if tc.Status.ActiveJob != nil {
		t.Fatalf("status.activeJob still names %s after its deletion", tc.Status.ActiveJob.Name)
	}
	h.events()
	h.settle(tc)
	if d := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web")); d != nil && d.Annotations[jobs.AnnotationInterruptedApply] != "" {
		t.Fatalf("a stuck Job that never started was recorded as an interrupted apply: %v", d.Annotations)
	}
	if ev := h.events(); countPrefix(ev, "Warning JobInterrupted") != 0 {
		t.Errorf("events = %v", ev)
	}
}

// crashAfterJobDelete deletes a Job and then fails, as a process that dies right after.
type crashAfterJobDelete struct {
	client.Client
	err error
}

func (c crashAfterJobDelete) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.Client.Delete(ctx, obj, opts...); err != nil {
		return err
	}
	if _, ok := obj.(*batchv1.Job); ok {
		return c.err
	}
	return nil
}

func TestStuckJobIsDeletedWhilePaused(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	job := h.runningJob(jobs.KindCluster, "web")
	if err := h.c.Delete(h.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: jobs.RunSecretName(job.Name)}}); err != nil {
		t.Fatal(err)
	}
	h.get(tc)
	tc.Annotations = map[string]string{workspace.PausedAnnotation: "true"}
	if err := h.c.Update(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.clock.SetTime(job.CreationTimestamp.Add(workspace.StuckAge + time.Second))
	h.settle(tc)
	var gone batchv1.Job
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(&job), &gone); err == nil && gone.DeletionTimestamp == nil {
		t.Fatal("a stuck Job of a paused object was not deleted")
	}
	if n := len(h.jobs(jobs.KindCluster, "web")); n > 1 {
		t.Fatalf("a paused object started a Job (%d Jobs)", n)
	}
}

func TestAServiceAccountOverrideMustOptIn(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web", func(c *infrav1.TerraformCluster) { c.Spec.Jobs.ServiceAccountName = "deployer" })
	notOptedIn := func(step string) {
		t.Helper()
		h.settle(tc)
		if n := len(h.jobs(jobs.KindCluster, "web")); n != 0 {
			t.Fatalf("%s: %d Jobs started under a ServiceAccount that did not opt in", step, n)
		}
		h.get(tc)
		if c := conditions.Get(tc.Status.Conditions, conditions.RunnerRBACReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonServiceAccountNotOptedIn {
			t.Fatalf("%s: RunnerRBACReady = %+v", step, c)
		}
	}
	notOptedIn("missing")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: h.ns}}
	if err := h.c.Create(h.ctx, sa); err != nil {
		t.Fatal(err)
	}
	notOptedIn("unlabeled")
	sa.Labels = map[string]string{workspace.LabelRunner: "yes"}
	if err := h.c.Update(h.ctx, sa); err != nil {
		t.Fatal(err)
	}
	notOptedIn("labeled other than true")

	sa.Labels[workspace.LabelRunner] = "true"
	if err := h.c.Update(h.ctx, sa); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	job := h.runningJob(jobs.KindCluster, "web")
	if job.Spec.Template.Spec.ServiceAccountName != "deployer" {
		t.Fatalf("the Job runs under %q", job.Spec.Template.Spec.ServiceAccountName)
	}
	h.get(tc)
	if !conditions.IsTrue(tc.Status.Conditions, conditions.RunnerRBACReady) {
		t.Fatalf("RunnerRBACReady = %+v", conditions.Get(tc.Status.Conditions, conditions.RunnerRBACReady))
	}
}

// TestACLIConfigSecretMustOptIn: spec.jobs.cliConfigSecretRef is mounted only when the Secret
// exists, carries captf.io/cli-config=true and holds the key tofurc. Otherwise no Job starts and
// the op's condition and an event say why.
func TestACLIConfigSecretMustOptIn(t *testing.T) {
	optedIn := map[string]string{infrav1.CLIConfigLabel: "true"}
	for _, tc := range []struct {
		rule    string
		secret  *corev1.Secret // nil: there is none
		problem string         // "" when the Job starts
	}{
		{"a missing Secret starts no Job", nil, "does not exist"},
		{"a Secret without the label starts no Job",
			&corev1.Secret{Data: map[string][]byte{infrav1.CLIConfigKey: []byte("")}}, "label captf.io/cli-config=true"},
		{"a Secret labelled other than true starts no Job",
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{infrav1.CLIConfigLabel: "yes"}}, Data: map[string][]byte{infrav1.CLIConfigKey: []byte("")}}, "label captf.io/cli-config=true"},
		{"a Secret without the key tofurc starts no Job",
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: optedIn}, Data: map[string][]byte{"config": []byte("x")}}, "no key tofurc"},
		{"an opted-in Secret with the key is mounted",
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: optedIn}, Data: map[string][]byte{infrav1.CLIConfigKey: []byte("secret-token")}}, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			if tc.secret != nil {
				tc.secret.Name, tc.secret.Namespace = "registry", h.ns
				if err := h.c.Create(h.ctx, tc.secret); err != nil {
					t.Fatal(err)
				}
			}
			obj := h.cluster("web", func(c *infrav1.TerraformCluster) {
				c.Spec.Jobs.CLIConfigSecretRef = &infrav1.SourceReference{Name: "registry"}
			})
			h.settle(obj)
			h.get(obj)
			events := h.events()
			if tc.problem == "" {
				job := h.runningJob(jobs.KindCluster, "web")
				if !slices.Contains(job.Spec.Template.Spec.Containers[0].Command, "--cli-config="+jobspec.CLIConfigFile) {
					t.Errorf("the Job does not pass the CLI configuration: %q", job.Spec.Template.Spec.Containers[0].Command)
				}
				if n := countPrefix(events, "Warning CLIConfigNotFound"); n != 0 {
					t.Errorf("%d CLIConfigNotFound events: %q", n, events)
				}
				return
			}
			if n := len(h.jobs(jobs.KindCluster, "web")); n != 0 {
				t.Fatalf("%d Jobs started", n)
			}
			c := conditions.Get(obj.Status.Conditions, conditions.ApplyJobSucceeded)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonCLIConfigNotFound ||
				!strings.Contains(c.Message, "Secret registry") || !strings.Contains(c.Message, tc.problem) {
				t.Fatalf("ApplyJobSucceeded = %+v, want False/%s naming Secret registry and %q", c, conditions.ReasonCLIConfigNotFound, tc.problem)
			}
			if n := countPrefix(events, "Warning CLIConfigNotFound"); n != 1 {
				t.Errorf("%d CLIConfigNotFound events, want 1: %q", n, events)
			}
			if h.runLease(jobs.KindCluster, "web") != nil {
				t.Error("the run Lease was taken although no Job may start")
			}
		})
	}
}

// TestAnEnvSourceMustOptIn: a value of spec.jobs.env taken from a Secret or ConfigMap is used
// only when that object exists and carries captf.io/env=true; otherwise no Job starts and the
// op's condition and an event name the reference. Without the rule, whoever may patch the object
// reads any Secret of the namespace from the run.
func TestAnEnvSourceMustOptIn(t *testing.T) {
	optedIn := map[string]string{infrav1.EnvSourceLabel: "true"}
	fromSecret := corev1.EnvVar{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "source"}, Key: "token"}}}
	fromConfigMap := corev1.EnvVar{Name: "REGION", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "source"}, Key: "region"}}}
	optional := *fromSecret.DeepCopy()
	optional.ValueFrom.SecretKeyRef.Optional = ptr.To(true)
	for _, tc := range []struct {
		rule    string
		env     corev1.EnvVar
		source  client.Object // nil: there is none
		problem string        // "" when the Job starts
	}{
		{"a Secret without the label starts no Job", fromSecret,
			&corev1.Secret{Data: map[string][]byte{"token": []byte("s3cr3t")}}, "Secret source (spec.jobs.env[1].valueFrom) does not carry the label captf.io/env=true"},
		{"a Secret labelled other than true starts no Job", fromSecret,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{infrav1.EnvSourceLabel: "yes"}}}, "label captf.io/env=true"},
		{"a missing Secret starts no Job", fromSecret, nil, "Secret source (spec.jobs.env[1].valueFrom) does not exist"},
		{"a ConfigMap without the label starts no Job", fromConfigMap,
			&corev1.ConfigMap{Data: map[string]string{"region": "eu"}}, "ConfigMap source (spec.jobs.env[1].valueFrom) does not carry the label"},
		{"an opted-in Secret is read", fromSecret, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: optedIn}}, ""},
		{"an opted-in ConfigMap is read", fromConfigMap, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: optedIn}}, ""},
		{"a missing optional Secret is left to the kubelet", optional, nil, ""},
		{"an optional Secret without the label starts no Job", optional, &corev1.Secret{}, "does not carry the label"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			if tc.source != nil {
				tc.source.SetName("source")
				tc.source.SetNamespace(h.ns)
				if err := h.c.Create(h.ctx, tc.source); err != nil {
					t.Fatal(err)
				}
			}
			obj := h.cluster("web", func(c *infrav1.TerraformCluster) {
				c.Spec.Jobs.Env = []corev1.EnvVar{{Name: "PLAIN", Value: "x"}, tc.env}
			})
			h.settle(obj)
			h.get(obj)
			events := h.events()
			if tc.problem == "" {
				job := h.runningJob(jobs.KindCluster, "web")
				found := false
				for _, e := range job.Spec.Template.Spec.Containers[0].Env {
					found = found || e.Name == tc.env.Name
				}
				if !found {
					t.Errorf("the Job lacks %s", tc.env.Name)
				}
				if n := countPrefix(events, "Warning EnvSourceNotOptedIn"); n != 0 {
					t.Errorf("%d EnvSourceNotOptedIn events: %q", n, events)
				}
				return
			}
			if n := len(h.jobs(jobs.KindCluster, "web")); n != 0 {
				t.Fatalf("%d Jobs started", n)
			}
			c := conditions.Get(obj.Status.Conditions, conditions.ApplyJobSucceeded)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonEnvSourceNotOptedIn || !strings.Contains(c.Message, tc.problem) {
				t.Fatalf("ApplyJobSucceeded = %+v, want False/%s with %q", c, conditions.ReasonEnvSourceNotOptedIn, tc.problem)
			}
			if strings.Contains(c.Message, "s3cr3t") {
				t.Errorf("the condition quotes the Secret's value: %q", c.Message)
			}
			if n := countPrefix(events, "Warning EnvSourceNotOptedIn"); n != 1 {
				t.Errorf("%d EnvSourceNotOptedIn events, want 1: %q", n, events)
			}
			if h.runLease(jobs.KindCluster, "web") != nil {
				t.Error("the run Lease was taken although no Job may start")
			}
		})
	}
}

// TestTamperedDurableInputsRunNothing: the durable inputs decide what a destroy runs (files,
// image, digest, identity). Rewritten by anyone but the controller, or planted, they stop the
// object with a condition and an event instead of being run.
func TestTamperedDurableInputsRunNothing(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		tamper func(d *corev1.Secret)
	}{
		{"a rewritten image runs nothing", func(d *corev1.Secret) {
			d.Annotations[jobs.AnnotationImage] = "registry.example/attacker:v1"
		}},
		{"a rewritten pinned digest runs nothing", func(d *corev1.Secret) {
			d.Annotations[jobs.AnnotationImageDigest] = digestNew
		}},
		{"rewritten files run nothing", func(d *corev1.Secret) {
			d.Data[inputs.MainFile] = []byte(`{"resource":{}}`)
		}},
		{"a removed signature runs nothing", func(d *corev1.Secret) {
			delete(d.Annotations, runkey.AnnotationSignature)
		}},
		{"durable inputs not owned by the object run nothing", func(d *corev1.Secret) {
			d.OwnerReferences = nil
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			obj := h.provisioned(nil)
			durable := h.secret(jobs.InputsSecretName(jobs.KindCluster, "web"))
			if durable.Annotations[runkey.AnnotationSignature] == "" {
				t.Fatalf("the controller wrote unsigned durable inputs: %v", durable.Annotations)
			}
			tc.tamper(durable)
			if err := h.c.Update(h.ctx, durable); err != nil {
				t.Fatal(err)
			}
			h.deletedDestroysNothing(obj)
		})
	}
}

// deletedDestroysNothing deletes obj, whose durable inputs were tampered with, and checks that
// no destroy starts from them: the op's condition and one event say why.
func (h *harness) deletedDestroysNothing(obj *infrav1.TerraformCluster) {
	h.t.Helper()
	if err := h.c.Delete(h.ctx, obj); err != nil {
		h.t.Fatal(err)
	}
	h.events()
	h.settle(obj)
	for _, j := range h.jobs(jobs.KindCluster, obj.Name) {
		if jobs.OpOf(&j) == jobs.OpDestroy {
			h.t.Fatalf("a destroy started from tampered durable inputs: %s runs %q", j.Name, sourceImage(j))
		}
	}
	h.get(obj)
	c := conditions.Get(obj.Status.Conditions, conditions.ApplyJobSucceeded)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonDurableInputsTampered {
		h.t.Fatalf("ApplyJobSucceeded = %+v, want False/%s", c, conditions.ReasonDurableInputsTampered)
	}
	if ev := h.events(); countPrefix(ev, "Warning DurableInputsTampered") != 1 {
		h.t.Errorf("events = %v", ev)
	}
}

// TestAModuleImageMustBeAllowed: whoever may edit an object chooses its module image, and a
// plan Job runs it with the identity's credentials before any approval. The install's
// allow-list and the identity's decide which images run; any other gets no Job.
func TestAModuleImageMustBeAllowed(t *testing.T) {
	for _, tc := range []struct {
		rule           string
		install        []string // nil: every image
		identityImages []string // the identity's spec.allowedImages; nil with noIdentity
		noIdentity     bool
		manual         bool
		problem        string // "" when the Job starts
	}{
		{"an image the install does not allow starts no Job", []string{"registry.example/other"}, nil, true, false, "--allowed-images"},
		{"an image the identity does not allow starts no Job", nil, []string{"registry.example/other"}, false, false, "spec.allowedImages"},
		{"an identity that lists no images lends to no image", nil, []string{}, false, false, "spec.allowedImages"},
		{"an image the identity does not allow starts no plan, before any approval", nil, []string{"registry.example/other"}, false, true, "spec.allowedImages"},
		{"an image both allow starts its Job", []string{"registry.example/modules"}, []string{jobs.Repository(image)}, false, false, ""},
		{"without an identity, the install's list alone decides", []string{"registry.example/modules/"}, nil, true, false, ""},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			h.r.AllowedImages = tc.install
			var mutations []func(*infrav1.TerraformCluster)
			if !tc.noIdentity {
				id := h.identity(&infrav1.AllowedNamespaces{List: []string{h.ns}}, map[string]string{"token": "t"})
				id.Spec.AllowedImages = tc.identityImages
				if err := h.c.Update(h.ctx, id); err != nil {
					t.Fatal(err)
				}
				mutations = append(mutations, withIdentity(id.Name))
			}
			if tc.manual {
				h.writeState(jobs.KindCluster, "web", 1)
				mutations = append(mutations, func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
			}
			obj := h.cluster("web", mutations...)
			h.settle(obj)
			h.get(obj)
			events := h.events()
			if tc.problem == "" {
				h.runningJob(jobs.KindCluster, "web")
				if n := countPrefix(events, "Warning ImageNotAllowed"); n != 0 {
					t.Errorf("%d ImageNotAllowed events: %q", n, events)
				}
				return
			}
			if n := len(h.jobs(jobs.KindCluster, "web")); n != 0 {
				t.Fatalf("%d Jobs started", n)
			}
			c := conditions.Get(obj.Status.Conditions, conditions.ApplyJobSucceeded)
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonImageNotAllowed || !strings.Contains(c.Message, tc.problem) {
				t.Fatalf("ApplyJobSucceeded = %+v, want False/%s naming %q", c, conditions.ReasonImageNotAllowed, tc.problem)
			}
			if n := countPrefix(events, "Warning ImageNotAllowed"); n != 1 {
				t.Errorf("%d ImageNotAllowed events, want 1: %q", n, events)
			}
			if !tc.noIdentity && h.secret(workspace.MirrorName(obj.Spec.IdentityRef.Name)) != nil {
				t.Error("the identity's credentials were copied for an image it does not allow")
			}
		})
	}
}

func TestRestoreReadsOnlyBackupsTheControllerTook(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		tamper func(backup *corev1.Secret)
	}{
		{"a planted Secret of the backup's name is no backup", func(b *corev1.Secret) {
			b.Labels, b.OwnerReferences = nil, nil
		}},
		{"a backup not owned by the object is no backup", func(b *corev1.Secret) { b.OwnerReferences = nil }},
		{"a backup whose state no longer matches its digest is no backup", func(b *corev1.Secret) {
			b.Data[jobspec.BackupStateKey] = append(b.Data[jobspec.BackupStateKey], 0)
		}},
		{"a backup without a digest is no backup", func(b *corev1.Secret) { delete(b.Annotations, workspace.AnnotationBackupDigest) }},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			obj := h.provisioned(nil)
			h.writeSerial(jobs.KindCluster, "web", 1, 2)
			h.settle(obj)
			backup := h.backups(jobs.KindCluster, "web")["2"]
			if backup.Name == "" {
				t.Fatal("serial 2 was not backed up")
			}
			tc.tamper(&backup)
			if err := h.c.Update(h.ctx, &backup); err != nil {
				t.Fatal(err)
			}
			h.annotate(obj, jobs.AnnotationRestoreState, "2")
			h.settle(obj)
			h.noRunningJob(jobs.KindCluster, "web")
			h.get(obj)
			if c := conditions.Get(obj.Status.Conditions, conditions.RestoreJobSucceeded); c == nil || c.Reason != conditions.ReasonRestoreBackupNotFound {
				t.Fatalf("RestoreJobSucceeded = %+v, want %s", c, conditions.ReasonRestoreBackupNotFound)
			}
		})
	}
}

func TestAPlanKeySomeoneElseMadeIsNotUsed(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(func(c *infrav1.TerraformCluster) { c.Spec.ApplyPolicy = infrav1.ApplyPolicyManual })
	// A key its maker knows, with the labels anyone can copy but no owner reference.
	name := jobs.PlanKeySecretName(jobs.KindCluster, "web")
	known := []byte(strings.Repeat("k", 32))
	planted := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Labels: jobs.OwnerLabels(jobs.KindCluster, "web")},
		Data:       map[string][]byte{"key": known},
	}
	if err := h.c.Create(h.ctx, planted); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.setVariables(tc, `{"region":"us"}`)
	h.settle(tc)

	h.wantWaiting(tc, conditions.ReasonPlanKeyNotOwned, name, "delete it")
	if s := h.secret(name); s == nil || string(s.Data["key"]) != string(known) {
		t.Fatalf("the planted Secret was changed: %+v", s)
	}

	// Once it is gone, the controller makes its own key and the plan runs with it.
	if err := h.c.Delete(h.ctx, planted); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	plan := h.runningJob(jobs.KindCluster, "web")
	if jobs.OpOf(&plan) != jobs.OpPlan || !mountsPlanKey(plan) {
		t.Fatalf("Job %s op %s, plan key mounted %v; want a plan with the key", plan.Name, jobs.OpOf(&plan), mountsPlanKey(plan))
	}
	key := h.secret(name)
	if key == nil || len(key.Data["key"]) != 32 || string(key.Data["key"]) == string(known) || len(key.OwnerReferences) != 1 || key.OwnerReferences[0].UID != tc.UID {
		t.Fatalf("plan key Secret = %+v, want the controller's own", key)
	}
}

// TestWhatAControllerThatDidNotSignLeftIsSignedOnce: Jobs and durable inputs written before the
// run key existed are signed when the key is made, and only then; one stripped of its signature
// later is not signed again on the strength of its age, and is not trusted.
func TestWhatAControllerThatDidNotSignLeftIsSignedOnce(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	h.r.RunKey = nil // a controller that did not sign
	tc := h.provisioned(nil)
	durableName := jobs.InputsSecretName(jobs.KindCluster, "web")
	legacy := h.jobs(jobs.KindCluster, "web")
	if len(legacy) != 1 || legacy[0].Annotations[runkey.AnnotationSignature] != "" || h.secret(durableName).Annotations[runkey.AnnotationSignature] != "" {
		t.Fatalf("the unsigning controller left %d Jobs, or signed something", len(legacy))
	}

	key, err := controller.LoadRunKey(h.ctx, h.c, h.ns, h.ns)
	if err != nil {
		t.Fatal(err)
	}
	h.r.RunKey, h.runKey = &key, &key
	apply := h.jobs(jobs.KindCluster, "web")[0]
	if !key.JobSigned(&apply) || !runkey.ResultIntact(&apply) {
		t.Fatalf("the apply Job left unsigned was not signed with its result's digest: %v", apply.Annotations)
	}
	durable := h.secret(durableName)
	if durable.Annotations[runkey.AnnotationSignature] == "" {
		t.Fatal("the durable inputs left unsigned were not signed")
	}

	// Someone who may update Jobs and Secrets strips both signatures and rewrites the inputs.
	patch := client.MergeFrom(apply.DeepCopy())
	delete(apply.Annotations, runkey.AnnotationSignature)
	apply.Annotations[jobs.AnnotationInputsHash] = "h1:rewritten"
	if err := h.c.Patch(h.ctx, &apply, patch); err != nil {
		t.Fatal(err)
	}
	delete(durable.Annotations, runkey.AnnotationSignature)
	durable.Annotations[jobs.AnnotationImage] = "registry.example/attacker:v1"
	if err := h.c.Update(h.ctx, durable); err != nil {
		t.Fatal(err)
	}
	// The controller restarts: the key is loaded again and signs nothing.
	again, err := controller.LoadRunKey(h.ctx, h.c, h.ns, h.ns)
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Bytes()) != string(key.Bytes()) {
		t.Fatal("a restart made another key")
	}
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(&apply), &apply); err != nil {
		t.Fatal(err)
	}
	if _, signed := apply.Annotations[runkey.AnnotationSignature]; signed || h.secret(durableName).Annotations[runkey.AnnotationSignature] != "" {
		t.Fatal("a restart signed what was stripped of its signature")
	}

	h.events()
	h.deletedDestroysNothing(tc)
}

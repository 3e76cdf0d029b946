package workspace_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/testenv"
)

func wantCond(t *testing.T, obj infrav1.Workspace, conditionType string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := conditions.Get(obj.WorkspaceStatus().Conditions, conditionType)
	if c == nil || c.Status != status || c.Reason != reason {
		t.Fatalf("%s = %+v, want %s/%s", conditionType, c, status, reason)
	}
}

// appliedCluster creates a cluster and lets its first apply succeed with a state of one resource.
func (h *harness) appliedCluster(name string) *infrav1.TerraformCluster {
	h.t.Helper()
	tc := h.cluster(name)
	h.settle(tc)
	h.writeState(jobs.KindCluster, name, 1)
	h.finish(h.runningJob(jobs.KindCluster, name), jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	return tc
}

// unannotate removes an annotation from obj.
func (h *harness) unannotate(obj client.Object, key string) {
	h.t.Helper()
	h.get(obj)
	a := obj.GetAnnotations()
	delete(a, key)
	obj.SetAnnotations(a)
	if err := h.c.Update(h.ctx, obj); err != nil {
		h.t.Fatal(err)
	}
}

func TestPauseIsReportedAndEndsWithAResume(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	paused := "true"
	tc := h.cluster("web", func(c *infrav1.TerraformCluster) {
		c.Annotations = map[string]string{workspace.PausedAnnotation: paused}
	})
	h.settle(tc)
	h.get(tc)
	wantCond(t, tc, conditions.Paused, metav1.ConditionTrue, conditions.ReasonPaused)
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 0 {
		t.Fatalf("%d Jobs on a paused object", n)
	}
	if ev := h.events(); countPrefix(ev, "Normal Paused") != 1 {
		t.Fatalf("events = %v", ev)
	}

	h.unannotate(tc, workspace.PausedAnnotation)
	h.settle(tc)
	h.get(tc)
	wantCond(t, tc, conditions.Paused, metav1.ConditionFalse, conditions.ReasonNotPaused)
	if ev := h.events(); countPrefix(ev, "Normal Resumed") != 1 {
		t.Fatalf("events = %v", ev)
	}
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 1 {
		t.Fatalf("%d Jobs after the pause ended, want the first apply", n)
	}
}

func TestAPauseTheCacheHasNotSeenStopsTheRun(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	var cluster clusterv1.Cluster
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: tc.Namespace, Name: "web"}, &cluster); err != nil {
		t.Fatal(err)
	}
	stale := cluster.DeepCopy()
	cluster.Spec.Paused = ptr.To(true)
	if err := h.c.Update(h.ctx, &cluster); err != nil {
		t.Fatal(err)
	}
	// The pass's cached reads still see the Cluster as it was before clusterctl paused it.
	r := h.laggingReconciler(stale)
	for range 3 {
		if _, err := r.Reconcile(h.ctx, requestFor(tc)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 0 {
		t.Fatalf("%d Jobs started after the Cluster was paused", n)
	}
	h.get(tc)
	wantCond(t, tc, conditions.Paused, metav1.ConditionTrue, conditions.ReasonPaused)
}

func TestAPassThatStartsNothingReadsItsClusterFromTheCache(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.appliedCluster("web")
	var liveClusterReads atomic.Int32
	direct, err := client.NewWithWatch(testenv.Get(t).Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	live := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*clusterv1.Cluster); ok {
				liveClusterReads.Add(1)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	// Client plays the manager's cache here; APIReader is the API server.
	r := workspace.WithStateMemo(workspace.New(workspace.Reconciler{Client: h.c, APIReader: live, Metadata: h.c, Recorder: h.recorder, Clock: h.clock, Metrics: h.r.Metrics, RunnerImage: runnerImage}, infrav1.ClusterKind))
	for range 2 { // the first pass remembers the state
		if _, err := r.Reconcile(h.ctx, requestFor(tc)); err != nil {
			t.Fatal(err)
		}
	}
	liveClusterReads.Store(0)
	if _, err := r.Reconcile(h.ctx, requestFor(tc)); err != nil {
		t.Fatal(err)
	}
	if n := liveClusterReads.Load(); n != 0 {
		t.Fatalf("a converged pass read its Cluster live %d times", n)
	}

	h.get(tc)
	tc.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`{"region":"us"}`)}
	if err := h.c.Update(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(h.ctx, requestFor(tc)); err != nil {
		t.Fatal(err)
	}
	if job := h.runningJob(jobs.KindCluster, "web"); jobs.OpOf(&job) != jobs.OpApply {
		t.Fatalf("op %s, want an apply of the new inputs", jobs.OpOf(&job))
	}
	if liveClusterReads.Load() == 0 {
		t.Fatal("a Job started from a Cluster read only from the cache")
	}
}

func TestBlockMoveIsSetWhileAJobMayRun(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	h.get(tc)
	if tc.Annotations[workspace.BlockMoveAnnotation] != "true" {
		t.Fatalf("a Job runs and the object has annotations %v", tc.Annotations)
	}
	h.writeState(jobs.KindCluster, "web", 1)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.get(tc)
	if _, ok := tc.Annotations[workspace.BlockMoveAnnotation]; ok {
		t.Fatalf("no Job runs and the object still blocks a move: %v", tc.Annotations)
	}
}

func TestAPausedObjectLetsAMoveGoOnceItsJobEnded(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	job := h.runningJob(jobs.KindCluster, "web")
	paused := "true"
	h.annotate(tc, workspace.PausedAnnotation, paused) // clusterctl move pauses first
	h.settle(tc)
	h.get(tc)
	if tc.Annotations[workspace.BlockMoveAnnotation] != "true" {
		t.Fatal("the move was let go while a Job runs")
	}
	h.writeState(jobs.KindCluster, "web", 1)
	h.finish(job, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.get(tc)
	if _, ok := tc.Annotations[workspace.BlockMoveAnnotation]; ok {
		t.Fatal("a paused object without a running Job still blocks the move")
	}
}

func TestAbandonedInfrastructureIsLetGoWithoutADestroy(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.appliedCluster("web")

	other := "not-the-uid"
	h.annotate(tc, workspace.AbandonAnnotation, other)
	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	if job := h.runningJob(jobs.KindCluster, "web"); jobs.OpOf(&job) != jobs.OpDestroy {
		t.Fatalf("an annotation naming another UID is ignored: op %s, want destroy", jobs.OpOf(&job))
	}

	h2 := newHarness(t, jobs.KindCluster)
	tc2 := h2.appliedCluster("web")
	h2.get(tc2)
	uid := string(tc2.UID)
	h2.annotate(tc2, workspace.AbandonAnnotation, uid)
	if err := h2.c.Delete(h2.ctx, tc2); err != nil {
		t.Fatal(err)
	}
	h2.events()
	h2.settle(tc2)
	if err := h2.c.Get(h2.ctx, client.ObjectKeyFromObject(tc2), tc2); !apierrors.IsNotFound(err) {
		t.Fatalf("the abandoned object is still there (%v): finalizers %v", err, tc2.Finalizers)
	}
	for _, j := range h2.jobs(jobs.KindCluster, "web") {
		if jobs.OpOf(&j) == jobs.OpDestroy {
			t.Fatalf("a destroy ran for abandoned infrastructure: %s", j.Name)
		}
	}
	if ev := h2.events(); countPrefix(ev, "Warning InfrastructureAbandoned") != 1 {
		t.Fatalf("events = %v", ev)
	}
}

func TestClusterDeletionWaitsForItsMachinesAndPools(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.appliedCluster("web")

	spec := infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: image}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{}`)}}
	labels := map[string]string{jobs.LabelClusterName: "web"}
	machine := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "web-m1", Namespace: h.ns, Labels: labels}, Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: spec}}
	pool := &infrav1.TerraformMachinePool{ObjectMeta: metav1.ObjectMeta{Name: "web-p1", Namespace: h.ns, Labels: labels}, Spec: infrav1.TerraformMachinePoolSpec{WorkspaceSpec: spec}}
	for _, obj := range []client.Object{machine, pool} {
		if err := h.c.Create(h.ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	h.get(tc)
	wantCond(t, tc, conditions.DeletionBlocked, metav1.ConditionTrue, conditions.ReasonDependentsExist)
	if msg := conditions.Get(tc.Status.Conditions, conditions.DeletionBlocked).Message; msg != "waiting for 1 TerraformMachine(s) (web-m1) and 1 TerraformMachinePool(s) (web-p1) to be deleted first" {
		t.Fatalf("message %q", msg)
	}
	if n := len(h.jobs(jobs.KindCluster, "web")); n != 1 {
		t.Fatalf("%d Jobs: a destroy started while machines remain", n)
	}

	for _, obj := range []client.Object{machine, pool} {
		if err := h.c.Delete(h.ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	h.settle(tc)
	h.get(tc)
	wantCond(t, tc, conditions.DeletionBlocked, metav1.ConditionFalse, conditions.ReasonNotBlocked)
	if job := h.runningJob(jobs.KindCluster, "web"); jobs.OpOf(&job) != jobs.OpDestroy {
		t.Fatalf("op %s once the dependents are gone, want destroy", jobs.OpOf(&job))
	}
}

func TestAnExternallyManagedObjectIsLeftAlone(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web", func(c *infrav1.TerraformCluster) {
		c.Annotations = map[string]string{clusterv1.ManagedByAnnotation: "someone-else"}
	})
	h.settle(tc)
	h.get(tc)
	if len(tc.Finalizers) != 0 || len(tc.Status.Conditions) != 0 || len(h.jobs(jobs.KindCluster, "web")) != 0 {
		t.Fatalf("captf wrote on an externally managed object: finalizers %v, conditions %v", tc.Finalizers, tc.Status.Conditions)
	}
}

func TestADeletedExternallyManagedObjectIsReleasedWithoutADestroy(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.appliedCluster("web")
	h.get(tc)
	if st := h.stateSecret(jobs.KindCluster, "web"); len(st.OwnerReferences) == 0 || st.OwnerReferences[0].UID != tc.UID {
		t.Fatalf("the state is not owned by the object before the release: %v", st.OwnerReferences)
	}

	h.annotate(tc, clusterv1.ManagedByAnnotation, "someone-else")
	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.events()
	h.settle(tc)
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(tc), tc); !apierrors.IsNotFound(err) {
		t.Fatalf("the object is still there (%v): finalizers %v", err, tc.Finalizers)
	}
	for _, j := range h.jobs(jobs.KindCluster, "web") {
		if jobs.OpOf(&j) == jobs.OpDestroy {
			t.Fatalf("a destroy ran for an externally managed object: %s", j.Name)
		}
	}
	st := h.stateSecret(jobs.KindCluster, "web")
	if st == nil {
		t.Fatal("the state was deleted")
	}
	for _, ref := range st.OwnerReferences {
		if ref.UID == tc.UID {
			t.Fatalf("the state still names the released object as its owner: %v", st.OwnerReferences)
		}
	}
	if ev := h.events(); countPrefix(ev, "Normal ExternallyManagedReleased") != 1 {
		t.Fatalf("events = %v", ev)
	}
}

// A pass that writes a machine's outputs also starts its refresh, which writes the block-move
// annotation: neither write of the object may lose the status fields the pass set before it.
func TestAMachinesOutputsSurviveTheWritesOfTheSamePass(t *testing.T) {
	h := newHarness(t, jobs.KindMachine)
	tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: h.ns},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: image}, Variables: &apiextensionsv1.JSON{Raw: []byte(`{}`)}}}}
	h.create(tm)
	h.settle(tm)
	h.writeState(jobs.KindMachine, "m1", 1)
	h.finish(h.runningJob(jobs.KindMachine, "m1"), jobs.OutcomeSucceeded, nil)
	h.settle(tm)
	h.get(tm)
	if tm.Spec.ProviderID != "test:///m-1" || len(tm.Status.Addresses) != 1 || tm.Status.Addresses[0].Address != "10.0.0.1" {
		t.Fatalf("provider ID %q, addresses %+v", tm.Spec.ProviderID, tm.Status.Addresses)
	}
	wantCond(t, tm, conditions.OutputsValid, metav1.ConditionTrue, conditions.ReasonOutputsValid)
	if job := h.runningJob(jobs.KindMachine, "m1"); jobs.OpOf(&job) != jobs.OpRefresh || tm.Annotations[workspace.BlockMoveAnnotation] != "true" {
		t.Fatalf("op %s, annotations %v: want the refresh after apply running behind block-move", jobs.OpOf(&job), tm.Annotations)
	}
}

// A foreground deletion would let the garbage collector take the state before the destroy: the
// pass removes its finalizer first, and the deletion then runs as any other.
func TestAForegroundDeletionIsConvertedBeforeTheDestroy(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.appliedCluster("web")
	foreground := metav1.DeletePropagationForeground
	if err := h.c.Delete(h.ctx, tc, &client.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
		t.Fatal(err)
	}
	h.get(tc)
	if !slices.Contains(tc.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("finalizers = %v, want foregroundDeletion set by the API server", tc.Finalizers)
	}
	h.settle(tc)
	h.get(tc)
	if slices.Contains(tc.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("finalizers = %v: foregroundDeletion stayed", tc.Finalizers)
	}
	if h.stateSecret(jobs.KindCluster, "web") == nil {
		t.Fatal("the state is gone before the destroy")
	}
	if countPrefix(h.events(), "Normal ForegroundDeletionConverted") != 1 {
		t.Error("no ForegroundDeletionConverted event")
	}
	if job := h.runningJob(jobs.KindCluster, "web"); jobs.OpOf(&job) != jobs.OpDestroy {
		t.Fatalf("running %s, want the destroy", jobs.OpOf(&job))
	}
}

// TestAMovedProvisionedMachineIsNotAppliedAgain: clusterctl move brings a machine without its
// status and without its Jobs, but with its state and durable inputs. Its changed inputs must not
// be applied: the first pass knows it is provisioned from the state before it decides.
func TestAMovedProvisionedMachineIsNotAppliedAgain(t *testing.T) {
	h := newHarness(t, jobs.KindMachine)
	h.configMapSource("sizes", optIn, map[string]string{"size": "small"})
	tm := &infrav1.TerraformMachine{ObjectMeta: metav1.ObjectMeta{Name: "m1", Namespace: h.ns},
		Spec: infrav1.TerraformMachineSpec{WorkspaceSpec: infrav1.WorkspaceSpec{Source: infrav1.SourceSpec{Image: image},
			VariablesFrom: []infrav1.VariablesSource{configMapRef("sizes", infrav1.VariablesFormatString)}}}}
	h.create(tm)
	h.settle(tm)
	h.writeState(jobs.KindMachine, "m1", 1)
	h.finish(h.runningJob(jobs.KindMachine, "m1"), jobs.OutcomeSucceeded, nil)
	h.settle(tm)
	h.get(tm)
	if !tm.Status.IsProvisioned() {
		t.Fatalf("the machine is not provisioned: %+v", tm.Status.Conditions)
	}

	// The move: the Jobs and the run Lease stay behind, the status is not carried, and the
	// inputs differ.
	for _, j := range h.jobs(jobs.KindMachine, "m1") {
		if err := h.c.Delete(h.ctx, &j, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatal(err)
		}
	}
	if l := h.runLease(jobs.KindMachine, "m1"); l != nil {
		if err := h.c.Delete(h.ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	tm.Status = infrav1.TerraformMachineStatus{}
	if err := h.c.Status().Update(h.ctx, tm); err != nil {
		t.Fatal(err)
	}
	h.setConfigMapValue("sizes", "size", "large")
	h.settle(tm)

	for _, j := range h.jobs(jobs.KindMachine, "m1") {
		if jobs.OpOf(&j) == jobs.OpApply {
			t.Fatalf("the moved machine was applied again: Job %s", j.Name)
		}
	}
	h.get(tm)
	if !tm.Status.IsProvisioned() {
		t.Fatalf("the moved machine is not provisioned: %+v", tm.Status.Conditions)
	}
}

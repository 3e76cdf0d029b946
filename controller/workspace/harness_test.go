package workspace_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/controller/metrics"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}))
}

const (
	image       = "registry.example/modules/net:v1"
	runnerImage = "registry.example/captf/manager:test"
)

var namespaces atomic.Int32

// harness drives one reconciler pass by pass against the real API server, with a fake clock.
// Reads go straight to the API server; a test that needs a lagging Job cache says so.
type harness struct {
	t        *testing.T
	ctx      context.Context
	c        client.Client
	ns       string
	clock    *clocktesting.FakePassiveClock
	recorder *events.FakeRecorder
	r        *workspace.Reconciler
	reg      *prometheus.Registry
	// tagDigest is the digest each tag resolves to now; a test re-pushes a tag by changing it.
	tagDigest map[string]string
	// guard is the approval policy's check, in force unless a test says otherwise.
	guard *approvalGuard
	// runKey is the key the reconciler signs with.
	runKey *runkey.Key
}

// approvalGuard stands in for the read of the approval policy: why says why it is not in force.
type approvalGuard struct{ why string }

func (g *approvalGuard) Unguarded(context.Context) (string, error) { return g.why, nil }

func newHarness(t *testing.T, kind jobs.Kind) *harness {
	t.Helper()
	env := testenv.Get(t)
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("wk-%d", namespaces.Add(1))
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{
		t: t, ctx: ctx, c: c, ns: ns, reg: reg, tagDigest: map[string]string{},
		clock:    clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second)),
		recorder: events.NewFakeRecorder(100),
		guard:    &approvalGuard{},
	}
	runKey, err := runkey.New()
	if err != nil {
		t.Fatal(err)
	}
	h.runKey = &runKey
	base := workspace.Reconciler{Client: c, APIReader: c, Recorder: h.recorder, Clock: h.clock, Metrics: m, RunnerImage: runnerImage, Approvals: h.guard, RunKey: h.runKey}
	switch kind {
	case jobs.KindMachine:
		h.r = workspace.New(base, infrav1.MachineKind)
	case jobs.KindMachinePool:
		h.r = workspace.New(base, infrav1.MachinePoolKind)
	default:
		h.r = workspace.New(base, infrav1.ClusterKind)
	}
	return h
}

func (h *harness) cluster(name string, mutate ...func(*infrav1.TerraformCluster)) *infrav1.TerraformCluster {
	h.t.Helper()
	tc := &infrav1.TerraformCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns, Labels: map[string]string{jobs.LabelClusterName: name}},
		Spec: infrav1.TerraformClusterSpec{WorkspaceSpec: infrav1.WorkspaceSpec{
			Source:    infrav1.SourceSpec{Image: image},
			Variables: &apiextensionsv1.JSON{Raw: []byte(`{"region":"eu"}`)},
		}},
	}
	for _, m := range mutate {
		m(tc)
	}
	h.create(tc)
	return tc
}

// create creates an object with the Cluster API owner Cluster API would give it.
func (h *harness) create(obj client.Object) {
	h.t.Helper()
	if err := capitest.Own(h.ctx, h.c, obj); err != nil {
		h.t.Fatal(err)
	}
	if err := h.c.Create(h.ctx, obj); err != nil {
		h.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// inputsHash is the hash of the inputs the object renders now, as the controller computes it.
func (h *harness) inputsHash(obj infrav1.Workspace) string {
	h.t.Helper()
	h.get(obj)
	f, err := h.r.GatherFacts(h.ctx, h.c, obj, nil, h.clock.Now())
	if err != nil || f.RenderErr != nil || f.Rendered.Hash == "" {
		h.t.Fatalf("rendering the inputs of %s: %v %v", obj.GetName(), err, f.RenderErr)
	}
	return f.Rendered.Hash
}

// reconcile runs one pass of the object.
func (h *harness) reconcile(obj client.Object) ctrl.Result {
	h.t.Helper()
	res, err := h.r.Reconcile(h.ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
	if err != nil {
		h.t.Fatalf("reconcile: %v", err)
	}
	return res
}

// settle runs passes while they ask to run again at once, as the work queue would.
func (h *harness) settle(obj client.Object) ctrl.Result {
	h.t.Helper()
	for i := 0; i < 10; i++ {
		res := h.reconcile(obj)
		if !workspace.AgainAtOnce(res) {
			return res
		}
	}
	h.t.Fatal("reconcile did not settle in 10 passes")
	return ctrl.Result{}
}

func (h *harness) get(obj client.Object) {
	h.t.Helper()
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		h.t.Fatalf("get %s: %v", obj.GetName(), err)
	}
}

func (h *harness) jobs(kind jobs.Kind, name string) []batchv1.Job {
	h.t.Helper()
	var list batchv1.JobList
	if err := h.c.List(h.ctx, &list, client.InNamespace(h.ns), client.MatchingLabels(jobs.OwnerLabels(kind, name))); err != nil {
		h.t.Fatal(err)
	}
	return list.Items
}

// onlyJob returns the one running Job of the object.
func (h *harness) runningJob(kind jobs.Kind, name string) batchv1.Job {
	h.t.Helper()
	var running []batchv1.Job
	for _, j := range h.jobs(kind, name) {
		if !jobs.OutcomeOf(&j).Finished() {
			running = append(running, j)
		}
	}
	if len(running) != 1 {
		h.t.Fatalf("%d running Jobs, want 1", len(running))
	}
	return running[0]
}

// finish ends a Job as the Job controller and the runner would: a pod whose source container
// terminated with the result as its termination message, and the Job's finish conditions.
func (h *harness) finish(job batchv1.Job, outcome jobs.Outcome, result *jobs.RunnerResult) {
	h.t.Helper()
	// The finish cannot precede the start the API server stamped.
	if h.clock.Now().Before(job.CreationTimestamp.Time) {
		h.clock.SetTime(job.CreationTimestamp.Time)
	}
	now := metav1.NewTime(h.clock.Now())
	exit := int32(0)
	if outcome != jobs.OutcomeSucceeded {
		exit = 1
	}
	message := ""
	if result != nil {
		result.Version = jobs.RunnerResultVersion
		result.Op = jobs.OpOf(&job)
		b, err := jobs.EncodeRunnerResult(*result)
		if err != nil {
			h.t.Fatal(err)
		}
		message = string(b)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-abcde", Namespace: h.ns, Labels: map[string]string{batchv1.JobNameLabel: job.Name},
			// As the Job controller creates it: the controller trusts only pods its Job owns.
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		// Its spec is its Job's template, as the Job controller makes it.
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := h.c.Create(h.ctx, pod); err != nil {
		h.t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "source", Image: image, ImageID: h.imageID(job),
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: message}},
	}}}
	if exit != 0 {
		pod.Status.Phase = corev1.PodFailed
	}
	if err := h.c.Status().Update(h.ctx, pod); err != nil {
		h.t.Fatal(err)
	}

	start := metav1.NewTime(job.CreationTimestamp.Time)
	job.Status.StartTime = &start
	cond := func(t batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: reason, LastTransitionTime: now, LastProbeTime: now}
	}
	switch outcome {
	case jobs.OutcomeSucceeded:
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached"), cond(batchv1.JobComplete, "CompletionsReached")}
	case jobs.OutcomeDeadlineExceeded:
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget, batchv1.JobReasonDeadlineExceeded), cond(batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded)}
	default:
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded), cond(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded)}
	}
	if err := h.c.Status().Update(h.ctx, &job); err != nil {
		h.t.Fatalf("finishing Job %s: %v", job.Name, err)
	}
}

// imageID is what a node reports for the Job's source container: the digest its reference
// names, or the digest the harness's registry has for its tag (h.tagDigest, else one derived from
// the reference).
func (h *harness) imageID(job batchv1.Job) string {
	var ref string
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == jobspec.SourceContainer {
			ref = c.Image
		}
	}
	if d := jobs.DigestOf(ref); d != "" {
		return ref
	}
	digest := h.tagDigest[ref]
	if digest == "none" {
		return "local://" + ref
	}
	if digest == "" {
		sum := sha256.Sum256([]byte(ref))
		digest = "sha256:" + hex.EncodeToString(sum[:])
	}
	return jobs.Repository(ref) + "@" + digest
}

// writeState writes a state as the kubernetes backend would after an apply.
func (h *harness) writeState(kind jobs.Kind, name string, resources int) {
	h.t.Helper()
	h.writeSerial(kind, name, resources, 1)
}

// contractOutputs are the module outputs the harness's states hold: those of every role, each
// meeting the contract, as a module that provisions cleanly returns them.
const contractOutputs = `{"health":{"state":"running","healthy":true,"message":null,"reasons":[]},` +
	`"control_plane_endpoint":{"host":"api.web.example","port":6443},"failure_domains":null,"exports":{"vpc":"vpc-1"},` +
	`"provider_id":"test:///m-1","addresses":[{"type":"InternalIP","address":"10.0.0.1"}],"failure_domain":null,"interruptible":false,` +
	`"provider_id_list":["test:///m-1"],"replicas":1,"instances":[{"provider_id":"test:///m-1"}]}`

// writeSerial writes a state of the given serial, with contractOutputs.
func (h *harness) writeSerial(kind jobs.Kind, name string, resources int, serial int64) {
	h.t.Helper()
	h.writeStateWith(kind, name, resources, serial, contractOutputs)
}

// writeStateWith writes a state of the given serial whose module returned outputs (a JSON
// object).
func (h *harness) writeStateWith(kind jobs.Kind, name string, resources int, serial int64, outputs string) {
	h.t.Helper()
	var res []string
	for i := 0; i < resources; i++ {
		res = append(res, fmt.Sprintf(`{"mode":"managed","type":"terraform_data","name":"r%d","instances":[{"attributes":{}}]}`, i))
	}
	doc := fmt.Sprintf(`{"version":4,"serial":%d,"lineage":"l","resources":[%s],"outputs":{"workspace":{"value":%s,"sensitive":true}}}`, serial, strings.Join(res, ","), outputs)
	data, err := state.Compress([]byte(doc))
	if err != nil {
		h.t.Fatal(err)
	}
	suffix := jobs.StateSecretSuffix(h.ns, kind, name)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: state.SecretName(suffix), Namespace: h.ns}}
	var existing corev1.Secret
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(secret), &existing); err == nil {
		existing.Data = map[string][]byte{"tfstate": data}
		if err := h.c.Update(h.ctx, &existing); err != nil {
			h.t.Fatal(err)
		}
		return
	}
	secret.Data = map[string][]byte{"tfstate": data}
	if err := h.c.Create(h.ctx, secret); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) stateSecret(kind jobs.Kind, name string) *corev1.Secret {
	var s corev1.Secret
	err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: state.SecretName(jobs.StateSecretSuffix(h.ns, kind, name))}, &s)
	if err != nil {
		return nil
	}
	return &s
}

func (h *harness) runLease(kind jobs.Kind, name string) *coordinationv1.Lease {
	var l coordinationv1.Lease
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: jobs.RunLeaseName(jobs.StateSecretSuffix(h.ns, kind, name))}, &l); err != nil {
		return nil
	}
	return &l
}

func (h *harness) secret(name string) *corev1.Secret {
	var s corev1.Secret
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: name}, &s); err != nil {
		return nil
	}
	return &s
}

// events drains the recorded events.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// wantWaiting checks an apply that waits for a person before any Job or Lease: no running Job,
// ApplyJobSucceeded False with reason and a message holding each phrase, a Warning event of
// reason, and the run Lease not held. Ready is False until the object is provisioned; once it
// is, Ready follows the infrastructure's health, which the wait leaves True.
func (h *harness) wantWaiting(obj *infrav1.TerraformCluster, reason string, phrases ...string) {
	h.t.Helper()
	h.noRunningJob(jobs.KindCluster, obj.Name)
	h.get(obj)
	c := conditions.Get(obj.Status.Conditions, conditions.ApplyJobSucceeded)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason {
		h.t.Fatalf("ApplyJobSucceeded = %+v, want False/%s", c, reason)
	}
	for _, want := range phrases {
		if !strings.Contains(c.Message, want) {
			h.t.Errorf("the message lacks %q: %s", want, c.Message)
		}
	}
	wantReady := metav1.ConditionFalse
	if obj.Status.IsProvisioned() {
		wantReady = metav1.ConditionTrue
	}
	if r := conditions.Get(obj.Status.Conditions, conditions.Ready); r == nil || r.Status != wantReady {
		h.t.Errorf("Ready = %+v, want %s", r, wantReady)
	}
	if ev := h.events(); countPrefix(ev, "Warning "+reason) == 0 {
		h.t.Errorf("no Warning %s event: %v", reason, ev)
	}
	if l := h.runLease(jobs.KindCluster, obj.Name); l != nil && ptr.Deref(l.Spec.HolderIdentity, "") != "" {
		h.t.Errorf("the run Lease is held by %q while the apply waits", ptr.Deref(l.Spec.HolderIdentity, ""))
	}
}

func countPrefix(list []string, prefix string) int {
	n := 0
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

func requestFor(obj client.Object) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)}
}

// laggingReconciler is a cluster reconciler whose cached reads (Client) still see stale as it
// was, while APIReader reads the API server.
func (h *harness) laggingReconciler(stale client.Object) *workspace.Reconciler {
	h.t.Helper()
	direct, err := client.NewWithWatch(testenv.Get(h.t).Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		h.t.Fatal(err)
	}
	lagging := interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if reflect.TypeOf(obj) == reflect.TypeOf(stale) && key == client.ObjectKeyFromObject(stale) {
				reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(stale.DeepCopyObject()).Elem())
				return nil
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	return workspace.New(workspace.Reconciler{Client: lagging, APIReader: h.c, Recorder: h.recorder, Clock: h.clock, Metrics: h.r.Metrics, RunnerImage: runnerImage}, infrav1.ClusterKind)
}

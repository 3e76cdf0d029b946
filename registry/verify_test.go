package registry

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/fake"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// destructivePlan is the plan of the tests below: it replaces a network, which deletes it.
var destructivePlan = jobs.Summary{Plan: &jobs.PlanSummary{
	Hash: planHash, Add: 1, Destroy: 1, Destructive: true,
	Resources: []jobs.ResourceChange{{Address: "terraform_data.net", Actions: []string{"delete", "create"}}},
}}

// hiddenDelete is destructivePlan as someone who may patch Jobs would rewrite it: the same hash,
// which the approval binds, with the delete gone from the counts and the resources.
var hiddenDelete = jobs.Summary{Plan: &jobs.PlanSummary{
	Hash: planHash, Change: 1,
	Resources: []jobs.ResourceChange{{Address: "terraform_data.net", Actions: []string{"update"}}},
}}

// encoded is the result annotation of s.
func encoded(t *testing.T, s jobs.Summary) string {
	t.Helper()
	v, err := jobs.EncodeSummary(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// approveAs POSTs an approval of plan quoting hash as alice, and returns the error and what was
// written.
func approveAs(t *testing.T, src *Source, objects *fakeObjects, live Jobs, ns, plan, hash string) error {
	t.Helper()
	ctx := genericapirequest.WithUser(genericapirequest.WithNamespace(context.Background(), ns), &user.DefaultInfo{Name: "alice"})
	_, err := NewApprovalREST(src, objects, live).Create(ctx, plan, body(plan, hash), nil, &metav1.CreateOptions{})
	return err
}

// A plan's Job must be as the controller signed it: each rule a row, seen in the plan's phase and
// in the answer to its approval.
func TestPlanVerification(t *testing.T) {
	const ns = "team-a"
	tests := []struct {
		name string
		// The plan's Job is a plan Job, or with blocked an apply blocked before a destructive
		// plan; made at made (zero: now) and signed unless unsigned; then
		// changed by tamper, as someone who may patch Jobs would.
		blocked   bool
		made      time.Time
		unsigned  bool
		tamper    func(t *testing.T, j *batchv1.Job)
		wantPhase string
	}{
		{name: "a plan Job as the controller signed it awaits approval", wantPhase: "AwaitingApproval"},
		{
			name:      "a plan whose resources and counts were rewritten to hide a delete is Unverified",
			tamper:    func(t *testing.T, j *batchv1.Job) { j.Annotations[jobs.AnnotationResult] = encoded(t, hiddenDelete) },
			wantPhase: "Unverified",
		},
		{
			name: "a plan whose result and result digest were both rewritten is Unverified",
			tamper: func(t *testing.T, j *batchv1.Job) {
				j.Annotations[jobs.AnnotationResult] = encoded(t, hiddenDelete)
				j.Annotations[runkey.AnnotationResultDigest] = runkey.ResultDigest(j.Annotations[jobs.AnnotationResult])
			},
			wantPhase: "Unverified",
		},
		{
			name:      "a plan whose result digest was removed is Unverified",
			tamper:    func(_ *testing.T, j *batchv1.Job) { delete(j.Annotations, runkey.AnnotationResultDigest) },
			wantPhase: "Unverified",
		},
		{
			name:      "a plan whose signature was removed is Unverified",
			tamper:    func(_ *testing.T, j *batchv1.Job) { delete(j.Annotations, runkey.AnnotationSignature) },
			wantPhase: "Unverified",
		},
		{
			name: "a plan whose Job carries another Job's signature is Unverified",
			tamper: func(_ *testing.T, j *batchv1.Job) {
				other := newJob(ns, "web", jobs.OpPlan, 9, succeeded(t0), withResult(destructivePlan))
				j.Annotations[runkey.AnnotationSignature] = other.Annotations[runkey.AnnotationSignature]
			},
			wantPhase: "Unverified",
		},
		{
			name:      "a plan whose Job gained a captf.io/ annotation no view reads is Unverified",
			tamper:    func(_ *testing.T, j *batchv1.Job) { j.Annotations[jobs.AnnotationReplan] = "2026-03-01T11:00:00Z" },
			wantPhase: "Unverified",
		},
		{
			name:      "a plan whose Job gained a captf.io/ label is Unverified",
			tamper:    func(_ *testing.T, j *batchv1.Job) { j.Labels["captf.io/reviewed"] = "true" },
			wantPhase: "Unverified",
		},
		{
			name:      "a plan whose Job gained an annotation of another domain still verifies",
			tamper:    func(_ *testing.T, j *batchv1.Job) { j.Annotations["example.com/note"] = "reviewed" },
			wantPhase: "AwaitingApproval",
		},
		{
			name: "an unsigned plan Job made before the run key is Unverified: the controller signs those when it makes the key",
			made: t0.Add(-72 * time.Hour), unsigned: true, wantPhase: "Unverified",
		},
		{name: "an unsigned plan Job is Unverified", unsigned: true, wantPhase: "Unverified"},
		{name: "a blocked apply as the controller signed it awaits approval", blocked: true, wantPhase: "AwaitingApproval"},
		{
			name:    "a blocked apply whose inputs hash was rewritten is Unverified",
			blocked: true,
			tamper: func(_ *testing.T, j *batchv1.Job) {
				j.Annotations[jobs.AnnotationInputsHash] = "h1:" + strings.Repeat("34", 32)
			},
			wantPhase: "Unverified",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var job *batchv1.Job
			if tt.blocked {
				job = newJob(ns, "web", jobs.OpApply, 1, failed(t0), annotated(jobs.AnnotationDestructivePlanBlocked, "true"), withResult(jobs.Summary{Outcome: jobs.OutcomeBlocked}))
			} else {
				job = newJob(ns, "web", jobs.OpPlan, 1, succeeded(t0), withResult(destructivePlan))
			}
			if !tt.made.IsZero() {
				job.CreationTimestamp = metav1.NewTime(tt.made)
				sign(job)
			}
			if tt.unsigned {
				delete(job.Annotations, runkey.AnnotationSignature)
			}
			if tt.tamper != nil {
				tt.tamper(t, job)
			}
			var preview *infrav1.PlanPreview
			approvalHash := job.Annotations[jobs.AnnotationInputsHash]
			if !tt.blocked {
				preview, approvalHash = &infrav1.PlanPreview{InputsHash: inputsHash, PlanHash: planHash, Job: job.Name}, planHash
			}
			web := cluster(ns, "web", nil, preview, nil)
			src := newTestSource(t, job, web)

			plan, ok := src.getPlan(ns, job.Name)
			if !ok {
				t.Fatal("no plan")
			}
			if got := string(plan.Status.Phase); got != tt.wantPhase {
				t.Errorf("phase %s, want %s", got, tt.wantPhase)
			}
			objects := newFakeObjects(web)
			err := approveAs(t, src, objects, nil, ns, job.Name, approvalHash)
			if tt.wantPhase == "AwaitingApproval" {
				if err != nil || len(objects.writes) != 1 {
					t.Fatalf("approval: %v, writes %v; want it written", err, objects.writes)
				}
				return
			}
			if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "signature of Job "+job.Name+" does not verify") ||
				!strings.Contains(err.Error(), "kubectl captf replan web") {
				t.Errorf("approval: %v, want a 409 that says the signature does not verify and asks for a new plan", err)
			}
			if len(objects.writes) != 0 {
				t.Errorf("wrote %v", objects.writes)
			}
		})
	}
}

// An approval of a plan the cache has not seen yet reads its Job live, and verifies it as well.
func TestApprovalOfAPlanReadLiveVerifiesItsJob(t *testing.T) {
	plan := newJob("ns", "web", jobs.OpPlan, 1, succeeded(t0), withResult(destructivePlan))
	plan.Annotations[jobs.AnnotationResult] = encoded(t, hiddenDelete)
	web := cluster("ns", "web", nil, &infrav1.PlanPreview{PlanHash: planHash, Job: plan.Name}, nil)
	objects := newFakeObjects(web)
	err := approveAs(t, newTestSource(t, web), objects, fakeJobs{plan.Name: plan}, "ns", plan.Name, planHash)
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "does not verify") || len(objects.writes) != 0 {
		t.Fatalf("approval: %v, writes %v; want a 409 that writes nothing", err, objects.writes)
	}
}

// staticRunKeys gives the run key once it has been asked for it missing times.
type staticRunKeys struct {
	missing int32
	asked   atomic.Int32
	err     error
}

func (k *staticRunKeys) RunKey(context.Context) (runkey.Key, bool, error) {
	if k.asked.Add(1) <= k.missing {
		return runkey.Key{}, false, k.err
	}
	return testRunKey, true, nil
}

// Until the run key is known every plan is Unverified and none is approved; once it is, a watch
// of plans sees each plan take its phase.
func TestPlansAreUnverifiedUntilTheRunKeyIsKnown(t *testing.T) {
	plan := newJob("team-a", "web", jobs.OpPlan, 1, succeeded(t0), withResult(destructivePlan))
	web := cluster("team-a", "web", nil, &infrav1.PlanPreview{InputsHash: inputsHash, PlanHash: planHash, Job: plan.Name}, nil)
	src := newKeylessTestSource(t, plan, web)
	if got, _ := src.getPlan("team-a", plan.Name); got.Status.Phase != "Unverified" {
		t.Fatalf("phase %s before the key is known, want Unverified", got.Status.Phase)
	}
	objects := newFakeObjects(web)
	if err := approveAs(t, src, objects, nil, "team-a", plan.Name, planHash); !apierrors.IsConflict(err) || len(objects.writes) != 0 {
		t.Fatalf("approval before the key is known: %v, writes %v; want a 409", err, objects.writes)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := NewPlanREST(src).Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: src.listRV()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	keys := &staticRunKeys{missing: 2, err: errors.New("the API server is away")}
	done := make(chan struct{})
	go func() { src.LoadRunKey(ctx, keys, time.Millisecond); close(done) }()
	expect(t, w, seen{watch.Modified, plan.Name, "AwaitingApproval"})
	<-done
	if keys.asked.Load() != 3 {
		t.Errorf("asked for the key %d times, want until it was found (3)", keys.asked.Load())
	}
	if err := approveAs(t, src, objects, nil, "team-a", plan.Name, planHash); err != nil || len(objects.writes) != 1 {
		t.Fatalf("approval once the key is known: %v, writes %v", err, objects.writes)
	}
}

// The server's RunKeys read the Secret the controller makes: each rule a row.
func TestSecretRunKeys(t *testing.T) {
	made := metav1.NewTime(t0.Add(-48 * time.Hour))
	secret := func(key []byte) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "captf-system", Name: RunKeySecret, CreationTimestamp: made},
			Data:       map[string][]byte{"key": key},
		}
	}
	for _, tc := range []struct {
		name      string
		secret    *corev1.Secret
		wantFound bool
		wantErr   bool
	}{
		{name: "no Secret yet is no key, and no error", wantFound: false},
		{name: "the Secret's 32 bytes are the key", secret: secret(bytes.Repeat([]byte{7}, runkey.Size)), wantFound: true},
		{name: "a key of another size is an error", secret: secret([]byte("short")), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.secret != nil {
				client = fake.NewClientset(tc.secret)
			}
			key, found, err := NewSecretRunKeys(client.CoreV1(), "captf-system", RunKeySecret).RunKey(context.Background())
			if (err != nil) != tc.wantErr || found != tc.wantFound {
				t.Fatalf("found %v, error %v", found, err)
			}
			if !found {
				return
			}
			job := newJob("ns", "web", jobs.OpPlan, 1, succeeded(t0), withResult(destructivePlan))
			if !key.JobSigned(job) {
				t.Error("the key does not verify what testRunKey signed")
			}
		})
	}
}

// A Job's record keeps what its signature covers: a plan verifies from its record exactly as from
// the Job, whatever captf.io/ annotations the controller wrote; a Job with more of them than a
// record keeps never verifies.
func TestRecord_VerifiesAsTheJob(t *testing.T) {
	verify := PlanVerifier(testRunKey)
	many := func(n int) func(*batchv1.Job) {
		return func(j *batchv1.Job) {
			for i := range n {
				j.Annotations["captf.io/extra-"+strconv.Itoa(i)] = "x"
			}
		}
	}
	for _, tc := range []struct {
		name string
		opts []jobOpt
		want bool
	}{
		{name: "a signed plan with every annotation the views read and others of captf.io verifies", want: true, opts: []jobOpt{func(j *batchv1.Job) {
			for i, key := range jobs.ViewAnnotations() {
				j.Annotations[key] = "value-" + strconv.Itoa(i)
			}
			maps.Copy(j.Annotations, unreadJobAnnotations)
		}, withResult(destructivePlan)}},
		{name: "a signed plan with as many captf.io/ annotations as a record keeps verifies", want: true, opts: []jobOpt{withResult(destructivePlan), many(maxSignedAnnotations - 5)}},
		{name: "a signed plan with more captf.io/ annotations than a record keeps does not", want: false, opts: []jobOpt{withResult(destructivePlan), many(maxSignedAnnotations)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob("ns", "web", jobs.OpPlan, 1, append([]jobOpt{succeeded(t0)}, tc.opts...)...)
			rebuilt := recordOfJob(job).job()
			if got := verify(&rebuilt); got != tc.want {
				t.Errorf("the record verifies: %v, want %v", got, tc.want)
			}
			if tc.want && !verify(job) {
				t.Error("the Job itself does not verify")
			}
		})
	}
}

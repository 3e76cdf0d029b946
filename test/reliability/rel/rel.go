// Package rel holds what the reliability suites share: a client that injects faults and
// crashes into the engine's writes, an event recorder that counts events per Job, and helpers
// that finish Jobs the way the Job controller and the runner would.
package rel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
)

// ErrKilled is what every call of a killed client returns.
var ErrKilled = errors.New("injected crash: the process is gone")

// Write describes one write the engine attempted.
type Write struct {
	Verb string // create, update, patch, delete, status-patch, status-update
	Kind string // Go type name, e.g. Job, Secret, Lease, TerraformCluster
	Name string
	// Bookkept is set for a Job patch that writes captf.io/bookkept.
	Bookkept bool
}

func (w Write) String() string {
	s := w.Verb + " " + w.Kind + "/" + w.Name
	if w.Bookkept {
		s += " (bookkept mark)"
	}
	return s
}

// Hook decides the fate of one write. before runs before it reaches the API server: a non-nil
// error is returned instead. after runs once it returned: a non-nil error replaces the result (the
// write happened, the caller hears otherwise).
type Hook struct {
	Before func(w Write) error
	After  func(w Write, err error) error
}

// Client wraps a client.Client: writes go through the Hook, and once Kill is called every call
// fails with ErrKilled, as a process that crashed.
type Client struct {
	client.Client
	mu     sync.Mutex
	hook   Hook
	killed bool
	// Writes lists the writes that reached the API server.
	Writes []Write
}

// NewClient wraps c.
func NewClient(c client.Client) *Client { return &Client{Client: c} }

// SetHook replaces the hook.
func (c *Client) SetHook(h Hook) { c.mu.Lock(); c.hook = h; c.mu.Unlock() }

// Kill makes every later call fail.
func (c *Client) Kill() { c.mu.Lock(); c.killed = true; c.mu.Unlock() }

// Killed reports whether the client was killed.
func (c *Client) Killed() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.killed }

func (c *Client) dead() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.killed {
		return ErrKilled
	}
	return nil
}

func kindOf(obj runtime.Object) string {
	t := fmt.Sprintf("%T", obj)
	for i := len(t) - 1; i >= 0; i-- {
		if t[i] == '.' {
			return t[i+1:]
		}
	}
	return t
}

func (c *Client) write(verb string, obj client.Object, do func() error) error {
	if err := c.dead(); err != nil {
		return err
	}
	w := Write{Verb: verb, Kind: kindOf(obj), Name: obj.GetName()}
	if _, ok := obj.(*batchv1.Job); ok && verb == "patch" {
		_, w.Bookkept = obj.GetAnnotations()[jobs.AnnotationBookkept]
	}
	c.mu.Lock()
	hook := c.hook
	c.mu.Unlock()
	if hook.Before != nil {
		if err := hook.Before(w); err != nil {
			return err
		}
	}
	err := do()
	if err == nil {
		c.mu.Lock()
		c.Writes = append(c.Writes, w)
		c.mu.Unlock()
	}
	if hook.After != nil {
		if e := hook.After(w, err); e != nil {
			return e
		}
	}
	return err
}

// Get reads an object from the wrapped client; it fails with ErrKilled once the client is killed.
func (c *Client) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.dead(); err != nil {
		return err
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// List lists objects with the wrapped client; it fails with ErrKilled once the client is killed.
func (c *Client) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := c.dead(); err != nil {
		return err
	}
	return c.Client.List(ctx, list, opts...)
}

// Create creates obj through the Hook (see Client).
func (c *Client) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.write("create", obj, func() error { return c.Client.Create(ctx, obj, opts...) })
}

// Update updates obj through the Hook (see Client).
func (c *Client) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.write("update", obj, func() error { return c.Client.Update(ctx, obj, opts...) })
}

// Patch patches obj through the Hook (see Client).
func (c *Client) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.write("patch", obj, func() error { return c.Client.Patch(ctx, obj, patch, opts...) })
}

// Delete deletes obj through the Hook (see Client).
func (c *Client) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.write("delete", obj, func() error { return c.Client.Delete(ctx, obj, opts...) })
}

// DeleteAllOf deletes the objects of obj's kind that opts select, through the Hook (see Client).
func (c *Client) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return c.write("deleteall", obj, func() error { return c.Client.DeleteAllOf(ctx, obj, opts...) })
}

// Status returns a writer of the status subresource whose writes also go through the Hook.
func (c *Client) Status() client.SubResourceWriter {
	return &statusWriter{c: c, w: c.Client.Status()}
}

type statusWriter struct {
	c *Client
	w client.SubResourceWriter
}

func (s *statusWriter) Create(ctx context.Context, obj client.Object, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.c.write("status-create", obj, func() error { return s.w.Create(ctx, obj, sub, opts...) })
}

func (s *statusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.c.write("status-update", obj, func() error { return s.w.Update(ctx, obj, opts...) })
}

func (s *statusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.c.write("status-patch", obj, func() error { return s.w.Patch(ctx, obj, patch, opts...) })
}

func (s *statusWriter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	if err := s.c.dead(); err != nil {
		return err
	}
	return s.w.Apply(ctx, obj, opts...)
}

// Reader fails once the client is killed.
type Reader struct {
	client.Reader
	C *Client
}

// Get reads an object from the wrapped Reader; it fails with ErrKilled once C is killed.
func (r Reader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := r.C.dead(); err != nil {
		return err
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// List lists objects with the wrapped Reader; it fails with ErrKilled once C is killed.
func (r Reader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := r.C.dead(); err != nil {
		return err
	}
	return r.Reader.List(ctx, list, opts...)
}

// Fault is an API error to inject, by name.
type Fault string

// The faults the suites inject.
const (
	FaultConflict     Fault = "conflict-409"
	FaultTimeout      Fault = "server-timeout-504"
	FaultClientTime   Fault = "client-timeout"
	FaultInternal     Fault = "internal-500"
	FaultUnavailable  Fault = "unavailable-503"
	FaultTooMany      Fault = "too-many-requests-429"
	FaultInvalid      Fault = "invalid-422"
	FaultForbidden    Fault = "forbidden-403"
	FaultBadRequest   Fault = "bad-request-400"
	FaultTooLarge     Fault = "too-large-413"
	FaultUnauthorized Fault = "unauthorized-401"
)

// Faults lists every fault.
var Faults = []Fault{FaultConflict, FaultTimeout, FaultClientTime, FaultInternal, FaultUnavailable, FaultTooMany, FaultInvalid, FaultForbidden, FaultBadRequest, FaultTooLarge, FaultUnauthorized}

// Rejects reports whether a fault proves the write did not happen (a rejected create).
func (f Fault) Rejects() bool {
	switch f {
	case FaultInvalid, FaultForbidden, FaultBadRequest, FaultTooLarge, FaultUnauthorized:
		return true
	}
	return false
}

// Err is the error the API server (or the client) would return.
func (f Fault) Err(w Write) error {
	gr := schema.GroupResource{Resource: w.Kind}
	switch f {
	case FaultConflict:
		return apierrors.NewConflict(gr, w.Name, errors.New("injected conflict"))
	case FaultTimeout:
		return apierrors.NewTimeoutError("injected timeout", 1)
	case FaultClientTime:
		return fmt.Errorf("injected: %w", context.DeadlineExceeded)
	case FaultInternal:
		return apierrors.NewInternalError(errors.New("injected"))
	case FaultUnavailable:
		return apierrors.NewServiceUnavailable("injected")
	case FaultTooMany:
		return apierrors.NewTooManyRequests("injected", 1)
	case FaultInvalid:
		return apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: w.Kind}, w.Name, nil)
	case FaultForbidden:
		return apierrors.NewForbidden(gr, w.Name, errors.New("injected"))
	case FaultBadRequest:
		return apierrors.NewBadRequest("injected")
	case FaultTooLarge:
		return apierrors.NewRequestEntityTooLargeError("injected")
	case FaultUnauthorized:
		return apierrors.NewUnauthorized("injected")
	}
	return errors.New("injected")
}

// Recorder counts events, by reason and by the Job they relate to.
type Recorder struct {
	mu sync.Mutex
	// ByJob counts events per related Job name and reason.
	ByJob map[string]map[string]int
	All   []string
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{ByJob: map[string]map[string]int{}} }

// Eventf records an event.
func (r *Recorder) Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := eventtype + " " + reason + " " + fmt.Sprintf(note, args...)
	r.All = append(r.All, msg)
	if j, ok := related.(*batchv1.Job); ok && j != nil {
		if r.ByJob[j.Name] == nil {
			r.ByJob[j.Name] = map[string]int{}
		}
		r.ByJob[j.Name][reason]++
	}
}

// FinishReasons are the events a booked Job gets exactly one of.
var FinishReasons = []string{"JobSucceeded", "JobFailed", "JobDeadlineExceeded", "JobInterrupted", "DestructivePlanBlocked"}

// Finished returns how many finish events a Job got.
func (r *Recorder) Finished(job string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, reason := range FinishReasons {
		n += r.ByJob[job][reason]
	}
	return n
}

// Seed returns the seed to use: CAPTF_SEED if set, else one from the clock. Log it.
func Seed() uint64 {
	if s := os.Getenv("CAPTF_SEED"); s != "" {
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			return v
		}
	}
	return uint64(time.Now().UnixNano())
}

// NewRand returns a reproducible generator.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// Finish ends a Job as the Job controller and the runner would: a pod whose source container
// terminated with message, then the Job's finish conditions. now is when it finished.
func Finish(ctx context.Context, c client.Client, job batchv1.Job, succeeded bool, message string, now time.Time) error {
	if now.Before(job.CreationTimestamp.Time) {
		now = job.CreationTimestamp.Time
	}
	exit := int32(0)
	if !succeeded {
		exit = 1
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-abcde", Namespace: job.Namespace, Labels: map[string]string{batchv1.JobNameLabel: job.Name},
			// As the Job controller creates it: the controller trusts only pods its Job owns.
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(&job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		// Its spec is its Job's template, as the Job controller makes it.
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "source", Image: "registry.example/m:v1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: message}},
	}}}
	if exit != 0 {
		pod.Status.Phase = corev1.PodFailed
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return err
	}
	t := metav1.NewTime(now)
	start := metav1.NewTime(job.CreationTimestamp.Time)
	job.Status.StartTime = &start
	cond := func(ty batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: ty, Status: corev1.ConditionTrue, Reason: reason, Message: reason, LastTransitionTime: t, LastProbeTime: t}
	}
	if succeeded {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &t
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached"), cond(batchv1.JobComplete, "CompletionsReached")}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded), cond(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded)}
	}
	return c.Status().Update(ctx, &job)
}

// Result encodes a runner result for a Job's op.
func Result(job *batchv1.Job, r jobs.RunnerResult) string {
	r.Version = jobs.RunnerResultVersion
	r.Op = jobs.OpOf(job)
	b, err := jobs.EncodeRunnerResult(r)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Poll calls f until it returns true or the deadline passes.
func Poll(timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	delay := 10 * time.Millisecond
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("timed out after %s: %w", timeout, err)
			}
			return fmt.Errorf("timed out after %s", timeout)
		}
		time.Sleep(delay)
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
}

// WriteState writes a state of serial with one resource into the object's state Secret, as the
// kubernetes backend does after an apply.
func WriteState(ctx context.Context, c client.Client, namespace string, kind jobs.Kind, name string, serial int64) error {
	doc := fmt.Sprintf(`{"version":4,"serial":%d,"lineage":"l","resources":[{"mode":"managed","type":"terraform_data","name":"r","instances":[{"attributes":{}}]}]}`, serial)
	data, err := state.Compress([]byte(doc))
	if err != nil {
		return err
	}
	key := client.ObjectKey{Namespace: namespace, Name: state.SecretName(jobs.StateSecretSuffix(namespace, kind, name))}
	var s corev1.Secret
	if err := c.Get(ctx, key, &s); err == nil {
		s.Data = map[string][]byte{"tfstate": data}
		return c.Update(ctx, &s)
	}
	s = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: namespace}, Data: map[string][]byte{"tfstate": data}}
	return c.Create(ctx, &s)
}

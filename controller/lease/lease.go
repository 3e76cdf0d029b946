// Package lease takes and gives back the run Lease that admits one run of an object at a time.
// Its holder is the name of the Job about to be created, so a Lease left by a crash names the Job
// that proves whether it is still in use. It is distinct from OpenTofu's state lock.
package lease

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/jobs"
)

// Label and annotation keys of a run Lease.
const (
	LabelLease            = "captf.io/lease"
	AnnotationOp          = "captf.io/lease-op"
	AnnotationAcquiredAt  = "captf.io/lease-acquired-at"
	runLeaseKind          = "run"
	extraBackstopSeconds  = 600 + 300
	defaultDeadlineSecond = 3600
)

// Grace is how long a Lease whose holder Job does not exist is kept: long enough for a Job
// create that is still on its way, or an informer that has not seen it yet.
const Grace = time.Minute

// Holder is what is known of the Job a Lease names.
type Holder struct {
	// Exists is false when the Job is not on the API server.
	Exists bool
	// Finished is true when the Job completed or failed.
	Finished bool
	// PodsRunning is true while any pod of the Job has not terminated.
	PodsRunning bool
}

// HolderFunc reads the state of the Job a Lease names, from the API server.
type HolderFunc func(ctx context.Context, jobName string) (Holder, error)

// Request is a Lease to take.
type Request struct {
	Namespace string
	Name      string
	// Job is the name of the Job about to be created: the holder.
	Job string
	Op  jobs.Op
	// Labels identify the owning object (owner kind, owner name, cluster name).
	Labels map[string]string
	// DeadlineSeconds is the holder Job's deadline; the Lease expires a backstop after it.
	DeadlineSeconds int64
}

// Backstop is how long after its acquisition a Lease counts as abandoned whatever its holder
// says: the holder's deadline, its grace period and five more minutes.
func (r Request) Backstop() time.Duration {
	deadline := r.DeadlineSeconds
	if deadline <= 0 {
		deadline = defaultDeadlineSecond
	}
	return time.Duration(deadline+extraBackstopSeconds) * time.Second
}

// Acquire takes the Lease for r.Job. It reports false, without error, when another holder has
// it or a concurrent writer won; the caller waits and tries again in a later pass.
func Acquire(ctx context.Context, c client.Client, r Request, holder HolderFunc, now time.Time) (bool, error) {
	desired := r.lease(now)
	err := c.Create(ctx, desired)
	switch {
	case err == nil:
		return true, nil
	case !apierrors.IsAlreadyExists(err):
		return false, fmt.Errorf("creating lease %s: %w", r.Name, err)
	}
	var current coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, &current); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil // released meanwhile; the next pass creates it
		}
		return false, fmt.Errorf("reading lease %s: %w", r.Name, err)
	}
	free, err := isFree(ctx, &current, r.Job, holder, now)
	if err != nil || !free {
		return false, err
	}
	current.Labels, current.Annotations, current.Spec = desired.Labels, desired.Annotations, desired.Spec
	if err := c.Update(ctx, &current); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("taking lease %s: %w", r.Name, err)
	}
	return true, nil
}

// isFree decides whether a Lease may be taken by job.
func isFree(ctx context.Context, l *coordinationv1.Lease, job string, holder HolderFunc, now time.Time) (bool, error) {
	name := ptr.Deref(l.Spec.HolderIdentity, "")
	if name == "" || name == job {
		return true, nil
	}
	acquired := l.CreationTimestamp.Time
	if l.Spec.AcquireTime != nil {
		acquired = l.Spec.AcquireTime.Time
	}
	backstop := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	if backstop > 0 && now.Sub(acquired) > backstop {
		return true, nil
	}
	h, err := holder(ctx, name)
	if err != nil {
		return false, fmt.Errorf("reading the holder %s of lease %s: %w", name, l.Name, err)
	}
	switch {
	case h.PodsRunning:
		return false, nil
	case h.Exists:
		return h.Finished, nil
	default:
		return now.Sub(acquired) > Grace, nil
	}
}

// Release gives the Lease back if job still holds it. The delete is conditional on the version
// read, so a Lease another holder took meanwhile is left alone.
func Release(ctx context.Context, c client.Client, namespace, name, job string) error {
	var current coordinationv1.Lease
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &current); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ptr.Deref(current.Spec.HolderIdentity, "") != job {
		return nil
	}
	err := c.Delete(ctx, &current, client.Preconditions{UID: &current.UID, ResourceVersion: &current.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("releasing lease %s: %w", name, err)
	}
	return nil
}

func (r Request) lease(now time.Time) *coordinationv1.Lease {
	labels := map[string]string{LabelLease: runLeaseKind, jobs.LabelManaged: jobs.ManagedValue}
	for k, v := range r.Labels {
		labels[k] = v
	}
	acquired := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: r.Name, Namespace: r.Namespace, Labels: labels,
			Annotations: map[string]string{AnnotationOp: string(r.Op), AnnotationAcquiredAt: now.UTC().Format(time.RFC3339Nano)},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(r.Job),
			AcquireTime:          &acquired,
			LeaseDurationSeconds: ptr.To(int32(r.Backstop() / time.Second)),
		},
	}
}

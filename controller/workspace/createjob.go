package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/lease"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// errJobNameTaken says that a Job of the decided name exists and is not the object's.
var errJobNameTaken = errors.New("the Job name is taken by a Job this object does not control")

// NameTakenRequeue is how soon a pass looks again at a Job name someone else's Job holds.
const NameTakenRequeue = time.Minute

// createJob creates the Job, or adopts the one a repeated pass finds under the same name. A
// create the API server rejected proves no Job exists, so the Lease is given back; a timeout or
// server error proves nothing, and the Lease is kept for the retry.
func (p *pass) createJob(ctx context.Context, job *batchv1.Job, leaseReq lease.Request) (*batchv1.Job, error) {
	err := p.r.Client.Create(ctx, job)
	switch {
	case err == nil:
		return job, p.signJob(ctx, job)
	case apierrors.IsAlreadyExists(err):
		var existing batchv1.Job
		if err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), &existing); err != nil {
			return nil, fmt.Errorf("reading the existing Job %s: %w", job.Name, err)
		}
		if _, signed := existing.Annotations[runkey.AnnotationSignature]; OwnedBy(&existing, p.obj) && !signed && p.r.RunKey != nil {
			if err := p.dropUnsignedJob(ctx, &existing); err != nil {
				return nil, err
			}
			return nil, errJobUnsigned
		}
		if !OwnedBy(&existing, p.obj) || (p.r.RunKey != nil && !p.r.RunKey.JobSigned(&existing)) {
			logf.FromContext(ctx).Info("a Job of the decided name is not controlled by this object; waiting until it is deleted", "job", job.Name)
			// Someone else's Job holds the name: adopting it would run, book and trust a Job
			// that is not ours. The name is deterministic, so the op waits until it is gone.
			if releaseErr := lease.Release(ctx, p.r.Client, leaseReq.Namespace, leaseReq.Name, leaseReq.Job); releaseErr != nil {
				return nil, fmt.Errorf("giving back the Lease after a name conflict on Job %s: %w", job.Name, releaseErr)
			}
			msg := fmt.Sprintf("Job %s exists and is not controlled by this object or not signed by the controller; delete it so the %s can start", job.Name, jobs.OpOf(job))
			setOpCondition(p.status(), p.stamp(), jobs.OpOf(job), metav1.ConditionFalse, conditions.ReasonJobNameTaken, msg)
			p.event(nil, corev1.EventTypeWarning, EventJobNameTaken, "%s", msg)
			return nil, errJobNameTaken
		}
		logf.FromContext(ctx).Info("adopted the existing Job of the decided name", "job", existing.Name)
		return &existing, nil
	case rejected(err):
		if releaseErr := lease.Release(ctx, p.r.Client, leaseReq.Namespace, leaseReq.Name, leaseReq.Job); releaseErr != nil {
			return nil, fmt.Errorf("creating Job %s was rejected (%w), and giving back the Lease failed: %w", job.Name, err, releaseErr)
		}
		setOpCondition(p.status(), p.stamp(), jobs.OpOf(job), metav1.ConditionFalse, conditions.ReasonJobRejected, fmt.Sprintf("creating Job %s was rejected: %v", job.Name, err))
		p.event(nil, corev1.EventTypeWarning, EventJobFailed, "Creating Job %s was rejected: %v", job.Name, err)
		return nil, fmt.Errorf("creating Job %s: %w", job.Name, err)
	}
	return nil, fmt.Errorf("creating Job %s: %w", job.Name, err)
}

// errJobUnsigned says that a Job of the decided name carried no signature and was deleted: the
// next pass creates the Job again.
var errJobUnsigned = errors.New("the Job of the decided name carried no signature")

// signJob signs the Job the pass just created, now that it has its UID, before its per-run
// Secret exists: until then its pod cannot start, so no run of it is ever unsigned. The patch
// tests the UID, labels and annotations it signs instead of the resourceVersion: the Job
// controller writes the new Job's status at once, and that must not cost the run, while a
// change to what the signature covers must fail the patch rather than be signed.
func (p *pass) signJob(ctx context.Context, job *batchv1.Job) error {
	if p.r.RunKey == nil {
		return nil
	}
	signature := p.r.RunKey.SignJob(job)
	ops := []jsonPatchOp{
		{Op: "test", Path: "/metadata/uid", Value: job.UID},
		{Op: "test", Path: "/metadata/labels", Value: job.Labels},
	}
	if job.Annotations == nil {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{runkey.AnnotationSignature: signature}})
	} else {
		ops = append(ops,
			jsonPatchOp{Op: "test", Path: "/metadata/annotations", Value: job.Annotations},
			jsonPatchOp{Op: "add", Path: "/metadata/annotations/" + jsonPointerEscape(runkey.AnnotationSignature), Value: signature})
	}
	data, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("signing Job %s: %w", job.Name, err)
	}
	if err := p.r.Client.Patch(ctx, job, client.RawPatch(types.JSONPatchType, data)); err != nil {
		return fmt.Errorf("signing Job %s: %w", job.Name, err)
	}
	return nil
}

// jsonPatchOp is one operation of an RFC 6902 JSON patch.
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// jsonPointerEscape escapes a map key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// dropUnsignedJob deletes a Job of the decided name that claims the object as its controller
// but carries no signature: one this controller created and could not sign before it stopped,
// or a forgery. Neither has its per-run Secret, so neither ran the object's inputs; a new Job of
// the same name is created next.
func (p *pass) dropUnsignedJob(ctx context.Context, job *batchv1.Job) error {
	background := metav1.DeletePropagationBackground
	if err := p.r.Client.Delete(ctx, job, &client.DeleteOptions{PropagationPolicy: &background, Preconditions: &metav1.Preconditions{UID: &job.UID}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the unsigned Job %s: %w", job.Name, err)
	}
	logf.FromContext(ctx).Info("deleted an unsigned Job of the decided name; it is created again", "job", job.Name)
	return nil
}

// rejected reports whether the API server refused a create outright.
func rejected(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsNotFound(err)
}

// ensureRunSecret creates the Job's per-run Secret. One that already belongs to this Job is
// kept: the name embeds the inputs hash, so its content is the same. One owned by another Job of
// the same name, an earlier pruned Job whose collection is pending, is replaced, since adopting
// it would let that collection delete it under the new pod.
func (p *pass) ensureRunSecret(ctx context.Context, job *batchv1.Job, data map[string][]byte) error {
	name := jobs.RunSecretName(job.Name)
	secret := func() *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: job.Namespace,
				Labels:          map[string]string{jobs.LabelManaged: jobs.ManagedValue},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
			},
			Data: data,
		}
	}
	// Create first: a new Job has no Secret yet, so the common case costs one request.
	err := p.r.Client.Create(ctx, secret())
	switch {
	case err == nil:
		return nil
	case !apierrors.IsAlreadyExists(err):
		return fmt.Errorf("creating the per-run Secret %s: %w", name, err)
	}
	var existing corev1.Secret
	switch err := p.r.APIReader.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: name}, &existing); {
	case apierrors.IsNotFound(err):
		// Deleted since the create failed: the next pass creates it.
		return fmt.Errorf("the per-run Secret %s vanished after a conflicting create", name)
	case err != nil:
		return fmt.Errorf("reading the per-run Secret %s: %w", name, err)
	}
	if ref := metav1.GetControllerOf(&existing); ref != nil && ref.UID == job.UID {
		return nil
	}
	if err := p.r.Client.Delete(ctx, &existing, client.Preconditions{UID: &existing.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the stale per-run Secret %s: %w", name, err)
	}
	if err := p.r.Client.Create(ctx, secret()); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the per-run Secret %s: %w", name, err)
	}
	return nil
}

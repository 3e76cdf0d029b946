package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"
	"k8s.io/klog/v2"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/apis/runs"
	"github.com/captf/captf/apis/runs/validation"
	"github.com/captf/captf/jobs"
)

// Objects reads and annotates the objects plans belong to, live from the API server: the
// approval decides on fresh data and writes with a resourceVersion precondition.
type Objects interface {
	// Get returns the object's record; a NotFound error when it does not exist.
	Get(ctx context.Context, kind jobs.Kind, namespace, name string) (*ownerRecord, error)
	// Annotate writes annotations on the object if its resourceVersion is still
	// resourceVersion (409 Conflict otherwise), or only checks that it could when dryRun is set.
	Annotate(ctx context.Context, kind jobs.Kind, namespace, name, resourceVersion string, annotations map[string]string, dryRun bool) error
}

// Jobs reads a managed Job live, for an approval of a plan whose Job the cache has not seen.
type Jobs interface {
	// Get returns the Job's record; a NotFound error when there is no managed Job of that name.
	Get(ctx context.Context, namespace, name string) (*jobRecord, error)
}

// ApprovalREST serves plans/approval: POST a PlanApproval to approve a plan. The delegated
// authorizer has already checked create on plans/approval; the write on the owning object is
// done with the server's own identity, so the approver needs no edit right on it.
type ApprovalREST struct {
	src     *Source
	objects Objects
	jobs    Jobs
}

var (
	_ rest.Storage      = &ApprovalREST{}
	_ rest.NamedCreater = &ApprovalREST{}
)

// NewApprovalREST returns the storage of plans/approval.
func NewApprovalREST(src *Source, objects Objects, jobClient Jobs) *ApprovalREST {
	return &ApprovalREST{src: src, objects: objects, jobs: jobClient}
}

// New implements rest.Storage.
func (*ApprovalREST) New() runtime.Object { return &runs.PlanApproval{} }

// Destroy implements rest.Storage.
func (*ApprovalREST) Destroy() {}

// Create implements rest.NamedCreater. It approves the plan named in the URL when
// jobs.PlanApprovalCheck allows it: 422 for an invalid body (with the field path), 404 for an
// unknown plan or a Job that is not a run of the object it names (only the controller's own Jobs
// count), 409 when the plan is not the object's current one or the hash differs, and
// 201 with what was written otherwise. The annotations are written on the owning object with
// its resourceVersion as a precondition; when the object changed meanwhile, the decision is
// made once more from fresh data, and a second conflict is a 409. A dry run decides and checks
// the write with the API server's dry run, but writes nothing.
func (a *ApprovalREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	approval, ok := obj.(*runs.PlanApproval)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a PlanApproval, got %T", obj))
	}
	if errs := validation.ValidatePlanApproval(approval, name); len(errs) > 0 {
		return nil, apierrors.NewInvalid(runs.Kind("PlanApproval"), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, approval); err != nil {
			return nil, err
		}
	}
	if err := a.src.ready(); err != nil {
		return nil, err
	}
	namespace := genericapirequest.NamespaceValue(ctx)
	userName := ""
	if u, ok := genericapirequest.UserFrom(ctx); ok {
		userName = u.GetName()
	}
	dryRun := options != nil && dryrun.IsDryRun(options.DryRun)

	for attempt := 1; ; attempt++ {
		result, raced, err := a.approve(ctx, namespace, name, approval.Spec.PlanHash, userName, dryRun)
		if raced && attempt == 1 {
			continue
		}
		if err != nil {
			klog.FromContext(ctx).Info("Plan approval refused", "plan", klog.KRef(namespace, name), "user", userName, "reason", err.Error())
			return nil, err
		}
		klog.FromContext(ctx).Info("Plan approved", "plan", klog.KRef(namespace, name), "user", userName, "dryRun", dryRun)
		return result, nil
	}
}

// approve makes one decision from fresh data and writes it. raced is set when the object
// changed between the read and the write, with a 409 error.
func (a *ApprovalREST) approve(ctx context.Context, namespace, name, planHash, userName string, dryRun bool) (_ *runs.PlanApproval, raced bool, _ error) {
	planResource := runs.Resource(PlansResource)
	rec, ok := a.src.job(namespace, name)
	if !ok && a.jobs != nil {
		live, err := a.jobs.Get(ctx, namespace, name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, false, apierrors.NewInternalError(fmt.Errorf("reading Job %s/%s: %w", namespace, name, err))
		default:
			rec, ok = live, true
		}
	}
	if !ok {
		return nil, false, apierrors.NewNotFound(planResource, name)
	}
	job := rec.job()
	// The object is the one the Job's controller reference names, never its labels': the
	// approval is written on it, and anyone who may create Jobs can copy the labels.
	target, _, ok := jobs.ControllerOf(&job)
	if !ok {
		return nil, false, notFound(planResource, name, fmt.Sprintf("plan %q not found: %s", name, jobs.WhyNotRunOf(&job, "")))
	}
	kind := jobs.Kind(target.Kind)
	owner, err := a.objects.Get(ctx, kind, namespace, target.Name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, notFound(planResource, name, fmt.Sprintf("plan %q belongs to %s %s, which does not exist", name, target.Kind, target.Name))
	case err != nil:
		return nil, false, apierrors.NewInternalError(fmt.Errorf("reading %s %s/%s: %w", target.Kind, namespace, target.Name, err))
	}
	// Only the object's own runs decide: PlanApprovalCheck leaves out the Jobs of another UID
	// and answers NotFound when the Job itself is one (an earlier object of the same name).
	var retained []batchv1.Job
	if g, i := findJob(a.src.groupsWith(withRecord(a.src.siblings(rec.ownerKey()), rec), owner, nil), name); i >= 0 {
		retained = g.jobs
	}
	planOwner := PlanOwnerOf(owner.Annotations, owner.plan)
	// What the approval binds (the plan hash, or a blocked apply's inputs hash) is read from the
	// Job: only a Job as the controller signed it may be approved.
	planOwner.UID, planOwner.Verify = owner.UID, a.src.verifier()
	now := a.src.now().UTC().Truncate(time.Second)
	d := jobs.PlanApprovalCheck(&job, retained, planOwner, planHash, userName, now)
	switch d.Verdict {
	case jobs.ApprovalNotFound:
		return nil, false, notFound(planResource, name, d.Message)
	case jobs.ApprovalConflict:
		return nil, false, apierrors.NewConflict(planResource, name, errors.New(d.Message))
	case jobs.ApprovalAllowed:
	default:
		return nil, false, apierrors.NewInternalError(fmt.Errorf("unknown approval verdict %q", d.Verdict))
	}

	if err := a.objects.Annotate(ctx, kind, namespace, target.Name, owner.ResourceVersion, d.Annotations, dryRun); err != nil {
		if apierrors.IsConflict(err) {
			return nil, true, apierrors.NewConflict(planResource, name,
				fmt.Errorf("%s %s changed while the approval was being written; read the plan again and retry", target.Kind, target.Name))
		}
		if apierrors.IsNotFound(err) {
			return nil, false, notFound(planResource, name, fmt.Sprintf("plan %q belongs to %s %s, which does not exist", name, target.Kind, target.Name))
		}
		return nil, false, apierrors.NewInternalError(fmt.Errorf("writing the approval on %s %s/%s: %w", target.Kind, namespace, target.Name, err))
	}
	approvedAt := metav1.NewTime(now)
	return &runs.PlanApproval{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, CreationTimestamp: approvedAt},
		Spec:       runs.PlanApprovalSpec{PlanHash: planHash},
		Status: runs.PlanApprovalStatus{
			Target:      &target,
			Annotations: d.Annotations,
			ApprovedBy:  userName,
			ApprovedAt:  &approvedAt,
			Message:     d.Message,
		},
	}, false, nil
}

// notFound is a 404 Not Found with a message of its own.
func notFound(resource schema.GroupResource, name, message string) *apierrors.StatusError {
	err := apierrors.NewNotFound(resource, name)
	err.ErrStatus.Message = message
	return err
}

// annotationPatch is the JSON merge patch that writes annotations on an object whose
// resourceVersion is still resourceVersion; the API server answers 409 otherwise.
func annotationPatch(resourceVersion string, annotations map[string]string) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{
			"resourceVersion": resourceVersion,
			"annotations":     annotations,
		},
	})
}

// resourceOf is the resource name of a kind that runs Jobs.
func resourceOf(kind jobs.Kind) (string, error) {
	info, ok := infrav1.KindInfoOf(string(kind))
	if !ok {
		return "", fmt.Errorf("%q is not a kind that runs Jobs", kind)
	}
	return info.Resource, nil
}

// newOwnerObject returns an empty object of a kind that runs Jobs.
func newOwnerObject(kind jobs.Kind) (runtime.Object, error) {
	info, ok := infrav1.KindInfoOf(string(kind))
	if !ok {
		return nil, fmt.Errorf("%q is not a kind that runs Jobs", kind)
	}
	return info.New(), nil
}

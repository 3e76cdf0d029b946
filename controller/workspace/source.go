package workspace

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/decide"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/jobs"
)

// runSource is what one Job runs: its rendered files and its module image.
type runSource struct {
	data  map[string][]byte
	image string
	// digestUnknown is set when a run that should be pinned runs the spec's reference.
	digestUnknown bool
	// missing says why no files can be had for the op; the op waits.
	missing string
	// unpinnedPlan says why an approved apply cannot run the digest its plan ran; it waits for
	// a new plan.
	unpinnedPlan string
}

// chooseSource picks the files and image of a Job (system-spec §2.3). Applies and plans run
// the current inputs under the spec's reference, except that an approved apply runs the digest
// its plan ran, and none when that digest is unknown: the approval binds the plan hash, and that
// is only as good as the code that produced it. Refresh, drift, destroy and restore run the digest the newest successful apply
// pinned. Their files: a machine's always from the durable inputs (it is never re-rendered once
// provisioned); a cluster's or pool's destroy from the durable inputs, else the current ones;
// its refresh and drift from the current inputs, which equal the applied ones whenever these
// run, else the durable ones.
func (p *pass) chooseSource(ctx context.Context, d decide.Decision, rendered inputs.Rendered, renderable bool) (runSource, error) {
	spec := p.obj.WorkspaceSpec().Source.Image
	switch d.Op {
	case jobs.OpApply, jobs.OpPlan:
		src := runSource{data: rendered.Data(), image: spec}
		if d.ExpectPlan != "" {
			// The tag may point elsewhere since the plan ran: without the plan's digest, the
			// approved hash says nothing of the code that would apply it.
			job, digest := p.planDigest()
			if !jobs.ValidDigest(digest) {
				src.unpinnedPlan = fmt.Sprintf("the image digest plan Job %s ran is unknown (the Job is gone or reported none), so the approved plan %s cannot be applied with the code that made it; request a new plan (kubectl captf replan) and approve it", job, d.ExpectPlan)
				return src, nil
			}
			src.image = jobs.PinnedReference(spec, digest)
		}
		return src, nil
	}
	durable := p.durable
	if !p.durableRead {
		var err error
		if durable, err = p.readDurable(ctx); err != nil {
			return runSource{}, err
		}
		if durable.Name == "" {
			durable = nil
		}
	}
	src := runSource{image: spec, digestUnknown: true}
	if durable != nil {
		if digest := durable.Annotations[jobs.AnnotationImageDigest]; jobs.ValidDigest(digest) {
			ref := durable.Annotations[jobs.AnnotationImage]
			if ref == "" {
				ref = spec
			}
			src.image, src.digestUnknown = jobs.PinnedReference(ref, digest), false
		}
	}
	var stored map[string][]byte
	if durable != nil && durable.Data[inputs.MainFile] != nil {
		stored = map[string][]byte{inputs.MainFile: durable.Data[inputs.MainFile], inputs.VarsFile: durable.Data[inputs.VarsFile]}
	}
	mutable := p.r.KindInfo.InputsMutable(p.obj)
	switch {
	case d.Op == jobs.OpRestore:
		src.data = restoreData()
	case !mutable && stored == nil:
		src.missing = fmt.Sprintf("the durable inputs Secret %s is missing, and a %s never renders its inputs again once provisioned", jobs.InputsSecretName(p.r.Kind, p.obj.GetName()), p.r.Kind)
	case !mutable:
		src.data = stored
	case d.Op == jobs.OpDestroy && stored != nil:
		src.data = stored
	case renderable:
		src.data = rendered.Data()
	case stored != nil:
		src.data = stored
	default:
		src.missing = "neither the current inputs can be rendered nor the durable inputs Secret " + jobs.InputsSecretName(p.r.Kind, p.obj.GetName()) + " exists"
	}
	return src, nil
}

// planDigest names the plan Job of the plan waiting in status.plan and the digest it ran, ""
// when unknown.
func (p *pass) planDigest() (job, digest string) {
	planned, ok := p.obj.(infrav1.Planned)
	if !ok || *planned.PlanPreview() == nil {
		return "", ""
	}
	job = (*planned.PlanPreview()).Job
	for i := range p.jobs {
		if p.jobs[i].Name == job {
			return job, p.jobs[i].Annotations[jobs.AnnotationImageDigest]
		}
	}
	return job, ""
}

// pinSource records what a successful apply ran on the durable inputs Secret, read live:
// captf.io/applied, and its image digest (removed when its pod reported none, since the tag may
// since point elsewhere). status.source shows the pin.
func (p *pass) pinSource(ctx context.Context, b *booked) error {
	job := b.job
	durable, err := p.readDurable(ctx)
	if err != nil || durable.Name == "" {
		return err
	}
	if problem := p.durableProblem(durable); problem != "" {
		// Signing it now would vouch for what someone else wrote; the next start refuses it.
		logf.FromContext(ctx).Info("not pinning the applied image on tampered durable inputs", "secret", durable.Name, "job", job.Name)
		return nil
	}
	digest := job.Annotations[jobs.AnnotationImageDigest]
	patch := client.MergeFrom(durable.DeepCopy())
	if durable.Annotations == nil {
		durable.Annotations = map[string]string{}
	}
	before := durable.Annotations[jobs.AnnotationImageDigest]
	durable.Annotations[jobs.AnnotationApplied] = "true"
	recordAppliedExports(durable, job)
	if digest != "" {
		durable.Annotations[jobs.AnnotationImageDigest] = digest
	} else {
		delete(durable.Annotations, jobs.AnnotationImageDigest)
	}
	p.signDurable(durable)
	if err := p.r.Client.Patch(ctx, durable, patch); err != nil {
		return fmt.Errorf("pinning the applied image on the durable inputs: %w", err)
	}
	setSource(p.status(), durable.Annotations[jobs.AnnotationImage], digest)
	if digest != "" {
		if before != digest {
			b.extraEvents = append(b.extraEvents, event{corev1.EventTypeNormal, EventImagePinned,
				fmt.Sprintf("Job %s ran %s; later refresh, drift, destroy and restore runs use it", job.Name, jobs.PinnedReference(durable.Annotations[jobs.AnnotationImage], digest))})
		}
	}
	return nil
}

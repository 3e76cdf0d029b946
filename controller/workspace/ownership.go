package workspace

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/jobs/runkey"
)

// OwnJobs lists obj's retained Jobs from reader: those whose controller reference is obj itself.
// Labels select the candidates but prove nothing, since anyone who may create Jobs can copy them;
// this also leaves out the Jobs of an earlier object of the same name, and Jobs without a known
// op label.
func (r *Reconciler) OwnJobs(ctx context.Context, reader client.Reader, obj client.Object) ([]batchv1.Job, error) {
	var list batchv1.JobList
	if err := reader.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingLabels(jobs.OwnerLabels(r.Kind, obj.GetName()))); err != nil {
		return nil, fmt.Errorf("listing Jobs: %w", err)
	}
	return OwnRuns(list.Items, obj, r.RunKey), nil
}

// ownJobs lists obj's retained Jobs from the Job cache, or through Client without one.
func (r *Reconciler) ownJobs(ctx context.Context, obj client.Object) ([]batchv1.Job, error) {
	if r.Jobs == nil {
		return r.OwnJobs(ctx, r.Client, obj)
	}
	labelled, err := r.Jobs.OwnerJobs(obj.GetNamespace(), r.Kind, obj.GetName())
	if err != nil {
		return nil, fmt.Errorf("listing Jobs: %w", err)
	}
	return OwnRuns(labelled, obj, r.RunKey), nil
}

// OwnRuns keeps the Jobs of labelled whose controller reference is obj, whose op is known and,
// with a key, that the key trusts: the runs of obj that every decision reads, whatever else is
// labelled as its. The controller reference and labels can be copied by anyone who may create
// Jobs, and the annotations rewritten by anyone who may patch them; the signature cannot.
func OwnRuns(labelled []batchv1.Job, obj client.Object, key *runkey.Key) []batchv1.Job {
	var own []batchv1.Job
	for _, j := range labelled {
		// A Job without a known op was not made by the controller, whatever its owner says.
		if OwnedBy(&j, obj) && jobs.OpOf(&j) != "" && (key == nil || key.JobSigned(&j)) {
			own = append(own, j)
		}
	}
	return own
}

// OwnedBy reports whether obj is the controller of the Job (or any object).
func OwnedBy(o metav1.Object, obj client.Object) bool {
	ref := metav1.GetControllerOf(o)
	return ref != nil && ref.UID == obj.GetUID() && ref.Name == obj.GetName()
}

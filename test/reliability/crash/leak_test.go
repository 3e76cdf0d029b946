package crash

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/reliability/rel"
)

// TestCrashAfterBookkeptMarkLeaksNoRunSecret crashes the pass right after it wrote a finished
// Job's bookkept mark, before it deleted the Job's per-run Secret. The restarted controller
// skips the Job (it is marked) and nothing else deletes the Secret while the Job is retained: the
// rendered inputs outlive the run, against docs/controller.md ("It is deleted when the Job
// finishes, so rendered inputs do not outlive the run").
func TestCrashAfterBookkeptMarkLeaksNoRunSecret(t *testing.T) {
	w := newWorld(t, 1, 1)
	tc := w.objects[0]
	w.settle(tc)
	w.finishActive(tc.Name, 1)
	job := w.jobsOf(tc.Name)[0]

	r, fc := w.reconciler()
	fc.SetHook(rel.Hook{After: func(wr rel.Write, err error) error {
		if wr.Kind == "Job" && wr.Bookkept && err == nil {
			fc.Kill()
			return rel.ErrKilled
		}
		return nil
	}})
	for i := 0; i < 5 && !fc.Killed(); i++ {
		_, _ = r.Reconcile(w.ctx, requestFor(tc))
	}
	if !fc.Killed() {
		t.Fatal("the pass never wrote the bookkept mark")
	}
	w.converge()

	var s corev1.Secret
	err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: jobs.RunSecretName(job.Name)}, &s)
	if err == nil {
		t.Fatalf("per-run Secret %s of bookkept Job %s outlived the run", s.Name, job.Name)
	}
	if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

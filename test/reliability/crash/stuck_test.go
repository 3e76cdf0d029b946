package crash

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/reliability/rel"
)

// TestFailedStateAdoptionDoesNotMarkTheJob fails, once, the write that records a successful
// apply's inputs hash on the state Secret (a 503 on the patch). The pass must not mark the Job
// bookkept: the marks are the record that bookkeeping finished. Today Reconcile runs
// afterStatusPatch even when the pass returned that error, so the Job is marked while
// status.activeJob still names it; every later pass finds the finished Job named active, reads
// it live, takes it for cache lag and requeues in 5 s forever — the object never runs again, and
// the state never gets the applied inputs hash.
func TestFailedStateAdoptionDoesNotMarkTheJob(t *testing.T) {
	w := newWorld(t, 3, 1)
	tc := w.objects[0]
	w.settle(tc)
	w.finishActive(tc.Name, 1)
	faulted := false
	_, _, err := w.pass(tc, rel.Hook{Before: func(wr rel.Write) error {
		if !faulted && wr.Verb == "patch" && wr.Kind == "Secret" && wr.Name == state.SecretName(jobs.StateSecretSuffix(w.ns, jobs.KindCluster, tc.Name)) {
			faulted = true
			return rel.FaultUnavailable.Err(wr)
		}
		return nil
	}})
	if !faulted || err == nil {
		t.Fatalf("the fault was not hit (err %v)", err)
	}
	w.converge()
	var cur infrav1.TerraformCluster
	if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(tc), &cur); err != nil {
		t.Fatal(err)
	}
	var st corev1.Secret
	if err := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: state.SecretName(jobs.StateSecretSuffix(w.ns, jobs.KindCluster, tc.Name))}, &st); err != nil {
		t.Fatal(err)
	}
	if cur.Status.ActiveJob != nil || st.Annotations[state.InputsHashAnnotation] == "" {
		t.Fatalf("status.activeJob = %+v, state inputs hash = %q", cur.Status.ActiveJob, st.Annotations[state.InputsHashAnnotation])
	}
}

package crash

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/reliability/rel"
)

// TestJobCreateFaultsKeepOrGiveBackTheLease injects each fault on the Job create: a rejected
// create gives the run Lease back and says JobRejected; a timeout, conflict, 5xx or 429 keeps
// the Lease for the retry. Once the fault stops the object converges.
func TestJobCreateFaultsKeepOrGiveBackTheLease(t *testing.T) {
	w := newWorld(t, 2, len(rel.Faults))
	for i, f := range rel.Faults {
		tc := w.objects[i]
		hook := rel.Hook{Before: func(wr rel.Write) error {
			if wr.Verb == "create" && wr.Kind == "Job" {
				return f.Err(wr)
			}
			return nil
		}}
		var err error
		for p := 0; p < 5; p++ {
			if _, _, err = w.pass(tc, hook); err != nil {
				break
			}
		}
		if err == nil {
			t.Fatalf("%s: no pass reached the Job create", f)
		}
		var l coordinationv1.Lease
		leaseErr := w.c.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: jobs.RunLeaseName(jobs.StateSecretSuffix(w.ns, jobs.KindCluster, tc.Name))}, &l)
		var cur infrav1.TerraformCluster
		if err := w.c.Get(w.ctx, client.ObjectKeyFromObject(tc), &cur); err != nil {
			t.Fatal(err)
		}
		c := conditions.Get(cur.Status.Conditions, conditions.ApplyJobSucceeded)
		if f.Rejects() {
			if leaseErr == nil {
				t.Errorf("%s: the run Lease is still held by %s after a rejected create", f, ptr.Deref(l.Spec.HolderIdentity, ""))
			}
			if c == nil || c.Reason != "JobRejected" {
				t.Errorf("%s: ApplyJobSucceeded = %+v, want JobRejected", f, c)
			}
		} else if leaseErr != nil {
			t.Errorf("%s: the run Lease was given back after a create that proves nothing: %v", f, leaseErr)
		}
		if n := len(w.jobsOf(tc.Name)); n != 0 {
			t.Errorf("%s: %d Jobs after a failed create", f, n)
		}
	}
	w.converge()
	w.checkConverged()
	for _, tc := range w.objects {
		if len(w.jobsOf(tc.Name)) == 0 {
			t.Errorf("%s: no Job once the faults stopped", tc.Name)
		}
	}
	t.Logf("FIGURE faults-on-create: %d faults, each on the Job create; leases kept or given back as documented, all converged", len(rel.Faults))
}

// TestRandomFaultsConverge injects a random fault on a random share of every kind of write
// (before it reaches the API server, or, for faults that prove nothing, after it did) while Jobs
// finish; once the faults stop, every object converges.
func TestRandomFaultsConverge(t *testing.T) {
	seed := rel.Seed()
	t.Logf("seed %d (rerun with CAPTF_SEED=%d)", seed, seed)
	start := time.Now()
	w := newWorld(t, seed, 4)
	injected := map[string]int{}
	total := 0
	for round := 1; round <= 40; round++ {
		for i, tc := range w.objects {
			if w.rng.Float64() < 0.15 {
				w.changeInputs(tc, round*10+i)
			}
			if w.rng.Float64() < 0.6 {
				w.finishActive(tc.Name, 0.6)
			}
			hook := rel.Hook{
				Before: func(wr rel.Write) error {
					if w.rng.Float64() >= 0.2 {
						return nil
					}
					f := rel.Faults[w.rng.IntN(len(rel.Faults))]
					injected[fmt.Sprintf("%-22s before %s", f, describe(wr))]++
					total++
					w.cutOff(wr, false)
					return f.Err(wr)
				},
				After: func(wr rel.Write, err error) error {
					if err != nil || w.rng.Float64() >= 0.1 {
						return nil
					}
					f := []rel.Fault{rel.FaultTimeout, rel.FaultClientTime, rel.FaultInternal, rel.FaultUnavailable}[w.rng.IntN(4)]
					injected[fmt.Sprintf("%-22s after  %s", f, describe(wr))]++
					total++
					w.cutOff(wr, true)
					return f.Err(wr)
				},
			}
			for p := 0; p < 6; p++ {
				res, _, err := w.pass(tc, hook)
				w.check(fmt.Sprintf("round %d", round), tc.Name)
				if err == nil && !workspace.AgainAtOnce(res) {
					break
				}
			}
		}
		w.clock.SetTime(w.clock.Now().Add(11 * time.Minute))
	}
	w.converge()
	leaked := w.checkConverged()
	t.Logf("FIGURE faults: %d faults injected over 40 rounds, %d Jobs finished, %d finish events possibly lost after a faulted mark, %d per-run Secrets left, %s",
		total, len(w.finished), len(w.lost), len(leaked), time.Since(start).Round(time.Millisecond))
	t.Logf("faults injected:\n%s", table(injected))
}

package crash

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/test/reliability/rel"
)

// minKills is how many randomized crashes the suite injects at least (CAPTF_CRASH_KILLS).
func minKills() int {
	if v, err := strconv.Atoi(os.Getenv("CAPTF_CRASH_KILLS")); err == nil && v > 0 {
		return v
	}
	return 200
}

func TestCrashWindows(t *testing.T) {
	seed := rel.Seed()
	t.Logf("seed %d (rerun with CAPTF_SEED=%d)", seed, seed)
	start := time.Now()
	w := newWorld(t, seed, 4)
	want := minKills()
	kills, passes, round := 0, 0, 0
	for kills < want {
		round++
		if round > 20*want {
			t.Fatalf("only %d kills in %d rounds", kills, round)
		}
		for i, tc := range w.objects {
			if w.rng.Float64() < 0.15 {
				w.changeInputs(tc, round*10+i)
			}
			if w.rng.Float64() < 0.6 {
				w.finishActive(tc.Name, 0.6)
			}
			for p := 0; p < 8; p++ {
				passes++
				killed, res, err := w.crashPass(tc)
				if killed {
					kills++
					w.check(fmt.Sprintf("round %d after a kill", round), tc.Name)
					continue // the restart runs the next pass
				}
				if err != nil {
					w.errors++
					t.Logf("pass error (no kill): %v", err)
				}
				w.check(fmt.Sprintf("round %d", round), tc.Name)
				if !res { // no immediate requeue
					break
				}
			}
		}
		// Past any backoff, and now and then past a drift interval.
		w.clock.SetTime(w.clock.Now().Add(11 * time.Minute))
	}
	w.converge()
	leaked := w.checkConverged()
	t.Logf("FIGURE crash: %d kills in %d passes over %d rounds, %d Jobs finished, %d finish events lost in the mark→event window, %d per-run Secrets leaked, %d stuck Jobs started again under their name, %d unexpected pass errors, %s",
		kills, passes, round, len(w.finished), len(w.lost), len(leaked), w.restarted, w.errors, time.Since(start).Round(time.Millisecond))
	t.Logf("crash windows hit (when, write):\n%s", table(w.windows))
}

// crashPass runs one pass that may crash at a random write; it reports whether it was killed,
// whether the pass asked to run again at once, and a pass error.
func (w *world) crashPass(obj interface {
	GetName() string
	GetNamespace() string
}) (bool, bool, error) {
	at, after := -1, false
	if w.rng.Float64() < 0.9 {
		at, after = w.rng.IntN(6), w.rng.IntN(2) == 1
	}
	n := 0
	hook := rel.Hook{
		Before: func(wr rel.Write) error {
			if n == at && !after {
				w.windows["before "+describe(wr)]++
				w.cutOff(wr, false)
				return errKill
			}
			return nil
		},
		After: func(wr rel.Write, err error) error {
			i := n
			n++
			if i == at && after {
				w.windows["after "+describe(wr)]++
				if err == nil {
					w.cutOff(wr, true)
				}
				return errKill
			}
			return nil
		},
	}
	r, fc := w.reconciler()
	fc.SetHook(rel.Hook{
		Before: func(wr rel.Write) error {
			if err := hook.Before(wr); err != nil {
				fc.Kill()
				n++
				return err
			}
			return nil
		},
		After: func(wr rel.Write, err error) error {
			if e := hook.After(wr, err); e != nil {
				fc.Kill()
				return e
			}
			return nil
		},
	})
	res, err := r.Reconcile(w.ctx, requestFor(obj))
	if fc.Killed() {
		if err == nil {
			// A crash the pass swallowed: it must not have gone on writing (the client refuses).
			w.windows["swallowed"]++
		} else if !errors.Is(err, rel.ErrKilled) && !strings.Contains(err.Error(), "injected crash") {
			w.t.Logf("killed pass returned %v", err)
		}
		return true, false, nil
	}
	return false, workspace.AgainAtOnce(res), err
}

var errKill = rel.ErrKilled

// cutOff records what a crash at this write leaves undone for the invariants: a crash after a
// Job's bookkept mark loses its event and may leave its per-run Secret; a crash before the
// per-run Secret's delete leaves it.
func (w *world) cutOff(wr rel.Write, done bool) {
	switch {
	case wr.Kind == "Job" && wr.Bookkept && done:
		w.lost[wr.Name] = true
		w.leakWindow[wr.Name] = true
	case wr.Kind == "Secret" && wr.Verb == "delete" && !done && strings.HasPrefix(wr.Name, "captf-run-"):
		w.leakWindow[strings.TrimPrefix(wr.Name, "captf-run-")] = true
	}
}

func describe(wr rel.Write) string {
	s := wr.Verb + " " + wr.Kind
	switch {
	case wr.Bookkept:
		s += " (bookkept mark)"
	case wr.Kind == "Secret" && strings.HasPrefix(wr.Name, "captf-run-"):
		s += " (per-run)"
	case wr.Kind == "Secret" && strings.HasPrefix(wr.Name, "captf-inputs-"):
		s += " (durable inputs)"
	case wr.Kind == "Secret" && strings.HasPrefix(wr.Name, "captf-state-backup-"):
		s += " (state backup)"
	case wr.Kind == "Secret":
		s += " (state)"
	}
	if wr.Kind == "Job" && wr.Verb == "delete" {
		s += " (prune or stuck)"
	}
	return s
}

package workspace_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// TestStaleStateLocks: before a Job starts, the state lock is released only when the pod that
// took it belongs to the object's own Jobs and is gone or finished; any other holder is kept and
// reported, and the Job starts anyway and waits for the lock.
func TestStaleStateLocks(t *testing.T) {
	ownPod := func() string {
		name, _ := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpApply, Attempt: 7, InputsHash: "h1:earlier"})
		return name + "-x7k2q"
	}()
	tests := []struct {
		name      string
		who       string
		info      string // lock-info annotation; built from who when empty
		pod       corev1.PodPhase
		deleting  bool
		wantStale bool
	}{
		{name: "a lock of a pod of the object's Jobs that is gone is released", who: "root@" + ownPod, wantStale: true},
		{name: "a lock of a pod of the object's Jobs that succeeded is released", who: "root@" + ownPod, pod: corev1.PodSucceeded, wantStale: true},
		{name: "a lock of a pod of the object's Jobs that failed is released", who: "root@" + ownPod, pod: corev1.PodFailed, wantStale: true},
		{name: "a lock of a running pod of the object's Jobs is kept", who: "root@" + ownPod, pod: corev1.PodRunning},
		{name: "a lock of a finished pod being deleted is kept", who: "root@" + ownPod, pod: corev1.PodFailed, deleting: true},
		{name: "a lock of someone else's host is never released", who: "alice@laptop"},
		{name: "a lock of a pod of another object's Jobs is never released", who: "root@" + strings.Replace(ownPod, "web", "api", 1)},
		{name: "a lock whose details do not parse is never released", info: "{not json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			info := tt.info
			if info == "" {
				data, _ := json.Marshal(map[string]string{"ID": "lock-1", "Operation": "OperationTypeApply", "Who": tt.who, "Version": "1.10.10"})
				info = string(data)
			}
			h.lock("lock-1", info)
			if tt.pod != "" {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: ownPod},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "runner:1"}}},
				}
				if tt.deleting {
					pod.Finalizers = []string{"test.captf.io/hold"}
				}
				if err := h.c.Create(h.ctx, pod); err != nil {
					t.Fatal(err)
				}
				pod.Status.Phase = tt.pod
				if err := h.c.Status().Update(h.ctx, pod); err != nil {
					t.Fatal(err)
				}
				if tt.deleting {
					if err := h.c.Delete(h.ctx, pod); err != nil {
						t.Fatal(err)
					}
				}
			}

			tc := h.cluster("web")
			h.settle(tc)
			job := h.runningJob(jobs.KindCluster, "web")
			released := slices.Contains(job.Spec.Template.Spec.Containers[0].Command, "--force-unlock=lock-1")
			if released != tt.wantStale {
				t.Fatalf("Job passes --force-unlock=lock-1: %v, want %v (command %v)", released, tt.wantStale, job.Spec.Template.Spec.Containers[0].Command)
			}
			h.get(tc)
			locked := conditions.Get(tc.Status.Conditions, conditions.StateReadable)
			events := h.events()
			if tt.wantStale {
				if countPrefix(events, "Warning ForceUnlocked") != 1 || locked != nil && locked.Reason == conditions.ReasonStateLocked {
					t.Errorf("events %v, StateReadable %+v; want one ForceUnlocked and no StateLocked", events, locked)
				}
				return
			}
			if locked == nil || locked.Status != metav1.ConditionFalse || locked.Reason != conditions.ReasonStateLocked || countPrefix(events, "Warning StateLocked") != 1 {
				t.Errorf("StateReadable %+v, events %v; want False/StateLocked and one StateLocked event", locked, events)
			}
		})
	}
}

// lock creates the state lock Lease of the cluster web with a holder and lock details.
func (h *harness) lock(holder, info string) {
	h.t.Helper()
	lock := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: h.ns, Name: state.LockLeaseName(jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web")),
			Annotations: map[string]string{workspace.LockInfoAnnotation: info},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)},
	}
	if err := h.c.Create(h.ctx, lock); err != nil {
		h.t.Fatal(err)
	}
}

// TestStateLockTextOthersWroteIsBounded: the lock Lease is written by whoever may write Leases
// in the namespace, and its holder, ID, Who and Operation end up in StateReadable and in the
// StateLocked event. However long they are, the status patch goes through with a short message,
// the event fits an events.k8s.io note (1 KiB), and a lock ID longer than OpenTofu's is never
// released.
func TestStateLockTextOthersWroteIsBounded(t *testing.T) {
	const huge = 40 << 10
	ownPod := func() string {
		name, _ := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpApply, Attempt: 7, InputsHash: "h1:earlier"})
		return name + "-x7k2q"
	}()
	details := func(id, op, who string) string {
		data, _ := json.Marshal(map[string]string{"ID": id, "Operation": op, "Who": who, "Version": "1.10.10"})
		return string(data)
	}
	tests := []struct {
		name     string
		holder   string
		info     string
		wantText string // in the StateReadable message
	}{
		{name: "a 40 KiB Who is cut", holder: "lock-1",
			info: details("lock-1", "OperationTypeApply", strings.Repeat("a", huge)+"@laptop"), wantText: `held by "aaaa`},
		{name: "a Who of control characters, escaped to four times its length, is cut", holder: "lock-1",
			info: details("lock-1", "OperationTypeApply", strings.Repeat("\x01", huge/2)+"@laptop"), wantText: `held by "\x01`},
		{name: "a 40 KiB Who of multibyte characters is cut between characters", holder: "lock-1",
			info: details("lock-1", "OperationTypeApply", strings.Repeat("é", huge/2)+"@laptop"), wantText: `held by "éé`},
		{name: "a 40 KiB operation is cut", holder: "lock-1",
			info: details("lock-1", strings.Repeat("o", huge), "alice@laptop"), wantText: "for oooo"},
		{name: "a 40 KiB holder of unreadable details is cut", holder: strings.Repeat("h", huge),
			info: "{not json", wantText: "lock hhhh"},
		{name: "a 40 KiB lock ID reads as unreadable details and is never released, even for a gone pod of the object's Jobs",
			holder: "lock-1", info: details(strings.Repeat("i", huge), "OperationTypeApply", "root@"+ownPod), wantText: "unreadable details"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			h.lock(tt.holder, tt.info)

			tc := h.cluster("web")
			h.settle(tc) // fails the test when the status patch is rejected
			job := h.runningJob(jobs.KindCluster, "web")
			for _, arg := range job.Spec.Template.Spec.Containers[0].Command {
				if strings.HasPrefix(arg, "--force-unlock") {
					t.Errorf("the Job releases a lock that is not known stale: %.100s...", arg)
				}
			}
			h.get(tc)
			locked := conditions.Get(tc.Status.Conditions, conditions.StateReadable)
			if locked == nil || locked.Status != metav1.ConditionFalse || locked.Reason != conditions.ReasonStateLocked {
				t.Fatalf("StateReadable %.2000v; want False/StateLocked", locked)
			}
			if len(locked.Message) > 1024 || !strings.Contains(locked.Message, tt.wantText) || !utf8.ValidString(locked.Message) {
				t.Errorf("StateReadable message of %d bytes, want at most 1 KiB of valid UTF-8 with %q: %.2000s", len(locked.Message), tt.wantText, locked.Message)
			}
			var stateLocked []string
			for _, e := range h.events() {
				if note, ok := strings.CutPrefix(e, "Warning StateLocked "); ok {
					stateLocked = append(stateLocked, note)
				}
			}
			if len(stateLocked) != 1 || len(stateLocked[0]) > 1024 {
				t.Errorf("StateLocked events %.2000q; want one of at most 1 KiB", stateLocked)
			}
		})
	}
}

// TestJudgeStateLock: the stale-lock rule on its own, as the controller and `kubectl captf
// unlock` apply it to a lock Lease and the pod its holder names.
func TestJudgeStateLock(t *testing.T) {
	ownPod := func() string {
		name, _ := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: "web", Op: jobs.OpApply, Attempt: 3, InputsHash: "h1:x"})
		return name + "-ab12c"
	}()
	lease := func(holder, info string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{workspace.LockInfoAnnotation: info}}}
		if holder != "" {
			l.Spec.HolderIdentity = ptr.To(holder)
		}
		return l
	}
	details := func(who string) string {
		data, _ := json.Marshal(map[string]string{"ID": "lock-1", "Operation": "OperationTypeApply", "Who": who, "Created": "2026-11-01T12:00:00Z"})
		return string(data)
	}
	pod := func(phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{}
		}
		return p
	}
	for _, tt := range []struct {
		rule      string
		lease     *coordinationv1.Lease
		pod       *corev1.Pod
		wantHeld  bool
		wantStale bool
		wantText  string // in HeldBy
	}{
		{rule: "a Lease without a holder is no lock", lease: lease("", details("root@"+ownPod))},
		{rule: "a gone pod of the object's Jobs left a stale lock", lease: lease("lock-1", details("root@"+ownPod)), wantHeld: true, wantStale: true},
		{rule: "a succeeded pod of the object's Jobs left a stale lock", lease: lease("lock-1", details("root@"+ownPod)), pod: pod(corev1.PodSucceeded, false), wantHeld: true, wantStale: true},
		{rule: "a failed pod of the object's Jobs left a stale lock", lease: lease("lock-1", details("root@"+ownPod)), pod: pod(corev1.PodFailed, false), wantHeld: true, wantStale: true},
		{rule: "a running pod of the object's Jobs holds the lock", lease: lease("lock-1", details("root@"+ownPod)), pod: pod(corev1.PodRunning, false), wantHeld: true, wantText: "running pod " + ownPod},
		{rule: "a finished pod being deleted still holds the lock", lease: lease("lock-1", details("root@"+ownPod)), pod: pod(corev1.PodFailed, true), wantHeld: true, wantText: "running pod"},
		{rule: "someone else's host is never stale", lease: lease("lock-1", details("alice@laptop")), wantHeld: true, wantText: `held by "alice@laptop"`},
		{rule: "another object's pod is never stale", lease: lease("lock-1", details("root@"+strings.Replace(ownPod, "web", "api", 1))), wantHeld: true, wantText: "held by"},
		{rule: "unreadable details are never stale", lease: lease("lock-1", "{not json"), wantHeld: true, wantText: "unreadable details"},
	} {
		t.Run(tt.rule, func(t *testing.T) {
			lock, held := workspace.ReadStateLock(tt.lease)
			if held != tt.wantHeld {
				t.Fatalf("held = %v, want %v", held, tt.wantHeld)
			}
			if !held {
				return
			}
			v := workspace.JudgeStateLock(lock, jobs.KindCluster, "web", tt.pod)
			if stale := v.StaleID == "lock-1"; stale != tt.wantStale || (v.HeldBy != "") == tt.wantStale {
				t.Fatalf("verdict %+v, want stale %v", v, tt.wantStale)
			}
			if !strings.Contains(v.HeldBy, tt.wantText) {
				t.Errorf("HeldBy %q lacks %q", v.HeldBy, tt.wantText)
			}
			if lock.Readable && lock.Created != "2026-11-01T12:00:00Z" {
				t.Errorf("Created %q", lock.Created)
			}
		})
	}
}

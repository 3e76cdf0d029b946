package workspace_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

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
			lock := &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: h.ns, Name: state.LockLeaseName(jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web")),
					Annotations: map[string]string{workspace.LockInfoAnnotation: info},
				},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("lock-1")},
			}
			if err := h.c.Create(h.ctx, lock); err != nil {
				t.Fatal(err)
			}
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

package workspace_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"

	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

func (h *harness) backups(kind jobs.Kind, name string) map[string]corev1.Secret {
	h.t.Helper()
	var list corev1.SecretList
	if err := h.c.List(context.Background(), &list, client.InNamespace(h.ns), client.MatchingLabels{workspace.LabelStateBackup: "true"}); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]corev1.Secret{}
	for _, s := range list.Items {
		out[s.Annotations[workspace.AnnotationBackupSerial]] = s
	}
	return out
}

func TestEachNewStateSerialIsBackedUpAndTheNewestFiveKept(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(nil)
	h.settle(tc)
	b := h.backups(jobs.KindCluster, "web")
	one, ok := b["1"]
	if !ok || one.Name != workspace.BackupName(jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web"), 1) || one.OwnerReferences[0].UID != tc.UID {
		t.Fatalf("backups = %v", b)
	}
	if one.Annotations[state.InputsHashAnnotation] != h.inputsHash(tc) {
		t.Errorf("backup annotations = %v", one.Annotations)
	}
	for serial := int64(2); serial <= 7; serial++ {
		h.writeSerial(jobs.KindCluster, "web", 1, serial)
		h.settle(tc)
	}
	b = h.backups(jobs.KindCluster, "web")
	if len(b) != 5 || b["7"].Name == "" || b["3"].Name == "" || b["2"].Name != "" {
		t.Fatalf("backups after serial 7: %d kept (%v)", len(b), keys(b))
	}
	h.get(tc)
	if tc.Status.ObservedStateSerial != 7 {
		t.Errorf("observedStateSerial = %d", tc.Status.ObservedStateSerial)
	}
}

func TestRestoreOfASerialBringsItBackAndIsNotRetriedAfterFailure(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(func(c *infrav1.TerraformCluster) { c.Spec.Drift.IntervalSeconds = ptr.To[int64](0) })
	h.writeSerial(jobs.KindCluster, "web", 1, 2)
	h.settle(tc)
	h.writeSerial(jobs.KindCluster, "web", 1, 3)
	h.settle(tc)

	// An unknown serial starts nothing and says so.
	h.annotate(tc, jobs.AnnotationRestoreState, "9")
	h.settle(tc)
	h.noRunningJob(jobs.KindCluster, "web")
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.RestoreJobSucceeded); c == nil || c.Reason != conditions.ReasonRestoreBackupNotFound {
		t.Fatalf("RestoreJobSucceeded = %+v", c)
	}

	h.annotate(tc, jobs.AnnotationRestoreState, "2")
	h.settle(tc)
	restore := h.runningJob(jobs.KindCluster, "web")
	if jobs.OpOf(&restore) != jobs.OpRestore || restore.Annotations[jobs.AnnotationRestoreSerial] != "2" || !hasArg(restore, "--restore-chunks=1") {
		t.Fatalf("restore Job %s: %v %v", restore.Name, restore.Annotations, command(restore))
	}
	var projected bool
	for _, v := range restore.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.Projected != nil && len(v.Projected.Sources) == 2 && v.Projected.Sources[1].Secret.Items[0].Path == "restore/0" {
			projected = true
		}
	}
	if !projected {
		t.Fatalf("the backup is not projected at restore/0: %+v", restore.Spec.Template.Spec.Volumes)
	}
	run := h.secret(jobs.RunSecretName(restore.Name))
	if string(run.Data["main.tf.json"]) != `{"terraform":{"backend":{"kubernetes":{}}}}` || string(run.Data["terraform.tfvars.json"]) != "{}" {
		t.Fatalf("restore per-run Secret = %v", run.Data)
	}
	h.writeSerial(jobs.KindCluster, "web", 1, 2)
	h.finish(restore, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.get(tc)
	if _, ok := tc.Annotations[jobs.AnnotationRestoreState]; ok || !conditions.IsTrue(tc.Status.Conditions, conditions.RestoreJobSucceeded) {
		t.Fatalf("after the restore: annotations %v, conditions %+v", tc.Annotations, tc.Status.Conditions)
	}
	if ev := h.events(); countPrefix(ev, "Normal StateRestored") != 1 {
		t.Errorf("events = %v", ev)
	}

	// A failed restore of serial 3 is not retried, however long one waits.
	h.annotate(tc, jobs.AnnotationRestoreState, "3")
	h.settle(tc)
	failed := h.runningJob(jobs.KindCluster, "web")
	h.finish(failed, jobs.OutcomeFailed, nil)
	h.settle(tc)
	h.clock.SetTime(h.clock.Now().Add(time.Hour))
	h.settle(tc)
	h.noRunningJob(jobs.KindCluster, "web")
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.RestoreJobSucceeded); c.Status != metav1.ConditionFalse || c.Reason != conditions.ReasonRestoreFailed {
		t.Fatalf("RestoreJobSucceeded = %+v", c)
	}
}

func keys(m map[string]corev1.Secret) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

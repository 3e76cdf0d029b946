package workspace_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// askForParts annotates the cluster web's lock Lease as a run that needs n parts does.
func (h *harness) askForParts(n int) {
	h.t.Helper()
	var lease coordinationv1.Lease
	key := client.ObjectKey{Namespace: h.ns, Name: state.LockLeaseName(jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web"))}
	if err := h.c.Get(h.ctx, key, &lease); err != nil {
		h.t.Fatal(err)
	}
	lease.Annotations = map[string]string{jobs.AnnotationStatePartsWanted: strconv.Itoa(n)}
	if err := h.c.Update(h.ctx, &lease); err != nil {
		h.t.Fatal(err)
	}
}

// existingParts lists the names of the cluster web's state parts that exist.
func (h *harness) existingParts() []string {
	h.t.Helper()
	var out []string
	for _, name := range jobs.StatePartNames(jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web")) {
		if h.secret(name) != nil {
			out = append(out, name)
		}
	}
	return out
}

func TestARunThatAsksForStatePartsGetsThem(t *testing.T) {
	tests := []struct {
		name           string
		asked          int
		serviceAccount string
		wantParts      int
		wantRole       bool
	}{
		{name: "the parts asked for are created in both slots, with a Role that grants them to the runner", asked: 3, wantParts: 3, wantRole: true},
		{name: "no more than the most parts a state may have are created", asked: 99, wantParts: jobs.MaxStateParts, wantRole: true},
		{name: "a run under its own service account gets the parts and no Role: its rights are its owner's", asked: 2, serviceAccount: "mine", wantParts: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, jobs.KindCluster)
			if tt.serviceAccount != "" {
				sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: tt.serviceAccount, Labels: map[string]string{workspace.LabelRunner: "true"}}}
				if err := h.c.Create(h.ctx, sa); err != nil {
					t.Fatal(err)
				}
			}
			tc := h.cluster("web", func(c *infrav1.TerraformCluster) { c.Spec.Jobs.ServiceAccountName = tt.serviceAccount })
			h.settle(tc)
			h.askForParts(tt.asked)
			h.settle(tc)

			suffix := jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web")
			var want []string
			for _, slot := range jobs.StatePartSlots {
				for i := range tt.wantParts {
					want = append(want, jobs.StatePartName(suffix, slot, i))
				}
			}
			if got := h.existingParts(); !slices.Equal(got, want) {
				t.Fatalf("parts %v, want %v", got, want)
			}
			part := h.secret(want[0])
			for key, value := range jobs.OwnerLabels(jobs.KindCluster, "web") {
				if part.Labels[key] != value {
					t.Errorf("part label %s = %q, want %q", key, part.Labels[key], value)
				}
			}
			if _, move := part.Labels["clusterctl.cluster.x-k8s.io/move"]; !move || part.Labels["tfstate"] != "" || part.Labels[jobs.LabelStatePart] != "true" {
				t.Errorf("part labels %v: want the move and part labels and none of the backend's", part.Labels)
			}

			var role rbacv1.Role
			err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: jobs.StatePartsRoleName(suffix)}, &role)
			if !tt.wantRole {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("a parts Role for a run under its own service account (%v)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Verbs, []string{"get", "update"}) || !slices.Equal(role.Rules[0].ResourceNames, jobs.StatePartNames(suffix)) {
				t.Errorf("parts Role rules %+v, want get and update of the parts by name", role.Rules)
			}
			var binding rbacv1.RoleBinding
			if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: jobs.StatePartsRoleName(suffix)}, &binding); err != nil {
				t.Fatal(err)
			}
			if len(binding.Subjects) != 1 || binding.Subjects[0].Name != jobs.RunnerIdentityName(suffix) || metav1.GetControllerOf(&binding) != nil && metav1.GetControllerOf(&binding).UID != tc.UID {
				t.Errorf("parts RoleBinding subjects %+v", binding.Subjects)
			}
		})
	}
}

func TestAPartPlantedUnwritableIsReplaced(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	h.runningJob(jobs.KindCluster, "web")
	name := jobs.StatePartName(jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web"), "a", 0)
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: name}, Immutable: ptr.To(true)}
	if err := h.c.Create(h.ctx, planted); err != nil {
		t.Fatal(err)
	}
	h.askForParts(1)
	h.settle(tc)
	part := h.secret(name)
	if part == nil || part.UID == planted.UID || ptr.Deref(part.Immutable, false) || part.Labels[jobs.LabelStatePart] != "true" {
		t.Fatalf("part %+v, want the planted immutable one replaced by the controller's", part)
	}
}

func TestALeaseAskingForPartsWhileNoJobRunsCreatesNothing(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.provisioned(nil)
	h.noRunningJob(jobs.KindCluster, "web")
	h.askForParts(8)
	h.settle(tc)
	if parts := h.existingParts(); len(parts) != 0 {
		t.Fatalf("parts %v created while no Job runs", parts)
	}
}

func TestStatePartsWithoutTheirRoleGetItBack(t *testing.T) {
	// As after clusterctl move, which carries the parts by their move label and not the Roles.
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	suffix := jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web")
	part := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: jobs.StatePartName(suffix, "b", 0)}}
	if err := h.c.Create(h.ctx, part); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	var role rbacv1.Role
	if err := h.c.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: jobs.StatePartsRoleName(suffix)}, &role); err != nil {
		t.Fatalf("the parts Role: %v", err)
	}
}

// writeChunkedState writes the cluster web's state as the runner's state API keeps a state
// above one Secret: parts in slot a and a manifest in the head.
func (h *harness) writeChunkedState(resources int) {
	h.t.Helper()
	noise := make([]byte, jobs.MaxStatePartBytes*3/2)
	_, _ = rand.Read(noise)
	outputs := `{"health":{"state":"running","healthy":true,"message":null,"reasons":[]},` +
		`"control_plane_endpoint":{"host":"api.web.example","port":6443},"failure_domains":null,"exports":{"noise":"` + hex.EncodeToString(noise) + `"}}`
	var res []string
	for i := range resources {
		res = append(res, fmt.Sprintf(`{"mode":"managed","type":"terraform_data","name":"r%d","instances":[{"attributes":{}}]}`, i))
	}
	doc := fmt.Sprintf(`{"version":4,"serial":1,"lineage":"l","resources":[%s],"outputs":{"workspace":{"value":%s,"sensitive":true}}}`, strings.Join(res, ","), outputs)
	payload, err := state.Compress([]byte(doc))
	if err != nil {
		h.t.Fatal(err)
	}
	parts, manifest, err := jobs.SplitState(payload, "a")
	if err != nil || len(parts) < 2 {
		h.t.Fatalf("%d parts: %v", len(parts), err)
	}
	suffix := jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web")
	for i, p := range parts {
		part := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: jobs.StatePartName(suffix, "a", i)}, Data: map[string][]byte{"tfstate": p}}
		if err := h.c.Create(h.ctx, part); err != nil && !apierrors.IsAlreadyExists(err) {
			h.t.Fatal(err)
		} else if err != nil {
			if err := h.c.Update(h.ctx, part); err != nil {
				h.t.Fatal(err)
			}
		}
	}
	head := h.stateSecret(jobs.KindCluster, "web")
	head.Data = map[string][]byte{"tfstate": manifest}
	if err := h.c.Update(h.ctx, head); err != nil {
		h.t.Fatal(err)
	}
}

func TestAStateKeptInPartsIsReadAndItsPartsGoWithTheObject(t *testing.T) {
	h := newHarness(t, jobs.KindCluster)
	tc := h.cluster("web")
	h.settle(tc)
	// A chunk planted under the name of the coming backup's is replaced, not taken.
	planted := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: jobs.BackupPartName(workspace.BackupName(jobs.StateSecretSuffix(h.ns, jobs.KindCluster, "web"), 1), 1)}, Data: map[string][]byte{"tfstate": []byte("planted")}}
	if err := h.c.Create(h.ctx, planted); err != nil {
		t.Fatal(err)
	}
	h.askForParts(2)
	h.settle(tc)
	h.writeChunkedState(1)
	h.finish(h.runningJob(jobs.KindCluster, "web"), jobs.OutcomeSucceeded, &jobs.RunnerResult{Changes: &jobs.Changes{Add: 1}})
	h.settle(tc)
	h.get(tc)
	if !conditions.IsTrue(tc.Status.Conditions, conditions.OutputsValid) || tc.Spec.ControlPlaneEndpoint.Host != "api.web.example" {
		t.Fatalf("conditions %+v, endpoint %+v: want the outputs of the state in parts", tc.Status.Conditions, tc.Spec.ControlPlaneEndpoint)
	}

	// The serial is backed up whole: chunk 0 in the backup, the others beside it, owned.
	backup, ok := h.backups(jobs.KindCluster, "web")["1"]
	chunks, _ := strconv.Atoi(backup.Annotations[workspace.AnnotationBackupChunks])
	if !ok || chunks < 2 {
		t.Fatalf("backup %s with %d chunks; want one of serial 1 in two or more", backup.Name, chunks)
	}
	for i := 1; i < chunks; i++ {
		part := h.secret(jobs.BackupPartName(backup.Name, i))
		if part == nil || part.OwnerReferences[0].UID != tc.UID || part.Labels[workspace.LabelStateBackupPart] != "true" {
			t.Fatalf("backup chunk %d: %+v", i, part)
		}
	}

	// A planted chunk makes the backup no backup of this object: no restore starts.
	part := h.secret(jobs.BackupPartName(backup.Name, 1))
	original := part.Data["tfstate"]
	part.Data["tfstate"] = []byte("planted")
	if err := h.c.Update(h.ctx, part); err != nil {
		t.Fatal(err)
	}
	h.annotate(tc, jobs.AnnotationRestoreState, "1")
	h.settle(tc)
	h.noRunningJob(jobs.KindCluster, "web")
	h.get(tc)
	if c := conditions.Get(tc.Status.Conditions, conditions.RestoreJobSucceeded); c == nil || c.Reason != conditions.ReasonRestoreBackupNotFound || !strings.Contains(c.Message, "does not match the digest") {
		t.Fatalf("RestoreJobSucceeded = %+v, want the backup refused for its digest", c)
	}

	// Whole again, its restore projects every chunk for the runner to join.
	part = h.secret(jobs.BackupPartName(backup.Name, 1))
	part.Data["tfstate"] = original
	if err := h.c.Update(h.ctx, part); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	restore := h.runningJob(jobs.KindCluster, "web")
	if jobs.OpOf(&restore) != jobs.OpRestore || !hasArg(restore, "--restore-chunks="+strconv.Itoa(chunks)) {
		t.Fatalf("op %s, args %v; want a restore of %d chunks", jobs.OpOf(&restore), restore.Spec.Template.Spec.Containers[0].Command, chunks)
	}
	var projected []string
	for _, v := range restore.Spec.Template.Spec.Volumes {
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil && len(src.Secret.Items) == 1 {
					projected = append(projected, src.Secret.Name+":"+src.Secret.Items[0].Path)
				}
			}
		}
	}
	if len(projected) != chunks || projected[0] != backup.Name+":restore/0" || projected[1] != jobs.BackupPartName(backup.Name, 1)+":restore/1" {
		t.Fatalf("projected %v", projected)
	}
	h.finish(restore, jobs.OutcomeSucceeded, nil)
	h.settle(tc)

	if err := h.c.Delete(h.ctx, tc); err != nil {
		t.Fatal(err)
	}
	h.settle(tc)
	destroy := h.runningJob(jobs.KindCluster, "web")
	h.writeState(jobs.KindCluster, "web", 0)
	h.finish(destroy, jobs.OutcomeSucceeded, nil)
	h.settle(tc)
	h.settle(tc)
	if err := h.c.Get(h.ctx, client.ObjectKeyFromObject(tc), tc); !apierrors.IsNotFound(err) {
		t.Fatalf("the object is still there (%v)", err)
	}
	if parts := h.existingParts(); len(parts) != 0 {
		t.Fatalf("cleanup left the state parts %v", parts)
	}
}

package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/state"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
)

// TestALargeEncryptedStateIsKeptInPartsAndLeavesNothingBehind provisions a cluster whose state,
// encrypted, is several times what one Secret holds: the run asks for parts, the installed
// controller creates them and grants them to the run's identity, the run writes them, the
// controller reads the state through its key, backs it up in chunks, and a deletion destroys it
// and removes every part.
func TestALargeEncryptedStateIsKeptInPartsAndLeavesNothingBehind(t *testing.T) {
	s := newSuite(t)
	keys := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "state-keys", Namespace: s.NS, Labels: map[string]string{infrav1.StateKeyLabel: "true"}},
		StringData: map[string]string{"one": "a-passphrase-for-the-e2e-test-001"},
	}
	if err := s.C.Create(s.Ctx, keys); err != nil {
		t.Fatal(err)
	}
	image := s.stepsImage("ghcr.io/captf-test/steps-large:v1")
	tc := s.Cluster("large", `{"name":"large","blobs":140}`, func(c *infrav1.TerraformCluster) {
		c.Spec.Source.Image = image
		c.Spec.StateEncryption = &infrav1.StateEncryption{SecretRef: infrav1.SourceReference{Name: keys.Name}, KeyID: "one"}
	})
	s.waitRun("large", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)

	suffix := jobs.StateSecretSuffix(s.NS, jobs.KindCluster, "large")
	var head corev1.Secret
	if err := s.C.Get(s.Ctx, client.ObjectKey{Namespace: s.NS, Name: state.SecretName(suffix)}, &head); err != nil {
		t.Fatal(err)
	}
	manifest, ok := jobs.StatePartsOf(head.Data["tfstate"])
	if !ok || manifest.Count < 2 {
		t.Fatalf("the state Secret holds no manifest of two parts or more (%+v)", manifest)
	}
	s.Eventually("the controller reads the state with its key and backs it up in chunks", time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc); err != nil {
			return false, err
		}
		var backups corev1.SecretList
		if err := s.C.List(ctx, &backups, client.InNamespace(s.NS), client.MatchingLabels{workspace.LabelStateBackup: "true"}); err != nil {
			return false, err
		}
		chunked := false
		for _, b := range backups.Items {
			n, _ := strconv.Atoi(b.Annotations[workspace.AnnotationBackupChunks])
			chunked = chunked || n >= 2
		}
		return conditions.IsTrue(tc.Status.Conditions, conditions.StateReadable) && tc.Status.StateKeyID == "one" && chunked, nil
	})

	if err := s.C.Delete(s.Ctx, tc); err != nil {
		t.Fatal(err)
	}
	s.Eventually("the object, its state, parts and backups are gone; the key Secret stays", 3*time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.C.Get(ctx, client.ObjectKeyFromObject(tc), tc); !apierrors.IsNotFound(err) {
			return false, nil
		}
		var secrets corev1.SecretList
		if err := s.C.List(ctx, &secrets, client.InNamespace(s.NS)); err != nil {
			return false, err
		}
		return len(secrets.Items) == 1 && secrets.Items[0].Name == keys.Name, nil
	})
}

package workspace

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/captf/captf/jobs"
)

func TestPlanKeyIsUsedOnlyWhenTheControllerMadeIt(t *testing.T) {
	const uid = types.UID("uid-web")
	labels := jobs.OwnerLabels(jobs.KindCluster, "web")
	ours := func() *corev1.Secret {
		l := jobs.OwnerLabels(jobs.KindCluster, "web")
		l[jobs.LabelClusterName] = "web"
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: jobs.PlanKeySecretName(jobs.KindCluster, "web"), Labels: l,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "TerraformCluster", Name: "web", UID: uid}},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"key": make([]byte, planKeyBytes)},
		}
	}
	for _, tc := range []struct {
		rule   string
		mutate func(*corev1.Secret)
		want   string // a part of the problem; "" when the Secret is ours
	}{
		{"the controller's Secret is used", func(*corev1.Secret) {}, ""},
		{"the cluster-name label is not asked for", func(s *corev1.Secret) { delete(s.Labels, jobs.LabelClusterName) }, ""},
		{"a Secret without an owner reference is not ours", func(s *corev1.Secret) { s.OwnerReferences = nil }, "no owner reference to this object"},
		{"an owner reference to another object (an earlier one of the name) is not ours", func(s *corev1.Secret) { s.OwnerReferences[0].UID = "uid-old" }, "no owner reference to this object"},
		{"without the managed label it is not ours", func(s *corev1.Secret) { delete(s.Labels, jobs.LabelManaged) }, "lacks the label " + jobs.LabelManaged},
		{"an owner label of another object is not ours", func(s *corev1.Secret) { s.Labels[jobs.LabelOwnerName] = "db" }, "lacks the label " + jobs.LabelOwnerName + "=web"},
		{"a key shorter than 32 bytes is not ours", func(s *corev1.Secret) { s.Data["key"] = make([]byte, 16) }, "one key \"key\" of 32 bytes"},
		{"a key longer than 32 bytes is not ours", func(s *corev1.Secret) { s.Data["key"] = make([]byte, 33) }, "one key \"key\" of 32 bytes"},
		{"a missing key is not ours", func(s *corev1.Secret) { s.Data = map[string][]byte{"other": make([]byte, 32)} }, "one key \"key\" of 32 bytes"},
		{"more data than the key is not ours", func(s *corev1.Secret) { s.Data["extra"] = []byte("x") }, "one key \"key\" of 32 bytes"},
		{"another Secret type is not ours", func(s *corev1.Secret) { s.Type = corev1.SecretTypeBasicAuth }, "its type is"},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			s := ours()
			tc.mutate(s)
			got := planKeyProblem(s, uid, labels)
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("planKeyProblem = %q, want %q", got, tc.want)
			}
		})
	}
}

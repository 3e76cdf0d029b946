package workspace

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/jobs"
)

func TestASecretWakesTheObjectItsOwnerLabelsName(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("l", 70)
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&infrav1.TerraformCluster{}, ownerNameIndex, hashedOwnerName).
		WithObjects(
			&infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "short", Namespace: "ns"}},
			&infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: long, Namespace: "ns"}},
		).Build()
	r := New(Reconciler{Client: c}, infrav1.Kinds[0])
	request := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: name}}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   []reconcile.Request
	}{
		{"a name label that is the name wakes that object", jobs.OwnerLabels(jobs.KindCluster, "short"), []reconcile.Request{request("short")}},
		{"a name label that hashes a long name wakes the object of that name", jobs.OwnerLabels(jobs.KindCluster, long),
			[]reconcile.Request{request(long), request(jobs.LabelValue(long))}},
		{"an owner of another kind wakes nothing", jobs.OwnerLabels(jobs.KindMachine, "short"), nil},
		{"a Secret without owner labels wakes nothing", map[string]string{"other": "x"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Labels: tc.labels}}
			if got := r.secretOwners(context.Background(), secret); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("secretOwners = %v, want %v", got, tc.want)
			}
		})
	}
	if got := hashedOwnerName(&infrav1.TerraformCluster{ObjectMeta: metav1.ObjectMeta{Name: "short"}}); got != nil {
		t.Errorf("an object whose name is its label is indexed under %v, want not indexed", got)
	}
}

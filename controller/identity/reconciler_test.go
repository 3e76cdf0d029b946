package identity_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/conditions"
	"github.com/captf/captf/controller/identity"
	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{}))
}

// An identity is ready while its Secret exists in the controller's namespace: a Secret of
// another namespace is never lent, so an identity naming one is not ready, whether it exists or
// not.
func TestAnIdentityIsReadyWhileItsSecretExistsInTheControllersNamespace(t *testing.T) {
	env := testenv.Get(t)
	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "identities"}}); err != nil {
		t.Fatal(err)
	}
	id := &infrav1.TerraformClusterIdentity{ObjectMeta: metav1.ObjectMeta{Name: "aws"},
		Spec: infrav1.TerraformClusterIdentitySpec{SecretRef: infrav1.SecretReference{Name: "aws", Namespace: "identities"}}}
	if err := c.Create(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "aws", Namespace: "elsewhere"}, StringData: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	pointAt := func(namespace string) func() {
		return func() {
			if err := c.Get(ctx, client.ObjectKeyFromObject(id), id); err != nil {
				t.Fatal(err)
			}
			id.Spec.SecretRef.Namespace = namespace
			if err := c.Update(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	recorder := events.NewFakeRecorder(10)
	r := &identity.Reconciler{Client: c, APIReader: c, Recorder: recorder, Clock: clocktesting.NewFakePassiveClock(time.Now()), Namespace: "identities"}
	pass := func() {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(id)})
		if err != nil || res.RequeueAfter != identity.SecretRecheck {
			t.Fatalf("reconcile = %+v, %v; want a look again in %s", res, err, identity.SecretRecheck)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(id), id); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		rule   string
		before func()
		status metav1.ConditionStatus
		reason string
		event  string
	}{
		{"without its Secret an identity is not ready", func() {}, metav1.ConditionFalse, conditions.ReasonSecretNotFound, "Warning IdentitySecretNotFound"},
		{"with its Secret it is", func() {
			if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "aws", Namespace: "identities"}, StringData: map[string]string{"k": "v"}}); err != nil {
				t.Fatal(err)
			}
		}, metav1.ConditionTrue, conditions.ReasonSecretFound, "Normal IdentitySecretFound"},
		{"a Secret outside the controller's namespace is not lent, though it exists", pointAt("elsewhere"),
			metav1.ConditionFalse, conditions.ReasonSecretNotInControllerNamespace, "Warning IdentitySecretNotInControllerNamespace"},
		{"pointed back at the controller's namespace it is ready again", pointAt("identities"),
			metav1.ConditionTrue, conditions.ReasonSecretFound, "Normal IdentitySecretFound"},
	} {
		step.before()
		pass()
		c := conditions.Get(id.Status.Conditions, conditions.Ready)
		if c == nil || c.Status != step.status || c.Reason != step.reason {
			t.Fatalf("%s: Ready = %+v", step.rule, c)
		}
		select {
		case e := <-recorder.Events:
			if len(e) < len(step.event) || e[:len(step.event)] != step.event {
				t.Fatalf("%s: event %q, want %s", step.rule, e, step.event)
			}
		default:
			t.Fatalf("%s: no event", step.rule)
		}
	}
}

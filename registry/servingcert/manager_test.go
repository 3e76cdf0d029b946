package servingcert

import (
	"bytes"
	"encoding/base64"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.Options{SkipCRDs: true})) }

// Against a real API server: the first replica issues the Secret and writes the CA bundle into
// the APIService and the webhook configuration; a second replica serves the same pair without
// writing; a renewal is picked up by both, and the caBundles stay as they were.
func TestManagerIssuesPublishesAndRenews(t *testing.T) {
	env := testenv.Get(t)
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	const ns = "servingcert"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1.servingcert.example.com"},
		"spec": map[string]any{
			"group": "servingcert.example.com", "version": "v1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"name": "server", "namespace": ns, "port": int64(443)},
		},
	}}
	if _, err := dyn.Resource(apiServiceResource).Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webhook := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "servingcert"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate.servingcert.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Name: "server", Namespace: ns, Path: ptr.To("/validate")}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			// Matches nothing, so the unreachable server never answers for the test's writes.
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"servingcert.example.com"}, APIVersions: []string{"v1"}, Resources: []string{"nothing"}}}},
		}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, webhook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg := Config{
		Namespace: ns, SecretName: "server-tls", DNSNames: DNSNames("server", ns), Validity: time.Hour,
		APIServices: []string{"v1.servingcert.example.com"}, ValidatingWebhooks: []string{"servingcert"}, ManagedBy: "test",
	}
	newManager := func() *Manager {
		m, err := NewManager(cfg, kube, dyn, testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first, second := newManager(), newManager()
	if err := first.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	secret, err := kube.CoreV1().Secrets(ns).Get(ctx, cfg.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Type != corev1.SecretTypeTLS || secret.Labels[ManagedByLabel] != "test" {
		t.Errorf("the Secret is of type %q with labels %v", secret.Type, secret.Labels)
	}
	checkCABundles := func(want []byte) {
		t.Helper()
		got, err := dyn.Resource(apiServiceResource).Get(ctx, "v1.servingcert.example.com", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b, _, _ := unstructured.NestedString(got.Object, "spec", "caBundle"); b != base64.StdEncoding.EncodeToString(want) {
			t.Errorf("the APIService's caBundle is not the Secret's CA")
		}
		wh, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "servingcert", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wh.Webhooks[0].ClientConfig.CABundle, want) {
			t.Errorf("the webhook's caBundle is not the Secret's CA")
		}
	}
	checkCABundles(secret.Data[CABundleKey])

	if err := second.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := kube.CoreV1().Secrets(ns).Get(ctx, cfg.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != secret.ResourceVersion {
		t.Error("a second replica rewrote a valid Secret")
	}
	certA, _ := first.Current()
	certB, _ := second.Current()
	if !bytes.Equal(certA, certB) || !bytes.Equal(certA, secret.Data[CertKey]) {
		t.Error("the replicas do not serve the Secret's certificate")
	}

	// Two thirds of the hour later the first replica renews; the second picks it up.
	changed := make(chan struct{}, 1)
	second.OnChange(func() { changed <- struct{}{} })
	later := func() time.Time { return time.Now().Add(41 * time.Minute) }
	first.now, second.now = later, later
	if err := first.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := second.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Error("the second replica did not report a new certificate")
	}
	renewedA, _ := first.Current()
	renewedB, _ := second.Current()
	if bytes.Equal(renewedA, certA) || !bytes.Equal(renewedA, renewedB) {
		t.Error("the renewal is not served by both replicas")
	}
	leaf, err := second.GetCertificate(nil)
	if err != nil || leaf.Leaf.NotAfter.Before(time.Now().Add(time.Hour)) {
		t.Errorf("the served certificate: %v, %v", leaf, err)
	}
	checkCABundles(secret.Data[CABundleKey])
}

// A validity under a minute is refused: renewing would never end.
func TestNewManagerRefusesAShortValidity(t *testing.T) {
	if _, err := NewManager(Config{Namespace: "a", SecretName: "b", DNSNames: []string{"c"}, Validity: time.Second}, nil, nil, testr.New(t)); err == nil {
		t.Error("a validity of a second was accepted")
	}
}

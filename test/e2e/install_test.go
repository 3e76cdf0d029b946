package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/registry/servingcert"
	"github.com/captf/captf/test/system"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// The self-managed install: the API server created its certificate's Secret, wrote the CA into
// the APIService (which skips no verification) and the aggregator serves runs through it.
func TestTheAPIServerKeepsItsOwnCertificate(t *testing.T) {
	s := newSuite(t)
	kube := kubernetes.NewForConfigOrDie(sys.Env.Config)
	secret, err := kube.CoreV1().Secrets(system.Namespace).Get(s.Ctx, system.APIServerSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Type != corev1.SecretTypeTLS || secret.Labels[servingcert.ManagedByLabel] != "captf-apiserver" {
		t.Errorf("Secret %s: type %s, labels %v", secret.Name, secret.Type, secret.Labels)
	}
	apiService, err := dynamic.NewForConfigOrDie(sys.Env.Config).Resource(apiServices).Get(s.Ctx, system.APIServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caBundle, _, _ := unstructured.NestedString(apiService.Object, "spec", "caBundle")
	if caBundle != base64.StdEncoding.EncodeToString(secret.Data[servingcert.CABundleKey]) {
		t.Error("the APIService's caBundle is not the CA of the API server's Secret")
	}
	if skip, _, _ := unstructured.NestedBool(apiService.Object, "spec", "insecureSkipTLSVerify"); skip {
		t.Error("the APIService skips TLS verification")
	}
	if _, err := s.kubectl("", "get", "runs"); err != nil {
		t.Errorf("runs through the aggregator: %v", err)
	}
}

// With a short validity the API server renews its certificate with a third of its life left:
// the new certificate is served, signed by the same CA, so the APIService stays Available and
// runs stay readable through the aggregator.
func TestTheAPIServerRenewsItsCertificate(t *testing.T) {
	s := newSuite(t)
	// A new Secret, so that the certificate gets the short validity.
	if err := sys.RestartAPIServer(s.Ctx, time.Minute, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The next certificate lives the default year again.
		if err := sys.RestartAPIServer(context.Background(), 0, false); err != nil {
			t.Errorf("restarting the API server: %v", err)
		}
	})
	first := servedCertificate(t)
	if life := first.NotAfter.Sub(first.NotBefore); life > 2*time.Minute {
		t.Fatalf("the certificate lives %s, want about a minute", life)
	}
	var renewed *x509.Certificate
	s.Eventually("a renewed certificate is served", 90*time.Second, func(ctx context.Context) (bool, error) {
		renewed = servedCertificate(t)
		return renewed.SerialNumber.Cmp(first.SerialNumber) != 0, nil
	})
	if !bytes.Equal(renewed.RawIssuer, first.RawIssuer) {
		t.Error("the renewal changed the CA")
	}
	if err := sys.Env.WaitForAPIService(s.Ctx, system.APIServiceName, 10*time.Second); err != nil {
		t.Error(err)
	}
	if _, err := s.kubectl("", "get", "runs"); err != nil {
		t.Errorf("runs through the aggregator after the renewal: %v", err)
	}
}

// servedCertificate is the certificate the API server presents now, verified against the CA of
// its Secret for the Service's name, as the aggregator verifies it.
func servedCertificate(t *testing.T) *x509.Certificate {
	t.Helper()
	config := sys.APIServerConfig()
	kube := kubernetes.NewForConfigOrDie(sys.Env.Config)
	secret, err := kube.CoreV1().Secrets(system.Namespace).Get(t.Context(), system.APIServerSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(secret.Data[servingcert.CABundleKey])
	conn, err := tls.Dial("tcp", strings.TrimPrefix(config.Host, "https://"), &tls.Config{RootCAs: roots, ServerName: config.ServerName, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("the served certificate does not verify: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// The controller's metrics are HTTPS for whom the API server authorizes: no token → 401, a
// ServiceAccount without captf-metrics-reader → 403, the scraper bound to it reads
// captf_jobs_total.
func TestControllerMetricsNeedAuthorization(t *testing.T) {
	s := newSuite(t)
	// A finished Job, so that captf_jobs_total has a series.
	s.Cluster("metered", `{"name":"metered"}`)
	s.waitRun("metered", jobs.OpApply, 1, runsv1alpha1.RunPhaseSucceeded)
	status, _, err := sys.GetControllerMetrics(s.Ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if status != http.StatusUnauthorized {
		t.Errorf("anonymous: %d, want 401", status)
	}
	if err := s.C.Create(s.Ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nosy", Namespace: s.NS}}); err != nil {
		t.Fatal(err)
	}
	token, err := sys.Env.ServiceAccountToken(s.Ctx, s.NS, "nosy", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, err = sys.GetControllerMetrics(s.Ctx, token); err != nil || status != http.StatusForbidden {
		t.Errorf("a ServiceAccount without the reader role: %d, %v; want 403", status, err)
	}
	// Bound to the reader role, a ServiceAccount reads them. (Another one: the endpoint caches
	// a denial for a while, as delegated authorization does.)
	if err := s.C.Create(s.Ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper", Namespace: s.NS}}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: s.NS + "-scraper-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "captf-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: s.NS}},
	}
	if err := s.C.Create(s.Ctx, binding); err != nil {
		t.Fatal(err)
	}
	if token, err = sys.Env.ServiceAccountToken(s.Ctx, s.NS, "scraper", time.Hour); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.C.Delete(context.Background(), binding) })
	var body string
	s.Eventually("the bound ServiceAccount reads the metrics", 30*time.Second, func(ctx context.Context) (bool, error) {
		status, b, err := sys.GetControllerMetrics(ctx, token)
		body = b
		return err == nil && status == http.StatusOK, nil
	})
	if !strings.Contains(body, `captf_jobs_total{kind="TerraformCluster",op="apply",result="succeeded"}`) {
		t.Errorf("no captf_jobs_total in the metrics: %.300s", body)
	}
	if _, err := sys.ControllerMetrics(s.Ctx); err != nil {
		t.Errorf("the install's scraper: %v", err)
	}
}

// The controller and the API server run as the install's Deployments, from the images built
// from this tree: each Deployment is Available, which needs its pod's readiness probe to pass,
// and its pod runs the install's image, pulled by digest, under the install's ServiceAccount.
func TestTheInstallRunsAsDeployments(t *testing.T) {
	s := newSuite(t)
	kube := kubernetes.NewForConfigOrDie(sys.Env.Config)
	for _, name := range []string{"captf-controller", "captf-apiserver"} {
		s.Eventually(name+" is Available", time.Minute, func(ctx context.Context) (bool, error) {
			d, err := kube.AppsV1().Deployments(system.Namespace).Get(ctx, name, metav1.GetOptions{})
			return err == nil && d.Status.AvailableReplicas == 1, nil
		})
		pods, err := kube.CoreV1().Pods(system.Namespace).List(s.Ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("%s: pods %v, %v", name, pods, err)
		}
		pod := pods.Items[0]
		if pod.Spec.ServiceAccountName != name {
			t.Errorf("%s runs as %q", name, pod.Spec.ServiceAccountName)
		}
		st := pod.Status.ContainerStatuses[0]
		repository, _, _ := strings.Cut(st.Image, ":")
		if !strings.HasPrefix(st.Image, "ghcr.io/captf/captf-") || !strings.HasPrefix(st.ImageID, repository+"@sha256:") {
			t.Errorf("%s runs image %q (ID %q), want the install's ghcr.io/captf/captf-… by digest", name, st.Image, st.ImageID)
		}
		if !st.Ready {
			t.Errorf("%s is not ready", name)
		}
	}
}

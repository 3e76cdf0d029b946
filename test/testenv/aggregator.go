package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/hack/manifest"
)

// ServingCert is a CA and a serving certificate signed by it, for an aggregated API server on
// loopback. The certificate names localhost, 127.0.0.1 and ::1, and the service DNS name the
// aggregator checks (<service>.<namespace>.svc).
type ServingCert struct {
	// CAFile holds the CA certificate; CAPEM is its content, the APIService's caBundle.
	CAFile string
	CAPEM  []byte
	// CertFile and KeyFile are the serving certificate and its key.
	CertFile string
	KeyFile  string
}

// NewServingCert writes a fresh CA and a serving certificate for service.namespace.svc into a
// directory of the control plane's scratch space.
func (e *Env) NewServingCert(service, namespace string) (ServingCert, error) {
	dir := filepath.Join(e.Dir, "serving-"+namespace+"-"+service)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ServingCert{}, err
	}
	ca, err := newCA(service + "-ca")
	if err != nil {
		return ServingCert{}, err
	}
	leaf, err := ca.issue(service+"."+namespace+".svc", nil, true)
	if err != nil {
		return ServingCert{}, err
	}
	caFile, _, err := ca.write(dir, "ca")
	if err != nil {
		return ServingCert{}, err
	}
	certFile, keyFile, err := leaf.write(dir, "serving")
	if err != nil {
		return ServingCert{}, err
	}
	return ServingCert{CAFile: caFile, CAPEM: ca.certPEM, CertFile: certFile, KeyFile: keyFile}, nil
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as the ServiceAccount
// namespace/name with a token from the TokenRequest API, so that a process runs under exactly
// the RBAC the ServiceAccount is bound to. The ServiceAccount must exist.
func (e *Env) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	token, err := e.ServiceAccountToken(ctx, namespace, name, 24*time.Hour)
	if err != nil {
		return "", err
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	config := clientcmdapi.NewConfig()
	config.Clusters["test"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	config.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	config.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: user}
	config.CurrentContext = "test"
	path := filepath.Join(e.Dir, "kubeconfig-sa-"+namespace+"-"+name)
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		return "", err
	}
	return path, nil
}

// ServiceAccountToken returns a token of the ServiceAccount namespace/name from the
// TokenRequest API, valid for expiry. The ServiceAccount must exist.
func (e *Env) ServiceAccountToken(ctx context.Context, namespace, name string, expiry time.Duration) (string, error) {
	client, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return "", err
	}
	seconds := int64(expiry / time.Second)
	token, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	return token.Status.Token, nil
}

// WaitForHTTPSReady polls https://127.0.0.1:<port>/readyz, trusting only caFile, until it
// answers 200 or timeout passes.
func WaitForHTTPSReady(ctx context.Context, port int, caFile string, timeout time.Duration) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return errors.New("no CA certificate in " + caFile)
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", port)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error // set by each poll, which comes before any wait
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("%s answered %d", url, resp.StatusCode)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", url, last)
		case <-tick.C:
		}
	}
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) { return freePort() }

// StartClusterRoleAggregation runs kube-controller-manager with only the ClusterRole
// aggregation controller, which folds ClusterRoles labelled
// rbac.authorization.k8s.io/aggregate-to-{view,edit,admin} into view, edit and admin. The
// returned function stops it; it also dies with the test process.
func (e *Env) StartClusterRoleAggregation(ctx context.Context) (stop func(), err error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(e.Dir, "kcm-aggregation")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, err
	}
	logPath := filepath.Join(e.Dir, "kcm-aggregation.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(e.BinDir, ControllerManagerBinary),
		"--kubeconfig="+e.Kubeconfig,
		"--authentication-kubeconfig="+e.Kubeconfig,
		"--authorization-kubeconfig="+e.Kubeconfig,
		"--controllers=clusterrole-aggregation-controller",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+certDir,
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	exited := make(chan struct{})
	var exitErr error // read once exited is closed
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	stop = func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	select {
	case <-exited:
		return nil, exitError("kube-controller-manager exited at once", exitErr, logPath)
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	return stop, nil
}

// RegisterAPIService registers an aggregated server listening on a loopback port with the
// aggregator (ApplyAPIService) and waits until the APIService is Available.
func (e *Env) RegisterAPIService(ctx context.Context, namespace, service, apiService string, port int, caPEM []byte) error {
	if err := e.ApplyAPIService(ctx, namespace, service, port, caPEM); err != nil {
		return err
	}
	return e.WaitForAPIService(ctx, apiService, 2*time.Minute)
}

// ApplyAPIService applies the shipped APIService (artifacts/apiserver/apiservice.yaml) for a
// server listening on a loopback port: an ExternalName Service named service in namespace that
// resolves to localhost (the aggregator dials https://<externalName>:<port>), and the
// APIService pointed at it, with caPEM as its caBundle unless caPEM is nil (a server that keeps
// its own certificate writes it).
func (e *Env) ApplyAPIService(ctx context.Context, namespace, service string, port int, caPEM []byte) error {
	svc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %s
  namespace: %s
spec:
  type: ExternalName
  externalName: localhost
  ports:
  - name: https
    port: %d
`, service, namespace, port)
	registration, err := os.ReadFile(filepath.Join(e.RepoRoot, "artifacts", "apiserver", "apiservice.yaml"))
	if err != nil {
		return err
	}
	objs, err := manifest.Decode(registration)
	if err != nil {
		return fmt.Errorf("artifacts/apiserver/apiservice.yaml: %w", err)
	}
	if len(objs) != 1 {
		return fmt.Errorf("artifacts/apiserver/apiservice.yaml: %d objects, want one APIService", len(objs))
	}
	apiService := objs[0]
	if err := unstructured.SetNestedField(apiService.Object, int64(port), "spec", "service", "port"); err != nil {
		return err
	}
	if caPEM != nil {
		if err := unstructured.SetNestedField(apiService.Object, base64.StdEncoding.EncodeToString(caPEM), "spec", "caBundle"); err != nil {
			return err
		}
	}
	encoded, err := json.Marshal(apiService.Object)
	if err != nil {
		return err
	}
	for _, manifest := range []string{svc, string(encoded)} {
		cmd := e.Kubectl(ctx, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl apply: %w\n%s\n%s", err, out, manifest)
		}
	}
	return nil
}

// WaitForAPIService waits until the APIService is Available.
func (e *Env) WaitForAPIService(ctx context.Context, apiService string, timeout time.Duration) error {
	if out, err := e.Kubectl(ctx, "wait", "--for=condition=Available", "apiservice/"+apiService, "--timeout="+timeout.String()).CombinedOutput(); err != nil {
		status, _ := e.Kubectl(ctx, "get", "apiservice", apiService, "-o", "yaml").CombinedOutput()
		return fmt.Errorf("the APIService did not become Available: %w\n%s\n%s", err, out, status)
	}
	return nil
}

// InstallWebhooks creates the validating and mutating webhook configurations of a manifest with
// each webhook pointed at https://127.0.0.1:<port><its service path>, trusting caPEM: the shipped
// configuration, served by a process on loopback. namePrefix goes before each configuration's
// name, as the namePrefix of a provider's kustomization does: Cluster API's providers all name
// theirs mutating-webhook-configuration and validating-webhook-configuration.
func (e *Env) InstallWebhooks(ctx context.Context, manifest, namePrefix string, port int, caPEM []byte) error {
	objs, err := ReadManifests(manifest)
	if err != nil {
		return err
	}
	c, err := client.New(e.Config, client.Options{})
	if err != nil {
		return err
	}
	loopback := func(cc *admissionregistrationv1.WebhookClientConfig) {
		path := ""
		if cc.Service != nil && cc.Service.Path != nil {
			path = *cc.Service.Path
		}
		url := fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
		cc.Service, cc.URL, cc.CABundle = nil, &url, caPEM
	}
	for _, u := range objs {
		var cfg client.Object
		switch u.GetKind() {
		case "ValidatingWebhookConfiguration":
			var v admissionregistrationv1.ValidatingWebhookConfiguration
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
				return fmt.Errorf("reading %s: %w", u.GetName(), err)
			}
			for i := range v.Webhooks {
				loopback(&v.Webhooks[i].ClientConfig)
			}
			cfg = &v
		case "MutatingWebhookConfiguration":
			var m admissionregistrationv1.MutatingWebhookConfiguration
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m); err != nil {
				return fmt.Errorf("reading %s: %w", u.GetName(), err)
			}
			for i := range m.Webhooks {
				loopback(&m.Webhooks[i].ClientConfig)
			}
			cfg = &m
		default:
			continue
		}
		cfg.SetName(namePrefix + cfg.GetName())
		if err := c.Create(ctx, cfg); err != nil {
			return fmt.Errorf("creating %s: %w", cfg.GetName(), err)
		}
	}
	return nil
}

// ServeConversions has the API server convert the versions of every CRD of groups that serves
// more than one, through the webhook at https://127.0.0.1:<port>/convert trusted with caPEM, as
// a provider's install registers it for its Service. Groups match exactly: providers share the
// suffix cluster.x-k8s.io, and each converts only its own kinds.
func (e *Env) ServeConversions(ctx context.Context, groups []string, port int, caPEM []byte) error {
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(e.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.List(ctx, &crds); err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d/convert", port)
	for i := range crds.Items {
		crd := &crds.Items[i]
		if !slices.Contains(groups, crd.Spec.Group) || len(crd.Spec.Versions) < 2 {
			continue
		}
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{
				ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
				ConversionReviewVersions: []string{"v1"},
			},
		}
		if err := c.Update(ctx, crd); err != nil {
			return fmt.Errorf("registering the conversion of %s: %w", crd.Name, err)
		}
	}
	return nil
}

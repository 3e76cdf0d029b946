// Package system starts the whole of captf on a local control plane, for `make run` and the
// end-to-end tests: etcd, kube-apiserver (with front-proxy certificates) and
// kube-controller-manager from bin/, the local node agent that runs the Jobs' pods as local
// processes, the real controller and aggregated API server binaries under the ServiceAccounts
// and RBAC of artifacts/, and the APIService that registers the API server with the
// aggregator.
package system

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/hack/images/build"
	"github.com/captf/captf/hack/manifest"
	"github.com/captf/captf/registry/servingcert"
	"github.com/captf/captf/test/nodeagent"
	"github.com/captf/captf/test/testenv"
)

// Images the local system knows: the runner image (the controller's --runner-image) and the
// sample module image of artifacts/samples.
const (
	RunnerImage     = "ghcr.io/captf/captf-manager:dev"
	SampleNoopImage = "ghcr.io/captf/captf-sample-noop:dev"
	// SampleMachineImage is the sample machine module's image, whose providers (bin/providers)
	// are real and installed from the image's mirror.
	SampleMachineImage = "ghcr.io/captf/captf-sample-machine:dev"
)

// Names of the installation, as in artifacts/.
const (
	Namespace      = "captf-system"
	ControllerSA   = "captf-controller"
	APIServerSA    = "captf-apiserver"
	APIServiceName = "v1alpha1.runs.captf.io"
)

// Options configure a system.
type Options struct {
	// BinDir holds the controller, apiserver and runner binaries. Empty: they are built into
	// the scratch directory with `go build`, so tests always run the code under test.
	BinDir string
	// Images adds image references the node agent can run, beside RunnerImage and the sample.
	Images map[string]nodeagent.Image
	// LogDir receives the processes' logs; defaults to the control plane's scratch directory.
	LogDir string
	// ClusterAPI runs Cluster API's core manager (bin/capi-manager) and its kubeadm bootstrap
	// provider (bin/capi-kubeadm-bootstrap) next to captf, with their CRDs and webhooks served
	// on loopback.
	ClusterAPI bool
	// BootstrapTokenTTL is the kubeadm bootstrap provider's --bootstrap-token-ttl: how long a
	// join token it creates lives, and so how often it refreshes or rotates one. Zero: 15m, its
	// default.
	BootstrapTokenTTL time.Duration
	// Deployments runs the controller and the API server as the install's Deployments: pods of
	// the node agent, from images built from this tree and pulled from an in-process registry
	// (startDeployments). Otherwise they run as local processes with the same flags.
	Deployments bool
}

// ControllerWebhookSecret keeps the controller's certificate in the self-managed install, and
// ControllerMetricsService is the Service its metrics are scraped through.
const (
	ControllerWebhookSecret  = "captf-webhook-server-cert"
	ControllerMetricsService = "captf-controller-metrics"
)

// Overlay is the install the system runs: the API server and the controller keep their own
// serving certificates.
const Overlay = "overlays/self-managed"

// The identity that scrapes metrics, as a Prometheus would: bound to captf-metrics-reader.
const (
	MetricsScraperNamespace = "monitoring"
	MetricsScraperSA        = "prometheus"
	metricsReaderRole       = "captf-metrics-reader"
)

// System is a running captf.
type System struct {
	Env *testenv.Env
	// BinDir holds the product binaries the system runs.
	BinDir string
	// LogDir holds controller.log, apiserver.log and nodeagent.log.
	LogDir string
	// ControllerMetricsURL is the controller's Prometheus endpoint: HTTPS on loopback, for
	// clients authorized to get /metrics (ControllerMetrics reads it as MetricsScraperSA).
	ControllerMetricsURL string
	// APIServerURL is the aggregated API server's own address, which serves /metrics to a
	// client the kube-apiserver's client CA vouches for; APIServerConfig reaches it.
	APIServerURL string
	// APIServerCAFile holds the CA of the certificate the API server keeps in its Secret.
	APIServerCAFile string
	// APIServerCertValidity is the --serving-cert-validity the API server runs with (zero:
	// its default).
	APIServerCertValidity time.Duration

	// webhookPort and webhookCertDir serve the controller's webhooks, set up with its first start.
	webhookPort    int
	webhookCertDir string

	// deployments is Options.Deployments; registry serves the images and ports are the
	// Deployments' loopback ports, in that mode.
	deployments bool
	registry    *httptest.Server
	ports       ports
	// tofu is the static OpenTofu the module images hold.
	tofu string

	processes  []*process
	agent      *nodeagent.Agent
	agentDone  chan error
	agentStops context.CancelFunc
}

// Start brings the whole system up. Stop it with Stop, also when Start fails halfway.
func Start(ctx context.Context, opts Options) (*System, error) {
	env, err := testenv.Start(ctx, testenv.Options{ControllerManager: true, ClusterAPICore: opts.ClusterAPI})
	s := &System{Env: env}
	if err != nil {
		return s, err
	}
	s.LogDir = opts.LogDir
	if s.LogDir == "" {
		s.LogDir = env.Dir
	}
	if err := os.MkdirAll(s.LogDir, 0o755); err != nil {
		return s, err
	}
	s.BinDir = opts.BinDir
	if s.BinDir == "" {
		s.BinDir = filepath.Join(env.Dir, "bin")
		if err := buildBinaries(ctx, env.RepoRoot, s.BinDir); err != nil {
			return s, err
		}
	}
	if err := s.install(ctx); err != nil {
		return s, err
	}
	s.deployments = opts.Deployments
	mirrors := map[string]string{}
	if s.deployments {
		host, err := s.serveImages(ctx)
		if err != nil {
			return s, err
		}
		mirrors[ImageRegistryHost] = host
	}
	if err := s.startNodeAgent(ctx, opts.Images, mirrors); err != nil {
		return s, err
	}
	if s.deployments {
		if err := s.startDeployments(ctx); err != nil {
			return s, err
		}
	} else {
		// The controller first: it makes the run key on its first start, which the API server
		// then finds at once rather than at its next look, so that no plan of a test shows
		// Unverified for want of it.
		if err := s.startController(ctx); err != nil {
			return s, err
		}
		if err := s.startAPIServer(ctx); err != nil {
			return s, err
		}
	}
	if opts.ClusterAPI {
		if err := s.startClusterAPI(ctx); err != nil {
			return s, err
		}
		if err := s.startKubeadmBootstrap(ctx, opts.BootstrapTokenTTL); err != nil {
			return s, err
		}
	}
	return s, nil
}

// The binaries of Cluster API's core manager and of its kubeadm bootstrap provider in bin/
// (make tools).
const (
	ClusterAPIManager       = "capi-manager"
	KubeadmBootstrapManager = "capi-kubeadm-bootstrap"
)

// capiProvider is one of Cluster API's managers as its install names and runs it: the
// directory of its config in the module, the namePrefix and namespace of its kustomization, the
// API groups it converts, its ServiceAccount and its extra flags.
type capiProvider struct {
	binary     string
	configDir  string
	namePrefix string
	namespace  string
	groups     []string
	sa         string
	args       []string
}

// The core manager and the kubeadm bootstrap provider, as their config/default installs them.
// ClusterTopology is an alpha gate of core, off by default: ClusterClass needs it, and the
// Cluster webhook refuses spec.topology without it. MachinePool is on by default in v1.14,
// and named so that the pools captf provisions do not depend on that default.
func coreProvider() capiProvider {
	return capiProvider{
		binary: ClusterAPIManager, configDir: "core", namePrefix: "capi-", namespace: ClusterAPINamespace,
		groups: testenv.ClusterAPICoreGroups, sa: ClusterAPIManagerSA,
		args: []string{"--feature-gates=MachinePool=true,ClusterTopology=true"},
	}
}

func kubeadmBootstrapProvider(tokenTTL time.Duration) capiProvider {
	if tokenTTL == 0 {
		tokenTTL = DefaultBootstrapTokenTTL
	}
	return capiProvider{
		binary: KubeadmBootstrapManager, configDir: filepath.Join("bootstrap", "kubeadm"),
		namePrefix: "capi-kubeadm-bootstrap-", namespace: KubeadmBootstrapNamespace,
		groups: testenv.KubeadmBootstrapGroups, sa: KubeadmBootstrapSA,
		args: []string{"--bootstrap-token-ttl=" + tokenTTL.String()},
	}
}

// DefaultBootstrapTokenTTL is the kubeadm bootstrap provider's own default token lifetime.
const DefaultBootstrapTokenTTL = 15 * time.Minute

// startClusterAPI runs Cluster API's core manager (startCAPIProvider).
func (s *System) startClusterAPI(ctx context.Context) error {
	return s.startCAPIProvider(ctx, coreProvider())
}

// startKubeadmBootstrap runs Cluster API's kubeadm bootstrap provider (startCAPIProvider), which
// writes the bootstrap data of every Machine and MachinePool that names a KubeadmConfig.
func (s *System) startKubeadmBootstrap(ctx context.Context, tokenTTL time.Duration) error {
	return s.startCAPIProvider(ctx, kubeadmBootstrapProvider(tokenTTL))
}

// startCAPIProvider runs one of Cluster API's managers as a local process under the identity
// its install gives it (clusterAPIIdentity), its webhooks (defaulting, validation, and the
// conversion of its CRDs' older versions) registered with the API server on loopback with a
// generated certificate, and waits until it is ready.
func (s *System) startCAPIProvider(ctx context.Context, p capiProvider) error {
	manager := filepath.Join(s.Env.BinDir, p.binary)
	if _, err := os.Stat(manager); err != nil {
		return fmt.Errorf("%s is missing (run `make tools`): %w", p.binary, err)
	}
	dir, err := testenv.ClusterAPIDir()
	if err != nil {
		return err
	}
	config := filepath.Join(dir, p.configDir, "config")
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	healthPort, err := testenv.FreePort()
	if err != nil {
		return err
	}
	certDir, caPEM, err := s.webhookCerts(p.namePrefix+"webhook-service", p.namespace)
	if err != nil {
		return err
	}
	if err := s.Env.InstallWebhooks(ctx, filepath.Join(config, "webhook", "manifests.yaml"), p.namePrefix, port, caPEM); err != nil {
		return err
	}
	if err := s.Env.ServeConversions(ctx, p.groups, port, caPEM); err != nil {
		return err
	}
	kubeconfig, err := s.clusterAPIIdentity(ctx, filepath.Join(config, "rbac", "role.yaml"), p.namePrefix+"manager-role", p.namespace, p.sa)
	if err != nil {
		return err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig, "--leader-elect=false",
		"--health-addr=127.0.0.1:" + strconv.Itoa(healthPort), "--diagnostics-address=127.0.0.1:0", "--insecure-diagnostics",
		"--webhook-port=" + strconv.Itoa(port), "--webhook-cert-dir=" + certDir,
	}, p.args...)
	if err := s.run(p.binary, manager, args...); err != nil {
		return err
	}
	if err := waitForReady(ctx, "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/readyz", 2*time.Minute); err != nil {
		return fmt.Errorf("%s is not ready: %w; log: %s", p.binary, err, s.Log(p.binary))
	}
	return nil
}

// Cluster API's managers run as these ServiceAccounts, each bound to its ClusterRole.
const (
	ClusterAPINamespace       = "capi-system"
	ClusterAPIManagerSA       = "capi-manager"
	KubeadmBootstrapNamespace = "capi-kubeadm-bootstrap-system"
	KubeadmBootstrapSA        = "capi-kubeadm-bootstrap-manager"
)

// clusterAPIIdentity gives one of Cluster API's managers the identity its install does: the
// ServiceAccount sa in namespace bound to the ClusterRole of the module's roleFile, named role as
// its kustomization prefixes it, and returns a kubeconfig for it. So the manager gets no more
// than its own RBAC, and what captf's objects need from it is proven under that RBAC.
func (s *System) clusterAPIIdentity(ctx context.Context, roleFile, role, namespace, sa string) (string, error) {
	objs, err := testenv.ReadManifests(roleFile)
	if err != nil {
		return "", err
	}
	c, err := client.New(s.Env.Config, client.Options{})
	if err != nil {
		return "", err
	}
	create := func(obj client.Object) error {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
		return nil
	}
	for _, obj := range objs {
		if obj.GetKind() != "ClusterRole" {
			continue
		}
		obj.SetName(role)
		if err := create(obj); err != nil {
			return "", err
		}
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: namespace}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role + "binding"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}},
		},
	} {
		if err := create(obj); err != nil {
			return "", err
		}
	}
	return s.Env.ServiceAccountKubeconfig(ctx, namespace, sa)
}

// buildBinaries compiles the three product binaries, static as the images hold them.
func buildBinaries(ctx context.Context, repo, dir string) error {
	_, err := build.BuildBinaries(ctx, repo, dir, build.Controller, build.APIServerBinary, build.Runner)
	return err
}

// install applies the rendered install (Overlay) but what local processes replace: the
// Deployments run as processes, the API server's Service and the APIService point at its
// loopback port (startAPIServer), and the webhook configuration at the controller's
// (setUpWebhooks). It adds the identity that scrapes metrics.
func (s *System) install(ctx context.Context) error {
	objs, err := manifest.Kustomize(filepath.Join(s.Env.RepoRoot, "artifacts", Overlay))
	if err != nil {
		return err
	}
	var keep []*unstructured.Unstructured
	for _, obj := range objs {
		switch {
		case obj.GetKind() == "CustomResourceDefinition", obj.GetKind() == "Deployment",
			obj.GetKind() == "APIService", obj.GetKind() == "ValidatingWebhookConfiguration",
			obj.GetKind() == "Service" && (obj.GetName() == APIServerSA || obj.GetName() == webhookService):
			continue
		}
		keep = append(keep, obj)
	}
	if err := s.Env.ApplyObjects(ctx, keep...); err != nil {
		return err
	}
	c, err := client.New(s.Env.Config, client.Options{})
	if err != nil {
		return err
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: MetricsScraperNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: MetricsScraperSA, Namespace: MetricsScraperNamespace}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "monitoring-" + metricsReaderRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: metricsReaderRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: MetricsScraperSA, Namespace: MetricsScraperNamespace}},
		},
	} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func (s *System) startNodeAgent(ctx context.Context, extra map[string]nodeagent.Image, mirrors map[string]string) error {
	images := map[string]nodeagent.Image{}
	if !s.deployments {
		// Without the registry, the runner and the sample module image are mapped to files.
		images[RunnerImage] = nodeagent.Image{Paths: map[string]string{"/runner": filepath.Join(s.BinDir, "runner")}}
		images[SampleNoopImage] = s.moduleImage(filepath.Join(s.Env.RepoRoot, "artifacts", "samples", "modules", "noop"))
		machine := s.moduleImage(filepath.Join(s.Env.RepoRoot, "artifacts", "samples", "modules", "machine"))
		machine.Paths["/captf/providers"] = filepath.Join(s.Env.BinDir, "providers")
		images[SampleMachineImage] = machine
	}
	for ref, img := range extra {
		images[ref] = img
	}
	agent, err := nodeagent.New(nodeagent.Config{
		RESTConfig:         s.Env.Config,
		WorkDir:            filepath.Join(s.Env.Dir, "nodeagent"),
		Images:             images,
		RewriteVolumeFiles: true,
		Mirrors:            mirrors,
		BindAllPods:        true,
	})
	if err != nil {
		return err
	}
	agentCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.agent, s.agentStops, s.agentDone = agent, cancel, make(chan error, 1)
	go func() { s.agentDone <- agent.Run(agentCtx) }()
	return nil
}

// moduleImage is the mapping of a module image whose module is the directory dir, with
// OpenTofu from bin/ as its runtime, for the node agent without a registry.
func (s *System) moduleImage(dir string) nodeagent.Image {
	return nodeagent.Image{Paths: map[string]string{
		"/captf/module":  dir,
		"/captf/runtime": filepath.Join(s.Env.BinDir, testenv.TofuBinary),
	}}
}

// PushModuleImage pushes a module image under ref (a name and tag under ImageRegistryHost, e.g.
// SampleNoopImage): the module directory dir with OpenTofu as its runtime. Jobs that start
// afterwards and name ref run it, while <repository>@<old digest> still runs what ref was
// before. With Options.Deployments the image is built and pushed to the system's registry;
// otherwise the node agent maps ref to the files. It returns the image's digest (sha256:<hex>),
// which pods report in their containers' imageID as <repository>@<digest>.
func (s *System) PushModuleImage(ctx context.Context, ref, dir string) (string, error) {
	if !s.deployments {
		return s.agent.PushImage(ref, s.moduleImage(dir))
	}
	return s.pushModuleImage(ctx, ref, dir)
}

// startAPIServer runs the API server the way the install's Deployment does, keeping its own
// serving certificate in the Secret APIServerSecret, and waits until the aggregator finds the
// APIService Available, with the CA the server wrote into it.
func (s *System) startAPIServer(ctx context.Context) error {
	kubeconfig, err := s.Env.ServiceAccountKubeconfig(ctx, Namespace, APIServerSA)
	if err != nil {
		return err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	if err := s.Env.ApplyAPIService(ctx, Namespace, APIServerSA, port, nil); err != nil {
		return err
	}
	args := []string{
		"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
		"--serving-cert-secret=" + APIServerSecret, "--serving-cert-namespace=" + Namespace,
		"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
	}
	if s.APIServerCertValidity != 0 {
		args = append(args, "--serving-cert-validity="+s.APIServerCertValidity.String())
	}
	if err := s.run("apiserver", filepath.Join(s.BinDir, "apiserver"), args...); err != nil {
		return err
	}
	if err := s.waitForAPIServerTLS(ctx, port); err != nil {
		return err
	}
	if err := s.Env.WaitForAPIService(ctx, APIServiceName, 2*time.Minute); err != nil {
		return fmt.Errorf("%w; log: %s", err, tail(filepath.Join(s.LogDir, "apiserver.log")))
	}
	s.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(port)
	return s.writeAPIServerCA(ctx)
}

// APIServerSecret is where the API server keeps its serving certificate.
const APIServerSecret = "captf-apiserver-tls"

// writeAPIServerCA writes the CA bundle of the API server's Secret into APIServerCAFile.
func (s *System) writeAPIServerCA(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(s.Env.Config)
	if err != nil {
		return err
	}
	secret, err := kube.CoreV1().Secrets(Namespace).Get(ctx, APIServerSecret, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.APIServerCAFile = filepath.Join(s.Env.Dir, "apiserver-ca.crt")
	return os.WriteFile(s.APIServerCAFile, secret.Data[corev1.ServiceAccountRootCAKey], 0o600)
}

// APIServerConfig is an admin configuration that reaches the API server directly, past the
// aggregator, verifying its certificate as the aggregator does: for the Service's DNS name,
// against the CA the server keeps.
func (s *System) APIServerConfig() *rest.Config {
	direct := rest.CopyConfig(s.Env.Config)
	direct.Host, direct.CAData, direct.CAFile = s.APIServerURL, nil, s.APIServerCAFile
	direct.ServerName = APIServerSA + "." + Namespace + ".svc"
	return direct
}

// RestartAPIServer stops the API server and starts it again, with validity as its
// --serving-cert-validity (zero: the default). newSecret deletes its certificate's Secret while
// it is stopped, so that it issues a new CA and certificate with that validity.
func (s *System) RestartAPIServer(ctx context.Context, validity time.Duration, newSecret bool) error {
	if err := s.StopProcess("apiserver"); err != nil {
		return err
	}
	if newSecret {
		kube, err := kubernetes.NewForConfig(s.Env.Config)
		if err != nil {
			return err
		}
		if err := kube.CoreV1().Secrets(Namespace).Delete(ctx, APIServerSecret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	s.APIServerCertValidity = validity
	if s.deployments {
		return s.restartAPIServerDeployment(ctx, validity)
	}
	return s.startAPIServer(ctx)
}

func (s *System) startController(ctx context.Context) error {
	kubeconfig, err := s.Env.ServiceAccountKubeconfig(ctx, Namespace, ControllerSA)
	if err != nil {
		return err
	}
	probePort, err := testenv.FreePort()
	if err != nil {
		return err
	}
	metricsPort, err := testenv.FreePort()
	if err != nil {
		return err
	}
	s.ControllerMetricsURL = "https://127.0.0.1:" + strconv.Itoa(metricsPort) + "/metrics"
	if s.webhookPort == 0 {
		if err := s.setUpWebhooks(ctx); err != nil {
			return err
		}
	}
	// The controller's namespace is the install's, as the Deployment's POD_NAMESPACE makes it:
	// there it keeps the run key, which the API server reads from its own.
	if err := s.run("controller", filepath.Join(s.BinDir, "controller"),
		"--kubeconfig="+kubeconfig, "--runner-image="+RunnerImage, "--controller-namespace="+Namespace,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metricsPort), "--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probePort),
		"--webhook-port="+strconv.Itoa(s.webhookPort), "--webhook-cert-dir="+s.webhookCertDir,
	); err != nil {
		return err
	}
	// The API server calls the webhooks from now on: the controller must be serving them, which
	// its readiness includes.
	if err := waitForReady(ctx, "http://127.0.0.1:"+strconv.Itoa(probePort)+"/readyz", time.Minute); err != nil {
		return err
	}
	// The metrics server starts beside the probes: wait until it answers at all.
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, _, err := s.GetControllerMetrics(ctx, "")
		return err == nil, nil
	})
}

// ControllerMetrics reads the controller's metrics as MetricsScraperSA, which the install's
// captf-metrics-reader lets get /metrics.
func (s *System) ControllerMetrics(ctx context.Context) (string, error) {
	token, err := s.Env.ServiceAccountToken(ctx, MetricsScraperNamespace, MetricsScraperSA, time.Hour)
	if err != nil {
		return "", err
	}
	status, body, err := s.GetControllerMetrics(ctx, token)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("the controller's metrics: %d: %.200s", status, body)
	}
	return body, nil
}

// GetControllerMetrics gets the controller's metrics with a bearer token (none when empty) and
// returns the status code and body. Run as the install's Deployments, the controller serves them
// with the certificate it keeps in captf-webhook-server-cert, verified here as a Prometheus
// scrape verifies it: against that Secret's ca.crt, with the metrics Service's name. Run as a
// process with certificates from files, it signs its metrics certificate itself, which is not
// verified: what is tested there is who may read.
func (s *System) GetControllerMetrics(ctx context.Context, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.ControllerMetricsURL, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	tlsConfig := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a process run's metrics certificate is self-signed
	if s.deployments {
		kube, err := kubernetes.NewForConfig(s.Env.Config)
		if err != nil {
			return 0, "", err
		}
		secret, err := kube.CoreV1().Secrets(Namespace).Get(ctx, ControllerWebhookSecret, metav1.GetOptions{})
		if err != nil {
			return 0, "", fmt.Errorf("reading the controller's certificate Secret: %w", err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(secret.Data[servingcert.CABundleKey])
		tlsConfig = &tls.Config{RootCAs: roots, ServerName: ControllerMetricsService + "." + Namespace + ".svc", MinVersion: tls.VersionTLS12}
	}
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// waitForReady polls a plain-HTTP readiness endpoint until it answers 200.
func waitForReady(ctx context.Context, url string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// setUpWebhooks gives the controller a serving certificate and registers the shipped webhook
// configuration with the API server, pointed at the controller on loopback.
func (s *System) setUpWebhooks(ctx context.Context) error {
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	dir, caPEM, err := s.webhookCerts("captf-webhook-service", Namespace)
	if err != nil {
		return err
	}
	manifest := filepath.Join(s.Env.RepoRoot, "artifacts", "controller", "webhook.yaml")
	if err := s.Env.InstallWebhooks(ctx, manifest, "", port, caPEM); err != nil {
		return err
	}
	s.webhookPort, s.webhookCertDir = port, dir
	return nil
}

// webhookCerts writes a fresh CA and a serving certificate for service.namespace.svc (and
// loopback) as tls.crt and tls.key in a directory of their own, and returns it with the CA.
func (s *System) webhookCerts(service, namespace string) (dir string, caPEM []byte, err error) {
	cert, err := s.Env.NewServingCert(service, namespace)
	if err != nil {
		return "", nil, err
	}
	dir = filepath.Join(s.Env.Dir, "webhook-certs-"+service)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	for from, to := range map[string]string{cert.CertFile: "tls.crt", cert.KeyFile: "tls.key"} {
		data, err := os.ReadFile(from)
		if err != nil {
			return "", nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, to), data, 0o600); err != nil {
			return "", nil, err
		}
	}
	return dir, cert.CAPEM, nil
}

// process is a product binary the system runs.
type process struct {
	name string
	cmd  *exec.Cmd
	// exited is closed once the process has exited.
	exited chan struct{}
}

// run starts a binary with its output in <LogDir>/<name>.log. It dies with this process.
func (s *System) run(name, path string, args ...string) error {
	log, err := os.Create(filepath.Join(s.LogDir, name+".log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, exited: make(chan struct{})}
	go func() {
		// The exit error is not kept: the system ends its processes by signal, which is all
		// the error would say, and a process that fails on its own says why in its log.
		_ = cmd.Wait()
		close(p.exited)
	}()
	s.processes = append(s.processes, p)
	return nil
}

// StopProcess kills a running product binary at once (SIGKILL), as a crash would; StartController
// starts the controller again. With Options.Deployments, name (controller or apiserver) names a
// Deployment, scaled to zero with its pods killed.
func (s *System) StopProcess(name string) error {
	if s.deployments {
		return s.scaleDeployment(context.Background(), "captf-"+name, 0)
	}
	for i, p := range s.processes {
		if p.name == name {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
			s.processes = append(s.processes[:i], s.processes[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("no running %s", name)
}

// StartController starts the controller again after StopProcess.
func (s *System) StartController(ctx context.Context) error {
	if s.deployments {
		if err := s.scaleDeployment(ctx, "captf-controller", 1); err != nil {
			return err
		}
		return s.waitForController(ctx)
	}
	return s.startController(ctx)
}

// Stop stops everything Start started.
func (s *System) Stop() error {
	var errs []error
	for _, p := range s.processes {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	s.processes = nil
	if s.agentStops != nil && s.deployments {
		// The Deployments' pods first, while the API server still answers their last calls.
		for _, name := range []string{"controller", "apiserver"} {
			if err := s.StopProcess(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if s.agentStops != nil {
		s.agentStops()
		if err := <-s.agentDone; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("node agent: %w", err))
		}
	}
	if s.registry != nil {
		s.registry.Close()
	}
	if s.Env != nil {
		if err := s.Env.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Log returns the end of a process's log (controller, apiserver), for failure messages.
func (s *System) Log(name string) string {
	if s.deployments && (name == "controller" || name == "apiserver") {
		return tailString(s.podLog(name))
	}
	return tail(filepath.Join(s.LogDir, name+".log"))
}

func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tailString(string(data))
}

func tailString(data string) string {
	const maxTail = 4000
	if len(data) > maxTail {
		data = data[len(data)-maxTail:]
	}
	return data
}

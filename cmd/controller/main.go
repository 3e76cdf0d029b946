// Command controller is the captf manager: it reconciles TerraformCluster, TerraformMachine and
// TerraformMachinePool and drives each of their operations as one Kubernetes Job.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/webhooks"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/registry/servingcert"
)

func main() {
	var (
		metricsAddr   string
		probeAddr     string
		leaderElect   bool
		leaderElectNS string
		runnerImage   string
		concurrency   int
		webhookPort   int
		webhookCerts  string
		metricsSecure bool
		metricsCerts  string
		webhookSecret string
		webhookSvc    string
		webhookConfig string
		certValidity  time.Duration
		requirePolicy bool
		namespace     string
		allowedImages string
		metricsSvc    string
		scope         controller.Scope
		zapOpts       = zap.Options{}
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to clients the API server authenticates (TokenReview) and authorizes (SubjectAccessReview for get on the /metrics path); false serves plain HTTP to anyone.")
	flag.StringVar(&metricsCerts, "metrics-cert-dir", "", "Directory holding the metrics' serving certificate, tls.crt and tls.key; empty: a self-signed one.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the namespace the manager runs in).")
	flag.StringVar(&runnerImage, "runner-image", os.Getenv("CAPTF_MANAGER_IMAGE"), "Image of the Jobs' runner init container, which ships /runner (default $CAPTF_MANAGER_IMAGE).")
	flag.IntVar(&concurrency, "concurrency", 10, "How many objects of each kind are reconciled at once.")
	flag.IntVar(&webhookPort, "webhook-port", 0, "Port the admission webhooks are served on; 0 serves none.")
	flag.StringVar(&webhookCerts, "webhook-cert-dir", "", "Directory holding the webhooks' serving certificate, tls.crt and tls.key.")
	flag.StringVar(&webhookSecret, "webhook-cert-secret", "", "Keep the webhooks' serving certificate in this Secret of the pod's namespace instead of --webhook-cert-dir: created on first start, renewed with a third of its life left, its CA written into the webhook configuration.")
	flag.StringVar(&webhookSvc, "webhook-service", "captf-webhook-service", "The Service the API server calls the webhooks through; the self-managed certificate is for <service>.<namespace>.svc.")
	flag.StringVar(&metricsSvc, "metrics-service", "captf-controller-metrics", "The Service metrics are scraped through; the self-managed certificate (--webhook-cert-secret) also names <service>.<namespace>.svc and serves metrics when --metrics-cert-dir is empty.")
	flag.StringVar(&webhookConfig, "webhook-configuration", "captf-validating-webhook-configuration", "The ValidatingWebhookConfiguration whose caBundle gets the self-managed certificate's CA.")
	flag.DurationVar(&certValidity, "webhook-cert-validity", 365*24*time.Hour, "Lifetime of the self-managed webhook certificate; its CA lives ten times as long.")
	flag.BoolVar(&requirePolicy, "require-approval-policy", true, "Act on an approval annotation only while the ValidatingAdmissionPolicyBinding "+workspace.ApprovalPolicyName+" keeps approvals to the runs API server; false acts on them as the annotations hold them, with an ApprovalUnguarded event, though anyone who may edit the object could have written them.")
	flag.StringVar(&allowedImages, "allowed-images", "*", "Comma-separated module images the install runs: repository prefixes (registry.example/modules), digests (sha256:<hex>) or * for any. A TerraformClusterIdentity's spec.allowedImages narrows it for the runs that get its credentials.")
	flag.StringVar(&namespace, "controller-namespace", "", "The namespace the controller runs in, the only one whose Secrets a TerraformClusterIdentity may lend (default: $POD_NAMESPACE, else the pod's namespace, else "+defaultNamespace+").")
	flag.StringVar(&scope.Namespace, "namespace", "", "Namespace whose objects the controller reconciles and whose Jobs it follows; all namespaces when empty.")
	flag.StringVar(&scope.WatchFilter, "watch-filter", "", "Label value: only the TerraformClusters, TerraformMachines and TerraformMachinePools labelled "+clusterv1.WatchLabel+" with this value are reconciled, and their Jobs carry the same label; Cluster API's objects and identities are read whatever their labels. Empty reconciles every object.")
	zapOpts.BindFlags(flag.CommandLine)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags]\n\nThe captf controller reconciles TerraformCluster, TerraformMachine and TerraformMachinePool\nand runs their Terraform/OpenTofu operations as Kubernetes Jobs.\n\nFlags:\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	if runnerImage == "" {
		log.Error(nil, "--runner-image (or $CAPTF_MANAGER_IMAGE) is required")
		os.Exit(2)
	}

	if err := scope.Validate(); err != nil {
		log.Error(err, "--namespace or --watch-filter is invalid")
		os.Exit(2)
	}
	log.Info("objects the controller reconciles (--namespace, --watch-filter; empty is all)", "namespace", scope.Namespace, "watchFilter", scope.WatchFilter)

	if namespace == "" {
		namespace = controllerNamespace()
	}
	log.Info("identities lend Secrets of the controller's namespace only", "namespace", namespace)

	allowed := splitList(allowedImages)
	log.Info("module images the install allows (--allowed-images)", "allowedImages", allowed)

	restConfig := ctrl.GetConfigOrDie()
	ctx := ctrl.SetupSignalHandler()
	metrics := metricsserver.Options{BindAddress: metricsAddr, SecureServing: metricsSecure, CertDir: metricsCerts}
	if metricsSecure {
		// Only those allowed to get /metrics read it: a ServiceAccount bound to captf-metrics-reader.
		metrics.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	opts := ctrl.Options{
		Scheme:                  controller.NewScheme(),
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "controller-leader-election-captf",
		LeaderElectionNamespace: leaderElectNS,
	}
	if webhookPort != 0 {
		server := webhook.Options{Port: webhookPort, CertDir: webhookCerts}
		if webhookSecret != "" {
			certs, err := webhookCertManager(restConfig, webhookSecret, webhookSvc, metricsSvc, webhookConfig, certValidity)
			if err != nil {
				log.Error(err, "unable to keep the webhooks' serving certificate")
				os.Exit(1)
			}
			// The webhooks listen only with a certificate their configuration already trusts.
			if err := certs.Start(ctx); err != nil {
				log.Error(err, "unable to keep the webhooks' serving certificate")
				os.Exit(1)
			}
			useCerts := func(c *tls.Config) { c.GetCertificate = certs.GetCertificate }
			server.TLSOpts = append(server.TLSOpts, useCerts)
			if metricsCerts == "" {
				// The same certificate names the metrics Service, so a scrape can verify it
				// against the Secret's ca.crt.
				metrics.TLSOpts = append(metrics.TLSOpts, useCerts)
			}
		}
		opts.WebhookServer = webhook.NewServer(server)
	}
	opts.Metrics = metrics
	mgr, err := ctrl.NewManager(restConfig, controller.ManagerOptions(opts, scope))
	if err != nil {
		log.Error(err, "unable to create the manager")
		os.Exit(1)
	}
	if err := controller.Setup(mgr, controller.Options{RunnerImage: runnerImage, Concurrency: concurrency, UnguardedApprovals: !requirePolicy, Namespace: namespace, AllowedImages: allowed, Scope: scope}); err != nil {
		log.Error(err, "unable to set up the reconcilers")
		os.Exit(1)
	}
	if webhookPort != 0 {
		if err := webhooks.Setup(mgr); err != nil {
			log.Error(err, "unable to set up the webhooks")
			os.Exit(1)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "unable to add the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "unable to add the readiness check")
		os.Exit(1)
	}
	if webhookPort != 0 {
		// Ready only once the API server can call the webhooks.
		if err := mgr.AddReadyzCheck("webhooks", mgr.GetWebhookServer().StartedChecker()); err != nil {
			log.Error(err, "unable to add the webhooks' readiness check")
			os.Exit(1)
		}
	}
	log.Info("starting the manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "the manager stopped with an error")
		os.Exit(1)
	}
}

// defaultNamespace is the install's namespace, the controller's when nothing says otherwise (a
// controller run outside a pod).
const defaultNamespace = "captf-system"

// controllerNamespace is the namespace the pod runs in, else defaultNamespace.
func controllerNamespace() string {
	if ns, err := servingcert.PodNamespace(); err == nil && ns != "" {
		return ns
	}
	return defaultNamespace
}

// webhookCertManager keeps the webhooks' certificate in the Secret name of the pod's namespace,
// for the Service service, its CA in the ValidatingWebhookConfiguration configuration.
func webhookCertManager(restConfig *rest.Config, name, service, metricsService, configuration string, validity time.Duration) (*servingcert.Manager, error) {
	namespace, err := servingcert.PodNamespace()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	return servingcert.NewManager(servingcert.Config{
		Namespace: namespace, SecretName: name,
		DNSNames:           append(servingcert.DNSNames(service, namespace), servingcert.DNSNames(metricsService, namespace)...),
		Validity:           validity,
		ValidatingWebhooks: []string{configuration},
		ManagedBy:          "captf-controller",
	}, kube, dyn, ctrl.Log.WithName("webhook-cert"))
}

// splitList splits a comma-separated flag value into its non-empty, trimmed entries.
func splitList(value string) []string {
	entries := []string{}
	for _, e := range strings.Split(value, ",") {
		if e = strings.TrimSpace(e); e != "" {
			entries = append(entries, e)
		}
	}
	return entries
}

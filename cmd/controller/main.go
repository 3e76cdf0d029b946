// Command controller is the captf manager: it reconciles TerraformCluster, TerraformMachine and
// TerraformMachinePool and drives each of their operations as one Kubernetes Job.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/controller/webhooks"
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
		zapOpts       = zap.Options{}
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the namespace the manager runs in).")
	flag.StringVar(&runnerImage, "runner-image", os.Getenv("CAPTF_MANAGER_IMAGE"), "Image of the Jobs' runner init container, which ships /runner (default $CAPTF_MANAGER_IMAGE).")
	flag.IntVar(&concurrency, "concurrency", 10, "How many objects of each kind are reconciled at once.")
	flag.IntVar(&webhookPort, "webhook-port", 0, "Port the admission webhooks are served on; 0 serves none.")
	flag.StringVar(&webhookCerts, "webhook-cert-dir", "", "Directory holding the webhooks' serving certificate, tls.crt and tls.key.")
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

	opts := ctrl.Options{
		Scheme:                  controller.NewScheme(),
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "controller-leader-election-captf",
		LeaderElectionNamespace: leaderElectNS,
	}
	if webhookPort != 0 {
		opts.WebhookServer = webhook.NewServer(webhook.Options{Port: webhookPort, CertDir: webhookCerts})
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), controller.ManagerOptions(opts))
	if err != nil {
		log.Error(err, "unable to create the manager")
		os.Exit(1)
	}
	if err := controller.Setup(mgr, controller.Options{RunnerImage: runnerImage, Concurrency: concurrency}); err != nil {
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
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "the manager stopped with an error")
		os.Exit(1)
	}
}

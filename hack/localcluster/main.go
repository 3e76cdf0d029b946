// Command localcluster is `make run`: it starts the whole of captf on a local control plane
// (etcd, kube-apiserver, kube-controller-manager, the local node agent, the controller, the
// aggregated API server, and Cluster API's core manager and kubeadm bootstrap provider),
// applies the sample Cluster, control plane Machine and MachineDeployment of artifacts/samples,
// stands in for the kubelet and the workload cluster the no-op module cannot boot (standin.go),
// waits until Cluster API sees every machine provisioned by real OpenTofu runs with the
// bootstrap data of its KubeadmConfig, and shows them.
// It writes an admin kubeconfig to .local/kubeconfig and serves until interrupted; Ctrl-C
// (SIGINT or SIGTERM) stops everything it started.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/captf/captf/controller"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/system"
	"github.com/captf/captf/test/testenv"
)

func main() {
	// The processes it starts log to .local/logs; its own clients have nothing to say.
	logf.SetLogger(logr.Discard())
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	local := filepath.Join(root, ".local")
	fmt.Println("starting etcd, kube-apiserver, kube-controller-manager, the node agent, the controller, the API server and Cluster API ...")
	sys, err := system.Start(ctx, system.Options{BinDir: filepath.Join(root, "bin"), LogDir: filepath.Join(local, "logs"), ClusterAPI: true, Deployments: true})
	defer func() {
		fmt.Println("stopping everything ...")
		if err := sys.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		}
	}()
	if err != nil {
		return err
	}
	env := sys.Env
	kubeconfig := filepath.Join(local, "kubeconfig")
	data, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		return err
	}

	c, err := client.New(env.Config, client.Options{Scheme: controller.NewScheme()})
	if err != nil {
		return err
	}
	samples := filepath.Join(root, "artifacts", "samples", "cluster.yaml")
	fmt.Printf("applying %s ...\n", samples)
	if err := env.ApplyManifests(ctx, samples); err != nil {
		return err
	}
	stand := &standIn{c: c, kubeconfig: data}
	if err := stand.workloadKubeconfig(ctx); err != nil {
		return err
	}
	go func() { _ = capitest.RunLocalNodes(ctx, c, sampleNamespace) }()
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, stand.provisioned); err != nil {
		return fmt.Errorf("the sample cluster was not provisioned: %w\ncontroller log: %s", err, sys.Log("controller"))
	}
	if err := clusterClassSample(ctx, sys, c, data); err != nil {
		return err
	}
	out, err := env.Kubectl(ctx, "get", "clusterclasses,clusters,machines,kubeadmconfigs,terraformclusters,terraformmachines,runs", "-A").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl get runs: %w: %s", err, out)
	}
	fmt.Printf("\nCluster API sees the sample provisioned by real OpenTofu runs:\n\n%s\n", out)
	fmt.Printf(`Use it from another shell:

  export KUBECONFIG=%s
  export PATH=%s:$PATH
  kubectl get runs -w                                     # watch runs as they happen
  kubectl get runs -o yaml                                # retry numbers, backoff windows, results
  kubectl apply -f %s   # a Manual cluster
  kubectl get plans                                       # its plan, waiting for approval
  kubectl patch terraformcluster demo --type merge -p '{"spec":{"variables":{"fail":true}}}'   # a failing run and its backoff

Logs are in %s. Press Ctrl-C to stop.
`, kubeconfig, env.BinDir, filepath.Join(root, "artifacts", "samples", "cluster-manual.yaml"), sys.LogDir)
	<-ctx.Done()
	return nil
}

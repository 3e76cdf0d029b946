// Command localcluster is `make run`: it starts a local control plane (etcd, kube-apiserver with
// front-proxy certificates, kube-controller-manager) from bin/, installs the captf CRDs, writes an
// admin kubeconfig to .local/kubeconfig and serves until interrupted. Ctrl-C (SIGINT or SIGTERM)
// stops everything it started.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/captf/captf/test/testenv"
)

func main() {
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
	fmt.Println("starting etcd, kube-apiserver and kube-controller-manager ...")
	env, err := testenv.Start(ctx, testenv.Options{ControllerManager: true})
	if env != nil {
		defer func() {
			fmt.Println("stopping the local control plane ...")
			if err := env.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
			}
		}()
	}
	if err != nil {
		return err
	}

	kubeconfig := filepath.Join(root, ".local", "kubeconfig")
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o700); err != nil {
		return err
	}
	data, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		return err
	}

	out, err := env.Kubectl(ctx, "api-resources", "--categories=terraform").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl api-resources: %v: %s", err, out)
	}
	fmt.Printf("\nThe local control plane is up; the captf kinds it serves:\n\n%s\n", out)
	fmt.Printf("Use it from another shell:\n\n  export KUBECONFIG=%s\n  %s get terraformclusters,terraformmachines -A\n\nPress Ctrl-C to stop.\n",
		kubeconfig, filepath.Join(env.BinDir, "kubectl"))
	<-ctx.Done()
	return nil
}

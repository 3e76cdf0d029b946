// Command localcluster is `make run`: it starts the whole of captf on a local control plane
// (etcd, kube-apiserver, kube-controller-manager, the local node agent, the controller and the
// aggregated API server), creates the sample TerraformCluster and TerraformMachine of
// artifacts/samples, waits until they are provisioned by real OpenTofu runs and shows the runs.
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

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller"
	"github.com/captf/captf/test/capitest"
	"github.com/captf/captf/test/system"
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
	local := filepath.Join(root, ".local")
	fmt.Println("starting etcd, kube-apiserver, kube-controller-manager, the node agent, the controller and the API server ...")
	sys, err := system.Start(ctx, system.Options{BinDir: filepath.Join(root, "bin"), LogDir: filepath.Join(local, "logs")})
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
	fmt.Printf("creating the samples of %s, owned as Cluster API would own them ...\n", samples)
	if err := createOwned(ctx, c, samples); err != nil {
		return err
	}
	go adoptOrphans(ctx, c)
	provisioned := func(obj infrav1.Workspace) wait.ConditionWithContextFunc {
		return func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return false, client.IgnoreNotFound(err)
			}
			return obj.WorkspaceStatus().IsProvisioned(), nil
		}
	}
	for _, sample := range []struct {
		kind string
		obj  infrav1.Workspace
	}{
		{"TerraformCluster", &infrav1.TerraformCluster{}},
		{"TerraformMachine", &infrav1.TerraformMachine{}},
	} {
		name := "demo"
		if sample.kind == "TerraformMachine" {
			name = "demo-md-0"
		}
		sample.obj.SetNamespace("default")
		sample.obj.SetName(name)
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, provisioned(sample.obj)); err != nil {
			return fmt.Errorf("%s %s was not provisioned: %w\ncontroller log: %s", sample.kind, name, err, sys.Log("controller"))
		}
	}
	out, err := env.Kubectl(ctx, "get", "terraformclusters,terraformmachines,runs,plans", "-A").CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl get runs: %w: %s", err, out)
	}
	fmt.Printf("\nThe samples are provisioned by real OpenTofu runs:\n\n%s\n", out)
	fmt.Printf(`Use it from another shell:

  export KUBECONFIG=%s
  export PATH=%s:$PATH
  kubectl get runs -w                                     # watch runs as they happen
  kubectl get runs -o yaml                                # retry numbers, backoff windows, results
  kubectl apply -f %s   # a Manual cluster
  kubectl get plans                                       # its plan, waiting for approval
  kubectl patch terraformcluster demo --type merge -p '{"spec":{"variables":{"fail":true}}}'   # a failing run and its backoff

Objects created without an owner get the Cluster API owners Cluster API would give them.
Logs are in %s. Press Ctrl-C to stop.
`, kubeconfig, env.BinDir, filepath.Join(root, "artifacts", "samples", "cluster-manual.yaml"), sys.LogDir)
	<-ctx.Done()
	return nil
}

// createOwned creates the objects of a manifest, each with the Cluster API owners Cluster API
// would give it: until Cluster API's own controllers run here, capitest plays their part.
func createOwned(ctx context.Context, c client.Client, path string) error {
	objs, err := testenv.ReadManifests(path)
	if err != nil {
		return err
	}
	for _, u := range objs {
		typed, err := c.Scheme().New(u.GroupVersionKind())
		if err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
		obj := typed.(client.Object)
		if err := capitest.Own(ctx, c, obj); err != nil {
			return err
		}
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// adoptOrphans gives every captf object created later without an owner (say, with kubectl
// apply) the owners Cluster API would, until ctx ends.
func adoptOrphans(ctx context.Context, c client.Client) {
	_ = wait.PollUntilContextCancel(ctx, 2*time.Second, false, func(ctx context.Context) (bool, error) {
		for _, kind := range infrav1.Kinds {
			list := kind.NewList()
			if err := c.List(ctx, list); err != nil {
				continue
			}
			_ = meta.EachListItem(list, func(o runtime.Object) error {
				obj := o.(client.Object)
				if len(obj.GetOwnerReferences()) == 0 && obj.GetDeletionTimestamp().IsZero() && obj.GetAnnotations()[clusterv1.ManagedByAnnotation] == "" {
					if err := capitest.Adopt(ctx, c, obj); err != nil {
						fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
					}
				}
				return nil
			})
		}
		return false, nil
	})
}

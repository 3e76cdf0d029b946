// Package app implements the captf kubectl plugin's commands. Every command reads through the
// user's own kubeconfig and rights: runs and plans through the aggregated runs.captf.io API,
// pod logs through pods/log, and `why` through the objects, Jobs and Secrets the controller
// reads, handed to the controller's own pure decision.
package app

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	runsv1alpha1 "github.com/captf/captf/apis/runs/v1alpha1"
)

// Options are what every command shares: the streams, the kubeconfig flags and the clock.
type Options struct {
	genericiooptions.IOStreams
	// Flags are kubectl's --kubeconfig, --context, -n/--namespace and friends.
	Flags *genericclioptions.ConfigFlags
	// Now is the time commands compute "in 45s" and "ago" from.
	Now func() time.Time
	// NewClient, when set, is how commands connect instead of through Flags (tests hand in a
	// fake cluster).
	NewClient func() (client.Client, error)
}

// NewCommand returns the root command with its subcommands.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{IOStreams: streams, Flags: genericclioptions.NewConfigFlags(true), Now: time.Now}
	root := &cobra.Command{
		Use:           "captf",
		Short:         "Read captf runs and plans, approve plans, read run logs and explain the next operation",
		Long:          rootLong,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: displayName},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Commands are listed in the order they are added, as kubectl lists its own.
	cobra.EnableCommandSorting = false
	// kubectl completes through kubectl_complete-captf and __complete: no completion command.
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.Flags.AddFlags(root.PersistentFlags())
	root.AddGroup(&cobra.Group{ID: GroupInspect, Title: "Inspect runs and plans:"}, &cobra.Group{ID: GroupOperate, Title: "Operate on objects:"})
	root.AddCommand(newRunsCommand(o), newPlansCommand(o), newPlanCommand(o), newHistoryCommand(o), newLogsCommand(o), newWhyCommand(o))
	root.AddCommand(newApproveCommand(o), newSuspendCommand(o), newResumeCommand(o), newReconcileCommand(o), newReplanCommand(o), newUnlockCommand(o))
	root.AddCommand(newOptionsCommand())
	useKubectlHelp(root)
	return root
}

// Scheme returns a scheme with the built-in kinds and both captf API groups.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(infrav1.AddToScheme(s))
	utilruntime.Must(runsv1alpha1.AddToScheme(s))
	utilruntime.Must(clusterv1.AddToScheme(s))
	return s
}

// namespace is the namespace of -n, else the kubeconfig context's, else default.
func (o *Options) namespace() (string, error) {
	ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// client returns a controller-runtime client for the kubeconfig's cluster.
func (o *Options) client() (client.Client, error) {
	if o.NewClient != nil {
		return o.NewClient()
	}
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	return c, nil
}

// clientset returns a client-go clientset, for pod logs.
func (o *Options) clientset() (kubernetes.Interface, error) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating a clientset: %w", err)
	}
	return cs, nil
}

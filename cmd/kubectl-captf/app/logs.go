package app

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/templates"

	"github.com/captf/captf/controller/jobspec"
)

func newLogsCommand(o *Options) *cobra.Command {
	var follow, init bool
	cmd := &cobra.Command{
		Use:   "logs RUN",
		Short: "Print the log of a run's pod: the runner's and OpenTofu's output",
		Long: "Print the log of the newest pod of the run's Job (label batch.kubernetes.io/job-name=RUN),\n" +
			"container source (the runner driving OpenTofu), or with --init the init container that\n" +
			"copies the runner in. It reads pods/log with your own rights, exactly like kubectl logs, so\n" +
			"it works while the Job and its pod are retained." +
			rights("list on pods and get on pods/log, granted by the view, edit and admin roles."),
		GroupID: GroupInspect,
		Example: templates.Examples(`
			# Print what OpenTofu printed in a run
			kubectl captf logs captf-c-web-apply-a2-81be07

			# Follow a running run's log
			kubectl captf logs captf-c-web-apply-a3-1f02c4 -f

			# Print the log of the init container that copies the runner in
			kubectl captf logs captf-c-web-apply-a2-81be07 --init`),
		Annotations:       map[string]string{RoleAnnotation: RoleRunsView},
		ValidArgsFunction: CompleteRuns(o),
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			cs, err := o.clientset()
			if err != nil {
				return err
			}
			container := jobspec.SourceContainer
			if init {
				container = jobspec.RunnerContainer
			}
			_, err = StreamRunLog(cmd.Context(), cs, o.Out, ns, args[0], container, follow)
			return err
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "Follow the log while the run runs.")
	cmd.Flags().BoolVar(&init, "init", false, "Print the runner init container's log instead.")
	return cmd
}

// StreamRunLog copies the log of the container of the newest pod of run's Job to w, and returns
// the pod's name.
func StreamRunLog(ctx context.Context, cs kubernetes.Interface, w io.Writer, ns, run, container string, follow bool) (string, error) {
	selector := labels.SelectorFromSet(labels.Set{batchv1.JobNameLabel: run}).String()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return "", fmt.Errorf("listing the pods of run %s: %w", run, err)
	}
	if len(pods.Items) == 0 {
		return "", fmt.Errorf("run %s has no pod in namespace %s: the run does not exist, has not started, or its Job was pruned (its runs are listed by `kubectl captf runs`)", run, ns)
	}
	sort.Slice(pods.Items, func(i, j int) bool {
		return pods.Items[j].CreationTimestamp.Before(&pods.Items[i].CreationTimestamp)
	})
	pod := pods.Items[0]
	stream, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container, Follow: follow}).Stream(ctx)
	if err != nil {
		return "", fmt.Errorf("reading the log of container %s of pod %s (run %s): %w", container, pod.Name, run, err)
	}
	defer stream.Close()
	if _, err := io.Copy(w, stream); err != nil {
		return pod.Name, fmt.Errorf("copying the log of pod %s: %w", pod.Name, err)
	}
	return pod.Name, nil
}

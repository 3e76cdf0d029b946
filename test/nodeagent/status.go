package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// event records an Event on the pod, once per container, reason and message, so that a
// waiting pod does not repeat itself on every retry.
func (w *podWorker) event(pod *corev1.Pod, container, eventType, reason, message string) {
	key := container + "/" + reason
	w.mu.Lock()
	if w.state.events == nil {
		w.state.events = map[string]string{}
	}
	repeat := w.state.events[key] == message && reason != "Started" && reason != "Pulled"
	w.state.events[key] = message
	w.mu.Unlock()
	if repeat {
		return
	}
	ref := &corev1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion,
	}
	if container != "" {
		ref.FieldPath = containerFieldPath(pod, container)
	}
	w.a.recorder.Event(ref, eventType, reason, message)
}

// containerFieldPath names a container in an Event as the kubelet does.
func containerFieldPath(pod *corev1.Pod, name string) string {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return fmt.Sprintf("spec.initContainers{%s}", c.Name)
		}
	}
	return fmt.Sprintf("spec.containers{%s}", name)
}

// report publishes a change of the pod's status while the pod runs. Its error is dropped on
// purpose: publish has logged it, the pod goes on as a kubelet's would, a later report carries
// the state current then, and finish publishes the final state with more attempts and checks it.
func (w *podWorker) report(ctx context.Context) {
	_ = w.publish(ctx, 5)
}

// publish writes the worker's view of the pod into its status, trying up to attempts times.
func (w *podWorker) publish(ctx context.Context, attempts int) error {
	w.pubMu.Lock()
	defer w.pubMu.Unlock()
	err := retry(ctx, attempts, func() error {
		w.mu.Lock()
		if w.gone {
			w.mu.Unlock()
			return nil
		}
		status := w.snapshotLocked()
		w.mu.Unlock()
		err := w.patchStatus(ctx, status)
		if apierrors.IsNotFound(err) {
			w.setGone()
			return nil
		}
		return err
	})
	if err != nil && ctx.Err() == nil {
		w.log.Error(err, "writing the pod's status")
	}
	return err
}

// patchStatus writes status with a strategic merge patch of pods/status: conditions merge by
// type, so those others set (PodScheduled by the binding, DisruptionTarget) stay, and the
// container status lists are replaced whole. The UID guards against a namesake pod.
func (w *podWorker) patchStatus(ctx context.Context, status corev1.PodStatus) error {
	patch := map[string]any{
		"metadata": map[string]any{"uid": w.uid},
		"status":   status,
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("encoding the status patch: %w", err)
	}
	_, err = w.a.client.CoreV1().Pods(w.namespace).Patch(ctx, w.name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
	return err
}

// snapshotLocked renders the pod's status; w.mu is held.
func (w *podWorker) snapshotLocked() corev1.PodStatus {
	st := &w.state
	startTime := st.startTime
	status := corev1.PodStatus{
		Phase:     st.phase,
		Reason:    st.reason,
		Message:   st.message,
		HostIP:    nodeIP,
		HostIPs:   []corev1.HostIP{{IP: nodeIP}},
		PodIP:     nodeIP,
		PodIPs:    []corev1.PodIP{{IP: nodeIP}},
		StartTime: &startTime,
	}
	for _, c := range st.init {
		status.InitContainerStatuses = append(status.InitContainerStatuses, c.status())
	}
	for _, c := range st.main {
		status.ContainerStatuses = append(status.ContainerStatuses, c.status())
	}

	terminal := st.phase == corev1.PodSucceeded || st.phase == corev1.PodFailed
	var notInitialized, notReady []string
	for _, c := range st.init {
		if c.state.Terminated == nil || c.state.Terminated.ExitCode != 0 {
			notInitialized = append(notInitialized, c.spec.Name)
		}
	}
	for _, c := range st.main {
		if c.state.Running == nil || !c.ready {
			notReady = append(notReady, c.spec.Name)
		}
	}
	cond := func(t corev1.PodConditionType, ok bool, reason, message string) {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
		if !ok {
			c.Status, c.Reason, c.Message = corev1.ConditionFalse, reason, message
		}
		if old, found := st.conditions[t]; found && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = metav1.Now()
		}
		st.conditions[t] = c
		status.Conditions = append(status.Conditions, c)
	}
	cond(corev1.PodScheduled, true, "", "")
	cond(corev1.PodReadyToStartContainers, st.sandboxReady && !terminal, "", "")
	cond(corev1.PodInitialized, len(notInitialized) == 0, "ContainersNotInitialized",
		fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(notInitialized, " ")))
	readyReason := "ContainersNotReady"
	if st.phase == corev1.PodSucceeded {
		readyReason = "PodCompleted"
	}
	notReadyMessage := fmt.Sprintf("containers with unready status: [%s]", strings.Join(notReady, " "))
	cond(corev1.ContainersReady, len(notReady) == 0, readyReason, notReadyMessage)
	cond(corev1.PodReady, len(notReady) == 0, readyReason, notReadyMessage)
	return status
}

// status renders one container's status.
func (c *containerState) status() corev1.ContainerStatus {
	running := c.state.Running != nil
	ready := running && c.ready
	if c.init {
		ready = c.state.Terminated != nil && c.state.Terminated.ExitCode == 0
	}
	return corev1.ContainerStatus{
		Name:                 c.spec.Name,
		Image:                c.spec.Image,
		ImageID:              c.imageID,
		ContainerID:          c.containerID,
		State:                *c.state.DeepCopy(),
		LastTerminationState: *c.lastState.DeepCopy(),
		Ready:                ready,
		RestartCount:         c.restarts,
		Started:              ptr.To(running),
	}
}

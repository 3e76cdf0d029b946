package load

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/workspace"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/system"
)

// TestWatchStartsWithTheCurrentRuns opens one watch of runs without a resourceVersion, which
// docs and registry/storage.go (watchFor) say starts with every current run as ADDED, and counts
// the ADDED events of n retained Jobs' runs.
func TestWatchStartsWithTheCurrentRuns(t *testing.T) {
	sys := system.Get(t)
	ctx := context.Background()
	c, ns := sys.NewNamespace(t, "initial")
	cfg := rest.CopyConfig(sys.Env.Config)
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	kube := kubernetes.NewForConfigOrDie(cfg)
	owner := &infrav1.TerraformCluster{}
	owner.Name, owner.Namespace = "o", ns
	owner.Annotations = map[string]string{workspace.PausedAnnotation: "true"}
	owner.Spec.Source.Image = system.SampleNoopImage
	owner.Spec.Variables = &apiextensionsv1.JSON{Raw: []byte(`{"name":"o"}`)}
	if err := c.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := 1; i <= n; i++ {
		name, _ := jobs.JobName(jobs.NameInputs{Kind: jobs.KindCluster, Name: owner.Name, Op: jobs.OpApply, Attempt: int32(i), InputsHash: "h1:init"})
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: ns, Labels: jobs.Labels(jobs.KindCluster, owner.Name, "", jobs.OpApply, int32(i)),
				Annotations:     map[string]string{jobs.AnnotationInputsHash: "h1:init"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: infrav1.GroupVersion.String(), Kind: string(jobs.KindCluster), Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}},
			},
			Spec: batchv1.JobSpec{
				BackoffLimit: ptr.To[int32](0), Suspend: ptr.To(true),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "runner", Image: "example.invalid/runner:1"}}}},
			},
		}
		created, err := kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: jobs.RunSecretName(name), Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(created, batchv1.SchemeGroupVersion.WithKind("Job"))}}}
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	runsPath := fmt.Sprintf("/apis/runs.captf.io/v1alpha1/namespaces/%s/runs", ns)
	// Wait until a list shows all n runs, so the watch below has them to send.
	deadline := time.Now().Add(time.Minute)
	for {
		raw, err := kube.RESTClient().Get().AbsPath(runsPath).DoRaw(ctx)
		var list struct{ Items []json.RawMessage }
		if err == nil && json.Unmarshal(raw, &list) == nil && len(list.Items) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runs never showed: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling with a deadline
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	stream, err := kube.RESTClient().Get().AbsPath(runsPath).Param("watch", "true").Stream(wctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	dec := json.NewDecoder(stream)
	added := 0
	for added < n {
		var ev struct{ Type string }
		if err := dec.Decode(&ev); err != nil {
			break
		}
		if ev.Type == "ADDED" {
			added++
		}
	}
	t.Logf("FIGURE watch-initial: %d of %d current runs sent as ADDED", added, n)
	if added < n {
		t.Errorf("a watch without resourceVersion sent %d of %d current runs as ADDED within 20 s", added, n)
	}
}

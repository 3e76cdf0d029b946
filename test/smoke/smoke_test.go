// Package smoke proves that the test environment is made of real parts: a real kube-apiserver
// with the captf CRDs, the real kubectl, the real kube-controller-manager and a real OpenTofu.
package smoke

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/captf/captf/test/testenv"
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{ControllerManager: true}))
}

func TestKubeAPIServerAnswersWithItsVersion(t *testing.T) {
	env := testenv.Get(t)
	client := kubernetes.NewForConfigOrDie(env.Config)
	info, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	if info.GitVersion != "v1.37.2" {
		t.Fatalf("server version = %q, want v1.37.2 (the version ldflags of make tools)", info.GitVersion)
	}
}

func TestKubectlListsTheCRDKinds(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := env.Kubectl(ctx, "api-resources", "--api-group=infrastructure.cluster.x-k8s.io", "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl api-resources: %v\n%s", err, out)
	}
	for _, want := range []string{"terraformclusters.infrastructure.cluster.x-k8s.io", "terraformmachines.infrastructure.cluster.x-k8s.io", "terraformmachinepools.infrastructure.cluster.x-k8s.io"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl api-resources does not list %s:\n%s", want, out)
		}
	}
}

func TestFrontProxyTrustIsPublishedForAggregatedServers(t *testing.T) {
	env := testenv.Get(t)
	client := kubernetes.NewForConfigOrDie(env.Config)
	cm, err := client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading the authentication ConfigMap: %v", err)
	}
	ca, err := os.ReadFile(env.FrontProxy.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["requestheader-client-ca-file"]; strings.TrimSpace(got) != strings.TrimSpace(string(ca)) {
		t.Errorf("requestheader-client-ca-file is not the front-proxy CA")
	}
	if got := cm.Data["requestheader-allowed-names"]; !strings.Contains(got, testenv.FrontProxyClientName) {
		t.Errorf("requestheader-allowed-names = %s, want %s", got, testenv.FrontProxyClientName)
	}
}

func TestControllerManagerGivesJobsPods(t *testing.T) {
	env := testenv.Get(t)
	client := kubernetes.NewForConfigOrDie(env.Config)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"},
		Spec: batchv1.JobSpec{
			BackoffLimit: new(int32),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: "example.invalid/none"}},
			}},
		},
	}
	if _, err := client.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Job: %v", err)
	}
	podCount := func(ctx context.Context) (int, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=smoke"})
		if err != nil {
			return 0, err
		}
		return len(pods.Items), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := podCount(ctx)
		return n == 1, err
	}); err != nil {
		t.Fatalf("the Job controller created no pod for the Job: %v", err)
	}
	background := metav1.DeletePropagationBackground
	if err := client.BatchV1().Jobs("default").Delete(ctx, "smoke", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatalf("deleting the Job: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := podCount(ctx)
		return n == 0, err
	}); err != nil {
		t.Fatalf("the garbage collector did not delete the pod of the deleted Job: %v", err)
	}
}

func TestTofuRuns(t *testing.T) {
	testenv.RequireBinaries(t, testenv.TofuBinary)
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, testenv.TofuBinary), "version", "-json").Output()
	if err != nil {
		t.Fatalf("tofu version: %v", err)
	}
	var v struct {
		Version string `json:"terraform_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("tofu version -json: %v\n%s", err, out)
	}
	if !strings.HasPrefix(v.Version, "1.") || strings.Contains(v.Version, "dev") {
		t.Fatalf("tofu version = %q, want a 1.x release", v.Version)
	}
}

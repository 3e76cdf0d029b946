package nodeagent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	infrav1 "github.com/captf/captf/apis/infrastructure/v1alpha1"
	"github.com/captf/captf/controller/inputs"
	"github.com/captf/captf/controller/jobspec"
	"github.com/captf/captf/hack/images/image"
	"github.com/captf/captf/jobs"
	"github.com/captf/captf/test/nodeagent"
	"github.com/captf/captf/test/testenv"
)

// The Job the controller builds (controller/jobspec) runs for real on the agent: the runner
// image's init container copies the runner (built from ./cmd/runner) into the pod, and the
// module image's container runs it against OpenTofu (bin/tofu) and a terraform_data module,
// with the per-run Secret rendered as the controller renders it (module source /captf/module).
// The kubernetes backend, configured in-cluster, reaches the API server with the
// ServiceAccount's token, so only the Role below lets it keep state. The Job completes, the
// state Secret appears, and the runner's result is the pod's termination message. The images
// are mapped to local files, or built with hack/images/image and pulled from a loopback
// registry.
func TestRunnerEndToEnd(t *testing.T) {
	testenv.RequireBinaries(t, testenv.TofuBinary)
	env := testenv.Get(t)
	runnerBin := filepath.Join(t.TempDir(), "runner")
	build := exec.Command("go", "build", "-o", runnerBin, "./cmd/runner")
	build.Dir = env.RepoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the runner: %v: %s", err, out)
	}
	moduleDir := filepath.Join(env.RepoRoot, "runner", "testdata", "modules", "basic")
	tofu := filepath.Join(env.BinDir, testenv.TofuBinary)
	for _, rule := range []struct {
		name string
		// images returns the runner and module image references and adjusts the agent.
		images func(t *testing.T) (runnerImage, moduleImage string, mut func(*nodeagent.Config))
	}{
		{"images mapped to local files", func(*testing.T) (string, string, func(*nodeagent.Config)) {
			const runnerImage, moduleImage = "captf/runner:dev", "captf-modules/basic:v1"
			return runnerImage, moduleImage, func(cfg *nodeagent.Config) {
				cfg.Images[runnerImage] = nodeagent.Image{Paths: map[string]string{jobspec.ImageRunnerBin: runnerBin}}
				cfg.Images[moduleImage] = nodeagent.Image{Paths: map[string]string{jobspec.ModuleDir: moduleDir, jobspec.RuntimePath: tofu}}
			}
		}},
		{"images pulled from a registry", func(t *testing.T) (string, string, func(*nodeagent.Config)) {
			host := registryHost(t)
			base, err := image.BaseLayer()
			if err != nil {
				t.Fatal(err)
			}
			// The binaries run on this machine, so the dynamically linked ones of the test do.
			runner, err := image.Build(base, image.Spec{Files: map[string]string{jobspec.ImageRunnerBin: runnerBin}, Entrypoint: []string{jobspec.ImageRunnerBin}})
			if err != nil {
				t.Fatal(err)
			}
			module, err := image.Build(base, image.Spec{Dirs: map[string]string{jobspec.ModuleDir: moduleDir}, Files: map[string]string{jobspec.RuntimePath: tofu}})
			if err != nil {
				t.Fatal(err)
			}
			runnerImage, moduleImage := host+"/captf-manager:dev", host+"/captf-modules-basic:v1"
			if err := image.Push(context.Background(), map[string]v1.Image{runnerImage: runner, moduleImage: module}); err != nil {
				t.Fatal(err)
			}
			return runnerImage, moduleImage, nil
		}},
	} {
		t.Run(rule.name, func(t *testing.T) {
			runnerImage, moduleImage, mut := rule.images(t)
			runJobEndToEnd(t, runnerImage, moduleImage, mut)
		})
	}
}

// runJobEndToEnd runs the controller's apply Job of the two images on a new agent.
func runJobEndToEnd(t *testing.T, runnerImage, moduleImage string, mut func(*nodeagent.Config)) {
	f := newFixture(t, func(cfg *nodeagent.Config) {
		if mut != nil {
			mut(cfg)
		}
		cfg.RewriteVolumeFiles = true
	})
	ctx := context.Background()

	// A runner ServiceAccount and rights to keep any state: the agent is under test here, and the
	// runner's least rights are proven in test/reliability/authz.
	suffix := jobs.StateSecretSuffix(f.ns, jobs.KindCluster, "e2e")
	serviceAccount := jobspec.ServiceAccountName(infrav1.JobPolicy{}, suffix)
	_, err := f.client.CoreV1().ServiceAccounts(f.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.client.RbacV1().Roles(f.ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "captf-runner"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update", "delete"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.client.RbacV1().RoleBindings(f.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "captf-runner"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "captf-runner"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: serviceAccount, Namespace: f.ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// An owner that exists, so the garbage collector leaves the Job alone.
	owner, err := f.client.CoreV1().ConfigMaps(f.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job := jobspec.Build(jobspec.Params{
		Kind:        jobs.KindCluster,
		Namespace:   f.ns,
		ObjectName:  "e2e",
		ClusterName: "e2e",
		Owner:       metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID},
		Name:        "e2e-apply",
		Op:          jobs.OpApply,
		Attempt:     1,
		Policy:      infrav1.JobPolicy{},
		Source:      infrav1.SourceSpec{Image: moduleImage},
		RunnerImage: runnerImage,
		StateSuffix: suffix,
	})
	// Only this test's agent may bind the pod.
	job.Spec.Template.Labels[testLabel] = f.cfg.NodeName

	rendered, err := inputs.Render(moduleImage, nil, []byte(`{"name":"e2e"}`), nil, field.NewPath("spec", "variables"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.client.CoreV1().Secrets(f.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: jobs.RunSecretName(job.Name)},
		Data:       rendered.Data(),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	job, err = f.client.BatchV1().Jobs(f.ns).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := f.jobPod(job)
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []string{jobspec.RunnerContainer, jobspec.SourceContainer} {
				log, _ := os.ReadFile(filepath.Join(f.podDir(pod), c+".log"))
				t.Logf("%s.log:\n%s", c, log)
			}
			if p, err := f.getPod(pod.Name); err == nil {
				t.Logf("pod: %s", describe(p))
			}
		}
	})

	f.waitJobCondition(job.Name, batchv1.JobComplete, 3*time.Minute)
	pod, err = f.getPod(pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	term := containerStatus(t, pod, jobspec.SourceContainer).State.Terminated
	if term == nil {
		t.Fatalf("source container: %s", describe(pod))
	}
	result, err := jobs.ParseRunnerResult([]byte(term.Message))
	if err != nil {
		t.Fatalf("termination message %q: %v", term.Message, err)
	}
	if result.Op != jobs.OpApply || result.Error != nil || result.Image == nil || result.Image.Ref != moduleImage {
		t.Errorf("runner result %+v", result)
	}
	state, err := f.client.CoreV1().Secrets(f.ns).Get(ctx, "tfstate-default-"+suffix, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the state Secret: %v", err)
	}
	if len(state.Data["tfstate"]) == 0 {
		t.Errorf("the state Secret holds no state: %v", state.Data)
	}
}

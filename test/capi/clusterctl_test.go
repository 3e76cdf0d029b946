package capi

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/captf/captf/hack/clusterctl/repo"
	"github.com/captf/captf/hack/manifest"
	"github.com/captf/captf/test/system"
	"github.com/captf/captf/test/testenv"
)

// clusterctl runs the real clusterctl on a local repository of captf's release, with its own
// configuration and home, so nothing of the machine's user is read.
type clusterctl struct {
	t      *testing.T
	s      *system.Suite
	config string
	home   string
}

func newClusterctl(t *testing.T, s *system.Suite) *clusterctl {
	t.Helper()
	root := t.TempDir()
	if _, err := repo.Write(filepath.Join(s.Sys.Env.RepoRoot, "artifacts"), filepath.Join(root, "repository")); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(root, "clusterctl.yaml")
	if err := os.WriteFile(config, []byte(repo.Config(filepath.Join(root, "repository"))), 0o644); err != nil {
		t.Fatal(err)
	}
	return &clusterctl{t: t, s: s, config: config, home: root}
}

func (c *clusterctl) run(env []string, args ...string) []byte {
	c.t.Helper()
	out, stderr, err := c.try(env, args...)
	if err != nil {
		c.t.Fatalf("clusterctl %v: %v\n%s", args, err, stderr)
	}
	return out
}

func (c *clusterctl) try(env []string, args ...string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := c.command(ctx, env, args...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err = cmd.Output()
	return stdout, errOut.Bytes(), err
}

// command is clusterctl with args, its configuration and its own home.
func (c *clusterctl) command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	args = append(args, "--config", c.config)
	cmd := exec.CommandContext(ctx, filepath.Join(c.s.Sys.Env.BinDir, "clusterctl"), args...)
	cmd.Env = append([]string{
		"HOME=" + c.home, "XDG_CONFIG_HOME=" + filepath.Join(c.home, ".config"),
		"PATH=" + os.Getenv("PATH"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true",
	}, env...)
	return cmd
}

// apply applies the objects server-side, with dryRun only as a dry run: the API server, its
// admission and Cluster API's webhooks accept them (without storing anything, on a dry run).
func apply(t *testing.T, env *testenv.Env, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	var docs bytes.Buffer
	for _, obj := range objs {
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs.WriteString("---\n")
		docs.Write(data)
	}
	var out []byte
	// CRDs installed just before are served a moment later: only that is waited out.
	args := []string{"apply", "--server-side", "--field-manager=clusterctl", "-f", "-"}
	if dryRun {
		args = append(args, "--dry-run=server")
	}
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cmd := env.Kubectl(ctx, args...)
		cmd.Stdin = bytes.NewReader(docs.Bytes())
		var err error
		if out, err = cmd.CombinedOutput(); err != nil {
			if bytes.Contains(out, []byte("ensure CRDs are installed first")) {
				return false, nil
			}
			return false, err
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the server refuses the rendered objects: %v\n%s", err, out)
	}
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := manifest.Decode(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if len(objs) == 0 {
		t.Fatalf("clusterctl rendered no objects:\n%s", data)
	}
	return objs
}

// kubeadmCRDs installs the CRDs of Cluster API's kubeadm control plane provider, which the
// cluster template refers to; its controller is not needed for a dry run. The bootstrap
// provider's CRDs are the system's, with their contract labels: applying the module's plain
// files over them would take those labels away from every other test of the suite.
func kubeadmCRDs(t *testing.T, s *system.Suite) {
	t.Helper()
	dir, err := testenv.ClusterAPIDir()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, bases := range []string{"controlplane/kubeadm/config/crd/bases"} {
		found, err := filepath.Glob(filepath.Join(dir, bases, "*.yaml"))
		if err != nil || len(found) == 0 {
			t.Fatalf("no CRDs in %s: %v", bases, err)
		}
		files = append(files, found...)
	}
	if err := s.Sys.Env.ApplyManifests(s.Ctx, files...); err != nil {
		t.Fatal(err)
	}
}

// clusterctl generate cluster renders the cluster template of a local file repository, and the
// API server with Cluster API's webhooks accepts every object it renders.
func TestClusterctlGeneratesAClusterFromTheRelease(t *testing.T) {
	s := system.NewSuite(t, "clusterctl")
	kubeadmCRDs(t, s)
	c := newClusterctl(t, s)
	out := c.run([]string{
		"TERRAFORM_IDENTITY_NAME=platform",
		"TERRAFORM_CLUSTER_IMAGE=" + system.SampleNoopImage,
		"TERRAFORM_MACHINE_IMAGE=" + system.SampleNoopImage,
	}, "generate", "cluster", "web", "--infrastructure", repo.ProviderName+":"+repo.Version,
		"--target-namespace", s.NS, "--kubernetes-version", "v1.37.2",
		"--control-plane-machine-count", "3", "--worker-machine-count", "2")
	objs := decode(t, out)
	var kinds []string
	for _, obj := range objs {
		kinds = append(kinds, obj.GetKind())
		if obj.GetNamespace() != s.NS {
			t.Errorf("%s %s is in %q, not the target namespace", obj.GetKind(), obj.GetName(), obj.GetNamespace())
		}
	}
	for _, kind := range []string{"Cluster", "TerraformCluster", "KubeadmControlPlane", "TerraformMachineTemplate", "KubeadmConfigTemplate", "MachineDeployment", "MachineHealthCheck"} {
		if !slices.Contains(kinds, kind) {
			t.Errorf("no %s among the rendered %v", kind, kinds)
		}
	}
	for _, obj := range objs {
		if obj.GetKind() == "MachineDeployment" {
			if replicas, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas"); replicas != 2 {
				t.Errorf("the MachineDeployment has %d replicas, want the 2 asked for", replicas)
			}
		}
		if obj.GetKind() == "TerraformCluster" {
			if identity, _, _ := unstructured.NestedString(obj.Object, "spec", "identityRef", "name"); identity != "platform" {
				t.Errorf("the TerraformCluster's identity is %q, want TERRAFORM_IDENTITY_NAME", identity)
			}
		}
	}
	apply(t, s.Sys.Env, objs, true)
}

// The template's variables are listed, and one it requires that nobody set stops clusterctl
// with its name.
func TestClusterctlNamesTheTemplateVariables(t *testing.T) {
	s := system.NewSuite(t, "clusterctl-variables")
	c := newClusterctl(t, s)
	generate := []string{"generate", "cluster", "web", "--infrastructure", repo.ProviderName + ":" + repo.Version, "--target-namespace", s.NS}
	out := c.run(nil, append(generate, "--list-variables")...)
	for _, name := range []string{"CLUSTER_NAME", "KUBERNETES_VERSION", "CONTROL_PLANE_MACHINE_COUNT", "WORKER_MACHINE_COUNT", "TERRAFORM_IDENTITY_NAME", "TERRAFORM_CLUSTER_IMAGE", "TERRAFORM_MACHINE_IMAGE"} {
		if !bytes.Contains(out, []byte(name)) {
			t.Errorf("clusterctl does not list the required variable %s:\n%s", name, out)
		}
	}
	_, stderr, err := c.try([]string{"TERRAFORM_CLUSTER_IMAGE=a", "TERRAFORM_MACHINE_IMAGE=b"},
		append(generate, "--kubernetes-version", "v1.37.2")...)
	if err == nil || !bytes.Contains(stderr, []byte("TERRAFORM_IDENTITY_NAME")) {
		t.Errorf("without TERRAFORM_IDENTITY_NAME clusterctl says %v: %s", err, stderr)
	}
}

// clusterctl generate provider reads the components as clusterctl init would install them: one
// Namespace, every object labelled, and every object (cert-manager's aside, whose CRDs
// clusterctl installs with cert-manager itself) installed on an empty control plane.
func TestClusterctlReadsTheComponents(t *testing.T) {
	s := system.NewSuite(t, "clusterctl-components")
	c := newClusterctl(t, s)
	objs := decode(t, c.run(nil, "generate", "provider", "--infrastructure", repo.ProviderName+":"+repo.Version))
	var installed []*unstructured.Unstructured
	namespaces := 0
	for _, obj := range objs {
		if obj.GetKind() == "Namespace" {
			namespaces++
		}
		if obj.GetLabels()[repo.ProviderLabelKey] != repo.ProviderLabel {
			t.Errorf("%s %s lacks the provider label", obj.GetKind(), obj.GetName())
		}
		if obj.GroupVersionKind().Group != "cert-manager.io" {
			installed = append(installed, obj)
		}
	}
	if namespaces != 1 {
		t.Errorf("the components hold %d Namespaces, want 1", namespaces)
	}
	// Not the system's control plane: captf is installed there already, its webhook and
	// APIService registered on loopback.
	env, err := testenv.Start(context.Background(), testenv.Options{SkipCRDs: true})
	t.Cleanup(func() { _ = env.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	apply(t, env, installed, false)
}

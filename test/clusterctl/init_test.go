// Package clusterctl runs the real `clusterctl init --infrastructure terraform` on an empty local
// control plane, from local repositories of captf's release and of Cluster API's own providers
// rendered from the pinned module, and checks what clusterctl installed and recorded.
//
// cert-manager is externally provisioned (see system.CertManagerModule): its CRDs come from its
// module, so the API server takes the Issuer and Certificate that clusterctl's check creates and
// the providers' own; nothing issues a certificate. Hence the providers' Deployments are
// installed but do not run: no kubelet runs here, their release images are not pulled, and the
// webhook Secrets their pods mount are never issued.
package clusterctl

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/captf/captf/hack/clusterctl/repo"
	"github.com/captf/captf/test/system"
	"github.com/captf/captf/test/testenv"
)

// What clusterctl marks every object it installs with, and its inventory's kind.
const (
	clusterctlLabel = "clusterctl.cluster.x-k8s.io"
	providerLabel   = "cluster.x-k8s.io/provider"
)

var providerList = schema.GroupVersionKind{Group: clusterctlLabel, Version: "v1alpha3", Kind: "ProviderList"}

// start brings up an empty control plane (no CRDs) for one test and the clients to read it.
func start(t *testing.T) (*testenv.Env, client.Client) {
	t.Helper()
	testenv.RequireBinaries(t, append(testenv.ControlPlaneBinaries, system.ClusterctlBinary)...)
	env, err := testenv.Start(context.Background(), testenv.Options{SkipCRDs: true})
	t.Cleanup(func() { _ = env.Stop() })
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

// installCertManagerCRDs installs cert-manager's CRDs from its module.
func installCertManagerCRDs(t *testing.T, env *testenv.Env) {
	t.Helper()
	files, err := system.CertManagerCRDs()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.ApplyManifests(context.Background(), files...); err != nil {
		t.Fatal(err)
	}
}

// clusterctlInit runs `clusterctl init` with args from fresh local repositories with opts.
func clusterctlInit(t *testing.T, env *testenv.Env, opts repo.InitOptions, args ...string) ([]byte, error) {
	t.Helper()
	c, err := system.NewClusterctl(env.BinDir, env.RepoRoot, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return c.Init(ctx, env.Kubeconfig, args...)
}

// provider is an entry of clusterctl's inventory.
type provider struct{ namespace, name, providerName, kind, version string }

// inventory lists clusterctl's Provider objects; none while its CRD is not installed.
func inventory(t *testing.T, c client.Client) []provider {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(providerList)
	if err := c.List(context.Background(), list); err != nil {
		if meta.IsNoMatchError(err) {
			return nil
		}
		t.Fatal(err)
	}
	var found []provider
	for _, item := range list.Items {
		field := func(name string) string {
			value, _, _ := unstructured.NestedString(item.Object, name)
			return value
		}
		found = append(found, provider{item.GetNamespace(), item.GetName(), field("providerName"), field("type"), field("version")})
	}
	slices.SortFunc(found, func(a, b provider) int { return strings.Compare(a.namespace, b.namespace) })
	return found
}

// `clusterctl init --infrastructure terraform` installs, from the local repositories, Cluster
// API's core provider, its kubeadm bootstrap and control plane providers (added on a first run)
// and captf, and records each in its inventory at its release; every CRD it installed carries
// clusterctl's labels (move finds kinds by them), and the configuration's variables reach the
// managers' arguments.
func TestClusterctlInitInstallsEveryProviderFromLocalRepositories(t *testing.T) {
	env, c := start(t)
	installCertManagerCRDs(t, env)
	out, err := clusterctlInit(t, env, repo.InitOptions{Variables: map[string]string{
		"CLUSTER_TOPOLOGY":            "true",
		"EXP_MACHINE_POOL":            "true",
		"KUBEADM_BOOTSTRAP_TOKEN_TTL": "20m",
	}}, "--infrastructure", repo.ProviderName)
	if err != nil {
		t.Fatalf("clusterctl init: %v\n%s", err, out)
	}
	t.Logf("clusterctl init:\n%s", out)
	ctx := context.Background()
	for _, rule := range []struct {
		name  string
		holds func() string
	}{
		{"the inventory holds the four providers at their releases", func() string {
			want := []provider{
				{"capi-kubeadm-bootstrap-system", repo.KubeadmBootstrapProvider.Label, "kubeadm", repo.KubeadmBootstrapProvider.Type, repo.ClusterAPIVersion},
				{"capi-kubeadm-control-plane-system", repo.KubeadmControlPlaneProvider.Label, "kubeadm", repo.KubeadmControlPlaneProvider.Type, repo.ClusterAPIVersion},
				{"capi-system", repo.CoreProvider.Label, repo.CoreProvider.Name, repo.CoreProvider.Type, repo.ClusterAPIVersion},
				{repo.Namespace, repo.ProviderLabel, repo.ProviderName, repo.ProviderType, repo.Version},
			}
			if got := inventory(t, c); !slices.Equal(got, want) {
				return fmt.Sprintf("%+v", got)
			}
			return ""
		}},
		{"every Cluster API and captf CRD carries clusterctl's labels", func() string {
			var crds apiextensionsv1.CustomResourceDefinitionList
			if err := c.List(ctx, &crds); err != nil {
				return err.Error()
			}
			labelled := 0
			for _, crd := range crds.Items {
				if !strings.HasSuffix(crd.Spec.Group, "cluster.x-k8s.io") || crd.Spec.Group == clusterctlLabel {
					continue
				}
				if _, ok := crd.Labels[clusterctlLabel]; !ok || crd.Labels[providerLabel] == "" {
					return crd.Name
				}
				labelled++
			}
			// Core's 13 kinds, the bootstrap provider's 2, the control plane provider's 2 and captf's 7.
			if labelled != 24 {
				return fmt.Sprintf("%d CRDs", labelled)
			}
			return ""
		}},
		{"each provider's manager runs its release's image", func() string {
			want := map[string]string{
				"capi-system/capi-controller-manager":                                             repo.CoreProvider.ManagerImage(),
				"capi-kubeadm-bootstrap-system/capi-kubeadm-bootstrap-controller-manager":         repo.KubeadmBootstrapProvider.ManagerImage(),
				"capi-kubeadm-control-plane-system/capi-kubeadm-control-plane-controller-manager": repo.KubeadmControlPlaneProvider.ManagerImage(),
				repo.Namespace + "/captf-controller":                                              repo.ImageRepository + "captf-manager:" + repo.Version,
			}
			for key, image := range want {
				namespace, name, _ := strings.Cut(key, "/")
				if got := managerArgs(t, c, namespace, name, image); got == nil {
					return key + " does not run " + image
				}
			}
			return ""
		}},
		{"the configuration's variables reach the managers' arguments", func() string {
			core := strings.Join(managerArgs(t, c, "capi-system", "capi-controller-manager", repo.CoreProvider.ManagerImage()), " ")
			bootstrap := strings.Join(managerArgs(t, c, "capi-kubeadm-bootstrap-system", "capi-kubeadm-bootstrap-controller-manager", repo.KubeadmBootstrapProvider.ManagerImage()), " ")
			for _, want := range []string{"MachinePool=true,ClusterTopology=true"} {
				if !strings.Contains(core, want) {
					return "core: " + core
				}
			}
			if !strings.Contains(bootstrap, "--bootstrap-token-ttl=20m") {
				return "bootstrap: " + bootstrap
			}
			return ""
		}},
	} {
		t.Run(rule.name, func(t *testing.T) {
			if broken := rule.holds(); broken != "" {
				t.Errorf("%s\nclusterctl init printed:\n%s", broken, out)
			}
		})
	}
}

// managerArgs returns the arguments of the Deployment's container on image, or nil when it has
// none.
func managerArgs(t *testing.T, c client.Client, namespace, name, image string) []string {
	t.Helper()
	var d appsv1.Deployment
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &d); err != nil {
		t.Logf("Deployment %s/%s: %v", namespace, name, err)
		return nil
	}
	for _, container := range d.Spec.Template.Spec.Containers {
		if container.Image == image {
			return append([]string{container.Name}, container.Args...)
		}
	}
	return nil
}

// Without cert-manager's kinds, clusterctl waits for the externally provisioned cert-manager
// (up to its timeout, here 5 s), then stops and installs no provider: its CRDs are what the
// check needs.
func TestClusterctlInitWaitsForCertManagersKinds(t *testing.T) {
	env, c := start(t)
	out, err := clusterctlInit(t, env, repo.InitOptions{CertManagerTimeout: 5 * time.Second}, "--infrastructure", repo.ProviderName)
	t.Logf("clusterctl init: %v\n%s", err, out)
	// It stops by itself (exit status 1), long before the test's deadline would kill it.
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("clusterctl init ended with %v, want exit status 1", err)
	}
	if !strings.Contains(string(out), "Waiting for cert-manager to be available") {
		t.Error("clusterctl init does not say it waits for cert-manager")
	}
	if got := inventory(t, c); len(got) != 0 {
		t.Errorf("the inventory holds %+v", got)
	}
	var ns corev1.Namespace
	if err := c.Get(context.Background(), client.ObjectKey{Name: "capi-system"}, &ns); !apierrors.IsNotFound(err) {
		t.Errorf("capi-system: %v, want it never created", err)
	}
}

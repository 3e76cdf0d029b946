package repo

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/captf/captf/hack/manifest"
)

// clusterAPIModule is the pinned module's directory, found once per test binary.
var clusterAPIModule = sync.OnceValues(ClusterAPIDir)

func moduleOrFatal(t *testing.T) string {
	t.Helper()
	dir, err := clusterAPIModule()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// rendered holds each provider's components, rendered once per test binary: kustomize on the
// module's CRDs takes seconds.
var rendered sync.Map

func clusterAPIComponents(t *testing.T, p Provider) (string, []*unstructured.Unstructured) {
	t.Helper()
	data, ok := rendered.Load(p.Label)
	if !ok {
		out, err := ClusterAPIComponents(moduleOrFatal(t), p)
		if err != nil {
			t.Fatal(err)
		}
		data, _ = rendered.LoadOrStore(p.Label, out)
	}
	objs, err := manifest.Decode(data.([]byte))
	if err != nil {
		t.Fatal(err)
	}
	return string(data.([]byte)), objs
}

// The Cluster API release of the repositories is the one bin/clusterctl and the managers are
// built from (hack/tools/capi/go.mod): clusterctl refuses components of another contract, and
// the components' arguments are those of the binaries.
func TestClusterAPIIsTheReleaseTheToolsBuild(t *testing.T) {
	data, err := os.ReadFile("../../tools/capi/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^\s*(require\s+)?` + regexp.QuoteMeta(ClusterAPIModulePath) + `\s+` + regexp.QuoteMeta(ClusterAPIVersion) + `\s*$`)
	if !want.Match(data) {
		t.Errorf("hack/tools/capi/go.mod does not require %s %s", ClusterAPIModulePath, ClusterAPIVersion)
	}
}

// The rules clusterctl and Cluster API's release set for each provider's components file, a
// row each, for every provider.
func TestClusterAPIComponentsFollowTheRelease(t *testing.T) {
	contract := moduleContract(t)
	for _, p := range ClusterAPIProviders {
		t.Run(p.Label, func(t *testing.T) {
			text, objs := clusterAPIComponents(t, p)
			namespace := ""
			if ns := ofKind(objs, "Namespace"); len(ns) == 1 {
				namespace = ns[0].GetName()
			}
			for _, rule := range []struct {
				name  string
				holds func() string
			}{
				{"exactly one Namespace, the provider's", func() string {
					if ns := ofKind(objs, "Namespace"); len(ns) != 1 {
						return "Namespaces: " + names(ns)
					}
					return ""
				}},
				{"every object carries the provider label", func() string {
					for _, obj := range objs {
						if obj.GetLabels()[ProviderLabelKey] != p.Label {
							return obj.GetKind() + " " + obj.GetName()
						}
					}
					return ""
				}},
				{"every namespaced object is in the provider's namespace", func() string {
					for _, obj := range objs {
						if !slices.Contains(clusterScoped, obj.GetKind()) && obj.GetNamespace() != namespace {
							return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
						}
					}
					return ""
				}},
				// Core's kinds are the contract itself: Cluster API resolves the references to
				// the providers' kinds through these labels, and core's carry none.
				{"every provider CRD carries the contract label of the release", func() string {
					crds := ofKind(objs, "CustomResourceDefinition")
					if len(crds) == 0 {
						return "no CRD"
					}
					if p.Type == CoreProvider.Type {
						return ""
					}
					for _, crd := range crds {
						if version, ok := crd.GetLabels()["cluster.x-k8s.io/"+contract]; !ok || version == "" {
							return crd.GetName()
						}
					}
					return ""
				}},
				{"one Deployment, its manager on the release's image", func() string {
					deployments := ofKind(objs, "Deployment")
					if len(deployments) != 1 {
						return "Deployments: " + names(deployments)
					}
					spec := podSpec(t, deployments[0])
					for _, c := range spec.Containers {
						if c.Name == "manager" && c.Image == p.ManagerImage() && c.ImagePullPolicy == corev1.PullIfNotPresent {
							return ""
						}
					}
					return "no manager container on " + p.ManagerImage() + " pulled IfNotPresent"
				}},
				{"no image is left unpinned", func() string {
					for _, d := range ofKind(objs, "Deployment") {
						spec := podSpec(t, d)
						for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
							if !strings.HasPrefix(c.Image, ClusterAPIRegistry) || !strings.HasSuffix(c.Image, ":"+ClusterAPIVersion) {
								return c.Name + ": " + c.Image
							}
						}
					}
					if strings.Contains(text, "k8s-staging-cluster-api") {
						return "a staging image is named"
					}
					return ""
				}},
				{"the webhooks trust the certificate cert-manager injects", func() string {
					certificates := map[string]bool{}
					for _, cert := range ofKind(objs, "Certificate") {
						certificates[cert.GetNamespace()+"/"+cert.GetName()] = true
					}
					for _, kind := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
						for _, hook := range ofKind(objs, kind) {
							if from := hook.GetAnnotations()[injectCAFrom]; !certificates[from] {
								return hook.GetName() + " injects from " + from
							}
						}
					}
					return ""
				}},
				{"clusterctl's variables are left for clusterctl", func() string {
					if !strings.Contains(text, "MachinePool=${EXP_MACHINE_POOL:=true}") {
						return "no ${EXP_MACHINE_POOL:=true}"
					}
					return ""
				}},
			} {
				t.Run(rule.name, func(t *testing.T) {
					if broken := rule.holds(); broken != "" {
						t.Error(broken)
					}
				})
			}
		})
	}
}

// moduleContract is the contract metadata.yaml gives the release's series.
func moduleContract(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleOrFatal(t), MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	var metadata struct {
		ReleaseSeries []struct {
			Major, Minor int
			Contract     string
		} `json:"releaseSeries"`
	}
	if err := yaml.Unmarshal(data, &metadata); err != nil {
		t.Fatal(err)
	}
	for _, s := range metadata.ReleaseSeries {
		if strings.HasPrefix(ClusterAPIVersion, fmt.Sprintf("v%d.%d.", s.Major, s.Minor)) {
			return s.Contract
		}
	}
	t.Fatalf("metadata.yaml maps no series to %s", ClusterAPIVersion)
	return ""
}

func podSpec(t *testing.T, d *unstructured.Unstructured) corev1.PodSpec {
	t.Helper()
	var deployment appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &deployment); err != nil {
		t.Fatal(err)
	}
	return deployment.Spec.Template.Spec
}

// The core provider's variables are those its release names, and the kubeadm bootstrap
// provider's join token lifetime is one of them.
func TestClusterAPIComponentsKeepTheirVariables(t *testing.T) {
	for _, tc := range []struct {
		provider Provider
		variable string
	}{
		{CoreProvider, "ClusterTopology=${CLUSTER_TOPOLOGY:=false}"},
		{KubeadmBootstrapProvider, "--bootstrap-token-ttl=${KUBEADM_BOOTSTRAP_TOKEN_TTL:=15m}"},
		{KubeadmControlPlaneProvider, "ClusterTopology=${CLUSTER_TOPOLOGY:=false}"},
	} {
		t.Run(tc.provider.Label, func(t *testing.T) {
			if text, _ := clusterAPIComponents(t, tc.provider); !strings.Contains(text, tc.variable) {
				t.Errorf("no %s", tc.variable)
			}
		})
	}
}

// The repositories are laid out as clusterctl reads a local repository
// (<root>/<label>/<version>/<components>, metadata.yaml beside), and the init configuration names
// every provider's components file, cert-manager as externally provisioned with its timeout, and
// the variables.
func TestTheInitConfigurationNamesEveryLocalRepository(t *testing.T) {
	root := t.TempDir()
	if err := WriteClusterAPI(moduleOrFatal(t), root); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(artifacts, root); err != nil {
		t.Fatal(err)
	}
	data, err := InitConfig(root, InitOptions{Variables: map[string]string{"CLUSTER_TOPOLOGY": "true"}, CertManagerTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Providers []struct {
			Name, Type, URL string
		} `json:"providers"`
		CertManager struct {
			ExternallyProvisioned string `json:"externallyProvisioned"`
			Timeout               string `json:"timeout"`
		} `json:"cert-manager"`
		ClusterTopology string `json:"CLUSTER_TOPOLOGY"`
	}
	if err := yaml.UnmarshalStrict([]byte(data), &config); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	var got []string
	for _, p := range config.Providers {
		got = append(got, p.Type+"/"+p.Name)
		path, ok := strings.CutPrefix(p.URL, "file://")
		if !ok {
			t.Errorf("%s: %s is not a file URL", p.Name, p.URL)
			continue
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || len(strings.Split(rel, string(filepath.Separator))) != 3 {
			t.Errorf("%s: %s is not <root>/<label>/<version>/<components>", p.Name, p.URL)
		}
		for _, name := range []string{path, filepath.Join(filepath.Dir(path), MetadataFile)} {
			if _, err := os.Stat(name); err != nil {
				t.Error(err)
			}
		}
	}
	slices.Sort(got)
	if want := []string{"BootstrapProvider/kubeadm", "ControlPlaneProvider/kubeadm", "CoreProvider/cluster-api", "InfrastructureProvider/terraform"}; !slices.Equal(got, want) {
		t.Errorf("providers %v, want %v", got, want)
	}
	if config.CertManager.ExternallyProvisioned != "true" || config.CertManager.Timeout != "1m0s" {
		t.Errorf("cert-manager: %+v", config.CertManager)
	}
	if config.ClusterTopology != "true" {
		t.Errorf("CLUSTER_TOPOLOGY = %q", config.ClusterTopology)
	}
}

// A variable named like one of clusterctl's own keys is refused rather than replacing it.
func TestAVariableCannotReplaceAConfigurationKey(t *testing.T) {
	if _, err := InitConfig(t.TempDir(), InitOptions{Variables: map[string]string{"cert-manager": "x"}}); err == nil {
		t.Fatal("InitConfig took the variable cert-manager")
	}
}

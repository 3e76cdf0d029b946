package repo

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/captf/captf/hack/manifest"
)

const artifacts = "../../../artifacts"

func components(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	data, err := Components(artifacts)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifest.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var found []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetKind() == kind {
			found = append(found, obj)
		}
	}
	return found
}

// The rules clusterctl and Cluster API's provider contract set for a components file, a row each.
func TestTheComponentsFollowClusterctlsRules(t *testing.T) {
	objs := components(t)
	metadata, err := os.ReadFile(filepath.Join(artifacts, "clusterctl", MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	contract := regexp.MustCompile(`contract: (\S+)`).FindSubmatch(metadata)
	if contract == nil {
		t.Fatal("metadata.yaml names no contract")
	}
	for _, rule := range []struct {
		name  string
		holds func() string
	}{
		{"exactly one Namespace, the provider's", func() string {
			if ns := ofKind(objs, "Namespace"); len(ns) != 1 || ns[0].GetName() != Namespace {
				return "Namespaces: " + names(ns)
			}
			return ""
		}},
		{"every object carries the provider label", func() string {
			for _, obj := range objs {
				if obj.GetLabels()[ProviderLabelKey] != ProviderLabel {
					return obj.GetKind() + " " + obj.GetName()
				}
			}
			return ""
		}},
		{"every namespaced object is in the provider's namespace", func() string {
			for _, obj := range objs {
				if !slices.Contains(clusterScoped, obj.GetKind()) && obj.GetNamespace() != Namespace {
					return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
				}
			}
			return ""
		}},
		{"every CRD names the contract of metadata.yaml", func() string {
			for _, crd := range ofKind(objs, "CustomResourceDefinition") {
				if _, ok := crd.GetLabels()["cluster.x-k8s.io/"+string(contract[1])]; !ok {
					return crd.GetName()
				}
			}
			return ""
		}},
		{"the identity kind moves with its whole hierarchy", func() string {
			for _, crd := range ofKind(objs, "CustomResourceDefinition") {
				if strings.HasPrefix(crd.GetName(), "terraformclusteridentities.") {
					if _, ok := crd.GetLabels()["clusterctl.cluster.x-k8s.io/move-hierarchy"]; !ok {
						return "no move-hierarchy label"
					}
					return ""
				}
			}
			return "no identity CRD"
		}},
		{"seven kinds: three workload, three templates, the identity", func() string {
			if crds := ofKind(objs, "CustomResourceDefinition"); len(crds) != 7 {
				return names(crds)
			}
			return ""
		}},
		{"no role aggregates into Cluster API's manager", func() string {
			for _, obj := range objs {
				for key := range obj.GetLabels() {
					if strings.Contains(key, "aggregate-to-manager") {
						return obj.GetName()
					}
				}
			}
			return ""
		}},
		{"the controller's container is named manager", func() string {
			for _, d := range ofKind(objs, "Deployment") {
				if d.GetName() != "captf-controller" {
					continue
				}
				var deployment appsv1.Deployment
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &deployment); err != nil {
					return err.Error()
				}
				if c := deployment.Spec.Template.Spec.Containers; len(c) == 0 || c[0].Name != "manager" {
					return "the first container is not manager"
				}
				return ""
			}
			return "no controller Deployment"
		}},
		{"captf's images are canonical and pinned to the release", func() string {
			for _, d := range ofKind(objs, "Deployment") {
				var deployment appsv1.Deployment
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, &deployment); err != nil {
					return err.Error()
				}
				for _, c := range deployment.Spec.Template.Spec.Containers {
					if c.Image != ImageRepository+"captf-manager:"+Version && c.Image != ImageRepository+"captf-apiserver:"+Version {
						return c.Image
					}
					for _, e := range c.Env {
						if strings.HasPrefix(e.Value, ImageRepository) && !strings.HasSuffix(e.Value, ":"+Version) {
							return e.Name + "=" + e.Value
						}
					}
				}
			}
			return ""
		}},
		{"the APIService trusts the certificate cert-manager injects, never a literal", func() string {
			apis := ofKind(objs, "APIService")
			if len(apis) != 1 {
				return "APIServices: " + names(apis)
			}
			api := apis[0]
			if _, found, _ := unstructured.NestedString(api.Object, "spec", "caBundle"); found {
				return "a caBundle is set"
			}
			if skip, _, _ := unstructured.NestedBool(api.Object, "spec", "insecureSkipTLSVerify"); skip {
				return "insecureSkipTLSVerify"
			}
			if api.GetAnnotations()[injectCAFrom] != apiServerCertificate {
				return "annotations: " + api.GetAnnotations()[injectCAFrom]
			}
			return ""
		}},
		{"the webhooks trust the certificate cert-manager injects", func() string {
			hooks := ofKind(objs, "ValidatingWebhookConfiguration")
			if len(hooks) == 0 {
				return "no webhook configuration"
			}
			for _, hook := range hooks {
				if hook.GetAnnotations()[injectCAFrom] != webhookCertificate {
					return hook.GetName()
				}
			}
			return ""
		}},
		{"every injected Certificate is shipped, with the Secret its pod mounts", func() string {
			secrets := map[string]string{}
			for _, cert := range ofKind(objs, "Certificate") {
				secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
				secrets[cert.GetNamespace()+"/"+cert.GetName()] = secret
			}
			if secrets[apiServerCertificate] != "captf-apiserver-tls" || secrets[webhookCertificate] != "captf-webhook-server-cert" {
				return "certificates: " + strings.Join(slices.Sorted(maps.Keys(secrets)), ",")
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
}

func names(objs []*unstructured.Unstructured) string {
	var n []string
	for _, obj := range objs {
		n = append(n, obj.GetName())
	}
	return strings.Join(n, ",")
}

// A namespaced object outside the provider's namespace is refused: clusterctl would move it.
func TestAnObjectOutsideTheNamespaceIsRefused(t *testing.T) {
	obj := &unstructured.Unstructured{}
	obj.SetKind("RoleBinding")
	obj.SetNamespace("kube-system")
	obj.SetName("reader")
	if err := fit(obj); err == nil || !strings.Contains(err.Error(), "kube-system/reader") {
		t.Fatalf("fit = %v, want the object named", err)
	}
}

// The repository is laid out as clusterctl reads a local repository, and the configuration
// names its components file.
func TestTheRepositoryIsLaidOutForClusterctl(t *testing.T) {
	root := t.TempDir()
	dir, err := Write(artifacts, root)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "infrastructure-terraform", "v0.1.0"); dir != want {
		t.Fatalf("written to %s, want %s", dir, want)
	}
	for _, name := range []string{ComponentsFile, MetadataFile, ClusterTemplateFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	if config := Config(root); !strings.Contains(config, "url: file://"+filepath.Join(dir, ComponentsFile)) {
		t.Errorf("config = %s", config)
	}
}

// What the cert-manager install overlay promises: cert-manager's CA injector fills each caBundle
// from the Certificate whose Secret the server mounts.
const (
	injectCAFrom         = "cert-manager.io/inject-ca-from"
	apiServerCertificate = Namespace + "/captf-apiserver-cert"
	webhookCertificate   = Namespace + "/captf-webhook-cert"
)

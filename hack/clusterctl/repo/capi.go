package repo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/captf/captf/hack/manifest"
)

// The Cluster API release whose own providers a local repository holds: the module
// hack/tools/capi builds bin/clusterctl and the managers from, so clusterctl, the managers and
// the components it installs are one release.
const (
	ClusterAPIModulePath = "sigs.k8s.io/cluster-api"
	ClusterAPIVersion    = "v1.14.2"
	// ClusterAPIRegistry holds the release's images.
	ClusterAPIRegistry = "registry.k8s.io/cluster-api/"
)

// Provider is one of Cluster API's own providers, as its release ships it.
type Provider struct {
	// Name and Type are how clusterctl knows the provider (`--bootstrap kubeadm`).
	Name string
	Type string
	// Label is its clusterctl label (type and name), the directory of its local repository.
	Label string
	// Kustomization is the directory of the module the release renders the components from.
	Kustomization string
	// ComponentsFile is the components' asset name in the release.
	ComponentsFile string
	// Image is the manager's image in the release, without its tag.
	Image string
}

// Cluster API's providers that `clusterctl init` installs on a first run: core and the kubeadm
// bootstrap and control plane providers, which it adds unless told otherwise.
var (
	CoreProvider = Provider{
		Name: "cluster-api", Type: "CoreProvider", Label: "cluster-api",
		Kustomization: "core/config/default", ComponentsFile: "core-components.yaml",
		Image: ClusterAPIRegistry + "cluster-api-controller",
	}
	KubeadmBootstrapProvider = Provider{
		Name: "kubeadm", Type: "BootstrapProvider", Label: "bootstrap-kubeadm",
		Kustomization: "bootstrap/kubeadm/config/default", ComponentsFile: "bootstrap-components.yaml",
		Image: ClusterAPIRegistry + "kubeadm-bootstrap-controller",
	}
	KubeadmControlPlaneProvider = Provider{
		Name: "kubeadm", Type: "ControlPlaneProvider", Label: "control-plane-kubeadm",
		Kustomization: "controlplane/kubeadm/config/default", ComponentsFile: "control-plane-components.yaml",
		Image: ClusterAPIRegistry + "kubeadm-control-plane-controller",
	}
	ClusterAPIProviders = []Provider{CoreProvider, KubeadmBootstrapProvider, KubeadmControlPlaneProvider}
)

// Dir is where a local repository under root keeps the provider's assets.
func (p Provider) Dir(root string) string {
	return filepath.Join(root, p.Label, ClusterAPIVersion)
}

// URL is the provider's components file under root, as a clusterctl configuration names it.
func (p Provider) URL(root string) string {
	return "file://" + filepath.Join(p.Dir(root), p.ComponentsFile)
}

// ManagerImage is the manager's image in the release.
func (p Provider) ManagerImage() string {
	return p.Image + ":" + ClusterAPIVersion
}

// ClusterAPIDir returns where the pinned Cluster API module is in the module cache; the Go
// command downloads it from the module proxy when the cache lacks it.
func ClusterAPIDir() (string, error) {
	return ModuleDir(ClusterAPIModulePath + "@" + ClusterAPIVersion)
}

// ModuleDir returns the directory of a module version (path@version) in the module cache; the
// Go command downloads it from the module proxy when the cache lacks it.
func ModuleDir(module string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", module)
	// Outside any module, so no go.mod is read or changed.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("downloading %s: %w: %s%s", module, err, out, stderr.String())
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("reading where %s is: %w: %s", module, err, out)
	}
	if mod.Dir == "" {
		return "", fmt.Errorf("the Go command did not say where %s is: %s", module, out)
	}
	return mod.Dir, nil
}

// ClusterAPIComponents renders a provider's components from the module in moduleDir as its
// release does: the kustomization, with the manager's image the release names and its pull
// policy IfNotPresent. clusterctl's variables (${CLUSTER_TOPOLOGY:=false}, ...) stay for
// clusterctl to fill.
func ClusterAPIComponents(moduleDir string, p Provider) ([]byte, error) {
	objs, err := manifest.Kustomize(filepath.Join(moduleDir, p.Kustomization))
	if err != nil {
		return nil, err
	}
	namespaces := 0
	for _, obj := range objs {
		switch obj.GetKind() {
		case "Namespace":
			namespaces++
		case "Deployment":
			if err := pinManager(obj, p.ManagerImage()); err != nil {
				return nil, err
			}
		}
	}
	// clusterctl takes the components' one Namespace as the provider's.
	if namespaces != 1 {
		return nil, fmt.Errorf("%s: %d Namespaces, clusterctl takes exactly one as the provider's", p.Label, namespaces)
	}
	return encode(objs)
}

// pinManager sets the image and pull policy of a Deployment's manager container, which the
// module names by a development tag.
func pinManager(obj *unstructured.Unstructured, image string) error {
	containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return fmt.Errorf("Deployment %s: %w", obj.GetName(), err)
	}
	pinned := false
	for _, c := range containers {
		if container, ok := c.(map[string]any); ok && container["name"] == "manager" {
			container["image"] = image
			container["imagePullPolicy"] = "IfNotPresent"
			pinned = true
		}
	}
	if !pinned {
		return fmt.Errorf("Deployment %s has no manager container", obj.GetName())
	}
	return unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers")
}

// encode writes the objects as one multi-document YAML stream.
func encode(objs []*unstructured.Unstructured) ([]byte, error) {
	var out bytes.Buffer
	for _, obj := range objs {
		data, err := yaml.Marshal(obj.Object)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		if out.Len() > 0 {
			out.WriteString("---\n")
		}
		out.Write(data)
	}
	return out.Bytes(), nil
}

// WriteClusterAPI writes the local repositories of Cluster API's providers under root from
// the module in moduleDir: each provider's components and the release's metadata.yaml.
func WriteClusterAPI(moduleDir, root string) error {
	metadata, err := os.ReadFile(filepath.Join(moduleDir, MetadataFile))
	if err != nil {
		return err
	}
	for _, p := range ClusterAPIProviders {
		components, err := ClusterAPIComponents(moduleDir, p)
		if err != nil {
			return err
		}
		dir := p.Dir(root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, p.ComponentsFile), components, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, MetadataFile), metadata, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// configProvider is an entry of a clusterctl configuration's providers list.
type configProvider struct {
	Name string `json:"name"`
	Type string `json:"type"`
	URL  string `json:"url"`
}

// InitOptions tune the configuration InitConfig writes.
type InitOptions struct {
	// Variables are clusterctl variables (CLUSTER_TOPOLOGY, EXP_MACHINE_POOL, ...), which the
	// components read.
	Variables map[string]string
	// CertManagerTimeout is how long clusterctl waits for cert-manager's API; zero leaves
	// clusterctl's default, 10 minutes.
	CertManagerTimeout time.Duration
}

// InitConfig is a clusterctl configuration for `clusterctl init` from the local repositories
// under root: Cluster API's providers (WriteClusterAPI) and captf's (Write), each overriding
// clusterctl's entry of the same name and type. cert-manager is externally provisioned:
// clusterctl installs none (the release it would fetch comes from GitHub); it waits until the
// API server takes a cert-manager Issuer and Certificate, then deletes them.
func InitConfig(root string, opts InitOptions) (string, error) {
	providers := []configProvider{{Name: ProviderName, Type: ProviderType, URL: "file://" + filepath.Join(Dir(root), ComponentsFile)}}
	for _, p := range ClusterAPIProviders {
		providers = append(providers, configProvider{Name: p.Name, Type: p.Type, URL: p.URL(root)})
	}
	// Strings, as clusterctl reads them (strconv.ParseBool, time.ParseDuration).
	certManager := map[string]string{"externallyProvisioned": "true"}
	if opts.CertManagerTimeout > 0 {
		certManager["timeout"] = opts.CertManagerTimeout.String()
	}
	config := map[string]any{"providers": providers, "cert-manager": certManager}
	for name, value := range opts.Variables {
		if _, taken := config[name]; taken {
			return "", fmt.Errorf("the variable %s would replace clusterctl's own key", name)
		}
		config[name] = value
	}
	data, err := yaml.Marshal(config)
	return string(data), err
}

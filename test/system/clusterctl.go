package system

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/captf/captf/hack/clusterctl/repo"
)

// CertManagerModule is the cert-manager release whose CRDs stand for an externally provisioned
// cert-manager. The module proxy serves only its root module, which holds the CRDs but none of
// cert-manager's programs: their modules (cmd/controller, cmd/cainjector, cmd/webhook) are not
// on the proxy, and the release manifest is rendered by Helm outside the module.
const CertManagerModule = "github.com/cert-manager/cert-manager@v1.21.2"

// certManagerCRDsPath is where the root module keeps cert-manager's CRDs.
var certManagerCRDsPath = filepath.Join("deploy", "crds")

// CertManagerCRDs returns the files of cert-manager's CRDs (Certificate, Issuer, ...) from its
// module, which is downloaded from the module proxy when the module cache lacks it. With them,
// the API server stores cert-manager's objects; nothing issues a Certificate.
func CertManagerCRDs() ([]string, error) {
	dir, err := repo.ModuleDir(CertManagerModule)
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, certManagerCRDsPath, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", filepath.Join(dir, certManagerCRDsPath))
	}
	return files, nil
}

// ClusterctlBinary is clusterctl in bin/, built from the Cluster API release the local
// repositories hold (make tools).
const ClusterctlBinary = "clusterctl"

// Clusterctl is bin/clusterctl with a configuration that names local repositories of captf's
// release and of Cluster API's own providers, and a home of its own, so that nothing of the
// machine's user is read and nothing is fetched from GitHub.
type Clusterctl struct {
	// Path is the clusterctl binary.
	Path string
	// Config is the configuration file (repo.InitConfig).
	Config string
	// Home is clusterctl's HOME.
	Home string
}

// NewClusterctl writes the repositories (captf's from repoRoot's artifacts/, Cluster API's from
// the pinned module) and the configuration of opts into dir.
func NewClusterctl(binDir, repoRoot, dir string, opts repo.InitOptions) (*Clusterctl, error) {
	root := filepath.Join(dir, "repository")
	if _, err := repo.Write(filepath.Join(repoRoot, "artifacts"), root); err != nil {
		return nil, err
	}
	module, err := repo.ClusterAPIDir()
	if err != nil {
		return nil, err
	}
	if err := repo.WriteClusterAPI(module, root); err != nil {
		return nil, err
	}
	config, err := repo.InitConfig(root, opts)
	if err != nil {
		return nil, err
	}
	c := &Clusterctl{Path: filepath.Join(binDir, ClusterctlBinary), Config: filepath.Join(dir, "clusterctl.yaml"), Home: dir}
	if err := os.WriteFile(c.Config, []byte(config), 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

// Command is clusterctl with args, its configuration, its home and the extra environment env.
func (c *Clusterctl) Command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	args = append(args, "--config", c.Config)
	cmd := exec.CommandContext(ctx, c.Path, args...)
	cmd.Env = append([]string{
		"HOME=" + c.Home, "XDG_CONFIG_HOME=" + filepath.Join(c.Home, ".config"),
		"PATH=" + os.Getenv("PATH"), "CLUSTERCTL_DISABLE_VERSIONCHECK=true",
	}, env...)
	return cmd
}

// Init runs `clusterctl init` with args on the cluster of kubeconfig and returns what it
// printed, stdout and stderr together.
func (c *Clusterctl) Init(ctx context.Context, kubeconfig string, args ...string) ([]byte, error) {
	cmd := c.Command(ctx, nil, append([]string{"init", "--kubeconfig", kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

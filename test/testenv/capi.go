package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ClusterAPIModule is the Cluster API release whose CRDs the control plane installs, so the
// controller finds the Clusters, Machines and MachinePools it reads.
const ClusterAPIModule = "sigs.k8s.io/cluster-api@v1.14.2"

// clusterAPICRDs are the CRDs of the kinds captf reads, in the module's core/config/crd/bases.
var clusterAPICRDs = []string{
	"cluster.x-k8s.io_clusters.yaml",
	"cluster.x-k8s.io_machines.yaml",
	"cluster.x-k8s.io_machinepools.yaml",
}

// ClusterAPIDir returns where the Cluster API module is in the module cache; the Go command
// downloads it from the module proxy when the cache lacks it.
func ClusterAPIDir() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", ClusterAPIModule)
	// Outside any module, so no go.mod is read or changed.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("downloading %s: %w: %s", ClusterAPIModule, err, stderr.String())
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("reading where %s is: %w: %s", ClusterAPIModule, err, out)
	}
	if mod.Dir == "" {
		return "", fmt.Errorf("the Go command did not say where %s is: %s", ClusterAPIModule, out)
	}
	return mod.Dir, nil
}

// ClusterAPICRDs returns the paths of the Cluster API CRDs captf reads; with core, every CRD
// of Cluster API's core manager, which it needs to run.
func ClusterAPICRDs(core bool) ([]string, error) {
	dir, err := ClusterAPIDir()
	if err != nil {
		return nil, err
	}
	bases := filepath.Join(dir, "core", "config", "crd", "bases")
	if core {
		return []string{bases}, nil
	}
	var paths []string
	for _, name := range clusterAPICRDs {
		path := filepath.Join(bases, name)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("the CRD %s: %w", name, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

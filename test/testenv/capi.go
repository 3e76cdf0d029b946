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

// ClusterAPICRDs returns the paths of the Cluster API CRDs captf reads, from the module cache;
// the Go command downloads the module from the module proxy when the cache lacks it.
func ClusterAPICRDs() ([]string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", ClusterAPIModule)
	// Outside any module, so no go.mod is read or changed.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("downloading %s: %w: %s", ClusterAPIModule, err, stderr.String())
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("reading where %s is: %w: %s", ClusterAPIModule, err, out)
	}
	if mod.Dir == "" {
		return nil, fmt.Errorf("the Go command did not say where %s is: %s", ClusterAPIModule, out)
	}
	var paths []string
	for _, name := range clusterAPICRDs {
		path := filepath.Join(mod.Dir, "core", "config", "crd", "bases", name)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("the CRD %s: %w", name, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

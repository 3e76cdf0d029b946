// Command clusterctl writes captf's clusterctl provider repository: the components, metadata
// and cluster template of one release, assembled from artifacts/. With -cluster-api it also
// writes Cluster API's own providers from the pinned module and a configuration for
// `clusterctl init` that names all of them, for management clusters without access to GitHub.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/captf/captf/hack/clusterctl/repo"
)

func main() {
	artifacts := flag.String("artifacts", "artifacts", "the directory of the shipped manifests")
	out := flag.String("out", "dist/clusterctl", "the root of the local repository to write")
	clusterAPI := flag.Bool("cluster-api", false, "also write Cluster API "+repo.ClusterAPIVersion+
		"'s core, kubeadm bootstrap and kubeadm control plane providers from its Go module, and "+
		"<out>/clusterctl.yaml naming every provider with cert-manager externally provisioned")
	flag.Parse()
	dir, err := repo.Write(*artifacts, *out)
	if err == nil && *clusterAPI {
		err = writeClusterAPI(*out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusterctl repository:", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}

// writeClusterAPI writes Cluster API's repositories and the init configuration under root.
func writeClusterAPI(root string) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	module, err := repo.ClusterAPIDir()
	if err != nil {
		return err
	}
	if err := repo.WriteClusterAPI(module, root); err != nil {
		return err
	}
	config, err := repo.InitConfig(root, repo.InitOptions{})
	if err != nil {
		return err
	}
	path := filepath.Join(root, "clusterctl.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}

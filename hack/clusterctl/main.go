// Command clusterctl writes captf's clusterctl provider repository: the components, metadata
// and cluster template of one release, assembled from artifacts/.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/captf/captf/hack/clusterctl/repo"
)

func main() {
	artifacts := flag.String("artifacts", "artifacts", "the directory of the shipped manifests")
	out := flag.String("out", "dist/clusterctl", "the root of the local repository to write")
	flag.Parse()
	dir, err := repo.Write(*artifacts, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusterctl repository:", err)
		os.Exit(1)
	}
	fmt.Println(dir)
}

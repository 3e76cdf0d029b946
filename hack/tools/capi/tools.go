//go:build tools

// Package tools pins Cluster API's core manager, its kubeadm bootstrap provider (CABPK) and
// clusterctl, built into bin/capi-manager, bin/capi-kubeadm-bootstrap and bin/clusterctl by
// `make tools`. It lives in its own module: Cluster API brings its own k8s.io
// library versions, and its go.mod replaces its api module with a local path, which a module
// that requires it must replace with the released version.
package tools

import (
	_ "sigs.k8s.io/cluster-api/bootstrap/kubeadm"
	_ "sigs.k8s.io/cluster-api/cmd/clusterctl"
	_ "sigs.k8s.io/cluster-api/core"
)

//go:build tools

// Package tools pins the code generators run by `make generate`: controller-gen for the CRDs and
// their deepcopy, code-generator for the runs API, and kube-openapi's openapi-gen.
package tools

import (
	_ "k8s.io/code-generator/cmd/conversion-gen"
	_ "k8s.io/code-generator/cmd/deepcopy-gen"
	_ "k8s.io/code-generator/cmd/defaulter-gen"
	_ "k8s.io/kube-openapi/cmd/openapi-gen"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)

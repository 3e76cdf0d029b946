//go:build tools

// Package tools pins the OpenTofu binary built into bin/tofu by `make tools`. It lives in its own
// module because OpenTofu needs a replace directive and older k8s.io libraries.
package tools

import _ "github.com/opentofu/opentofu/cmd/tofu"

//go:build tools

// Package tools pins the OpenTofu provider hashicorp/local, built into the provider mirror
// bin/providers by `make tools`: a release on the first standalone plugin SDK (protocol 5), the
// newest the module proxy serves. Its go.mod declares the repository's older path,
// github.com/terraform-providers/terraform-provider-local, so that path is required and
// replaced by the one the proxy serves it under.
package tools

import _ "github.com/terraform-providers/terraform-provider-local"

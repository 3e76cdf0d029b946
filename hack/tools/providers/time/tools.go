//go:build tools

// Package tools pins the OpenTofu provider hashicorp/time, built into the provider mirror
// bin/providers by `make tools`: a current plugin-framework provider (protocol 6). It lives in
// its own module so that its dependencies never meet another provider's.
package tools

import _ "github.com/hashicorp/terraform-provider-time"

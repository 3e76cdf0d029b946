//go:build tools

// Package tools pins golangci-lint, built into bin/golangci-lint by `make tools`. It lives in its
// own module so the linter's many dependencies never touch the project's go.mod.
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"

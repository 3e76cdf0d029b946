//go:build tools

// Package tools pins Prometheus's promtool, built into bin/promtool by `make promtool` to
// unit-test the alerting rules of artifacts/monitoring. It lives in its own module so
// Prometheus's many dependencies never touch the project's go.mod.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"

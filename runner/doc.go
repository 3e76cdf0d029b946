// Package runner is the program that runs inside a Job: it drives a real OpenTofu or
// Terraform binary, keys the plan hash, guards destructive plans and reports its result as the
// termination message.
package runner

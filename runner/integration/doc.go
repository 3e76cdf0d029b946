// Package integration holds the runner's tests against the real thing: OpenTofu from bin/ and
// a real kube-apiserver (test/testenv) as the kubernetes state backend. It has no code of its
// own; the tests drive package runner in process, as `runner run` does in a Job.
package integration

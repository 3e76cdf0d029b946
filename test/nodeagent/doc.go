// Package nodeagent is a local node agent for development and tests only, never for
// production. It registers one Node with a real kube-apiserver, binds the pods of captf's Jobs
// to it (no scheduler runs in a local control plane) and runs each pod's containers as local
// processes: an image is pulled from its registry (plain HTTP for a loopback one) and unpacked
// under the agent's work directory, or stands for a set of local files (Config.Images,
// Agent.PushImage, with a digest per mapping so that pods may name it by digest); volumes are
// directories under the agent's work directory, and container paths in arguments and
// environment values are rewritten to those local paths (the image's "/" to its unpacked file
// system). It reports container states, exit codes and termination messages in pod status,
// stops processes with SIGTERM and SIGKILL after the grace period when a pod is deleted, and
// completes the deletion, so the Job controller and garbage collector of a local
// kube-controller-manager see what they would see on a real node.
//
// There is no isolation: processes run as the agent's user, see the host's filesystem and
// network, and have no resource limits. See docs/nodeagent.md for the rules.
package nodeagent

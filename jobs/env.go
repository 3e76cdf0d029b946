package jobs

import "strings"

// ConfiguresRuntime reports whether an environment variable tells OpenTofu where its CLI
// configuration, credentials, plugins, data or backend are: every TF_* and KUBE_* variable,
// TERRAFORM_CONFIG (the older name of TF_CLI_CONFIG_FILE), HOME and the XDG base directories
// (OpenTofu looks for CLI configuration, credentials and plugins under them, and for container
// registry credentials under XDG_RUNTIME_DIR). The runner sets or drops each of them for the
// runtime, and the Job leaves them out of a policy's env.
func ConfiguresRuntime(name string) bool {
	switch name {
	case "HOME", "TERRAFORM_CONFIG", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR":
		return true
	}
	return strings.HasPrefix(name, "TF_") || strings.HasPrefix(name, "KUBE_")
}

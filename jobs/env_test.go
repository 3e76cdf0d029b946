package jobs

import "testing"

func TestConfiguresRuntime(t *testing.T) {
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"TF_CLI_CONFIG_FILE", true},
		{"TF_TOKEN_registry_example_com", true},
		{"KUBE_CONFIG_PATH", true},
		{"TERRAFORM_CONFIG", true},
		{"HOME", true},
		{"XDG_CONFIG_HOME", true},
		{"XDG_DATA_HOME", true},
		{"XDG_CACHE_HOME", true},
		{"XDG_RUNTIME_DIR", true},
		{"REGION", false},
		{"HTTPS_PROXY", false},
		{"KUBERNETES_SERVICE_HOST", false},
	} {
		if got := ConfiguresRuntime(tt.name); got != tt.want {
			t.Errorf("ConfiguresRuntime(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

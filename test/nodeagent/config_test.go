package nodeagent

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// The agent runs pods on the host without isolation, so it serves only an API server on a
// loopback address.
func TestNewRefusesAnAPIServerNotOnLoopback(t *testing.T) {
	for _, rule := range []struct {
		name, host string
		accepted   bool
	}{
		{"127.0.0.1 with a scheme", "https://127.0.0.1:6443", true},
		{"127.0.0.1 without a scheme", "127.0.0.1:6443", true},
		{"anywhere in 127.0.0.0/8", "https://127.3.2.1", true},
		{"localhost", "https://localhost:6443", true},
		{"::1", "https://[::1]:6443", true},
		{"a private address", "https://10.0.0.1:6443", false},
		{"a public name", "https://api.example.com:6443", false},
		{"a name that starts with localhost", "https://localhost.example.com", false},
		{"an address that ends like loopback", "https://10.127.0.1", false},
		{"no host", "", false},
	} {
		_, err := New(Config{RESTConfig: &rest.Config{Host: rule.host}, WorkDir: t.TempDir()})
		switch {
		case rule.accepted && err != nil:
			t.Errorf("%s: New refused %q: %v", rule.name, rule.host, err)
		case !rule.accepted && (err == nil || !strings.Contains(err.Error(), "loopback")):
			t.Errorf("%s: New(%q) = %v, want a loopback error", rule.name, rule.host, err)
		}
	}
}

package aggregated

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"testing"
)

// TestRequestsWithoutFrontProxyIdentityAreRejected calls the server directly, past the
// aggregator: a request without the front-proxy client certificate, even one that claims a
// user in the X-Remote-User header, carries no identity the server trusts.
func TestRequestsWithoutFrontProxyIdentityAreRejected(t *testing.T) {
	getEnv(t)
	ca, err := os.ReadFile(serverCA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	for _, tc := range []struct {
		rule    string
		headers map[string]string
	}{
		{"an anonymous request is refused", nil},
		{"a claimed user without the front-proxy certificate is refused", map[string]string{"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/apis/runs.captf.io/v1alpha1/runs", serverPort), nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
				t.Fatalf("status %d, want 401 or 403", resp.StatusCode)
			}
		})
	}
}

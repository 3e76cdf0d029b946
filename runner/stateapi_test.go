package runner

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// upstreamRecorder is an API server that records what reaches it.
type upstreamRecorder struct {
	mu       sync.Mutex
	requests []string
	auth     []string
}

func (u *upstreamRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.requests = append(u.requests, r.Method+" "+r.URL.RequestURI())
	u.auth = append(u.auth, r.Header.Get("Authorization"))
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"upstream"}}`)
}

func (u *upstreamRecorder) seen() ([]string, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.requests), slices.Clone(u.auth)
}

// startUpstream serves an upstream API server and writes a kubeconfig with a token for it.
func startUpstream(t *testing.T) (*upstreamRecorder, string) {
	t.Helper()
	up := &upstreamRecorder{}
	// TLS, since client-go sends credentials over TLS only.
	srv := httptest.NewTLSServer(up)
	t.Cleanup(srv.Close)
	config := clientcmdapi.NewConfig()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	config.Clusters["c"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: ca}
	config.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: "pod-token"}
	config.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "pod"}
	config.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		t.Fatal(err)
	}
	return up, path
}

func TestStateAPIBackendConfig(t *testing.T) {
	_, kubeconfig := startUpstream(t)
	tests := []struct {
		name    string
		config  []string
		proxied bool
	}{
		{"without a Kubernetes API the configuration is passed as given", []string{"secret_suffix=s", "namespace=ns"}, false},
		{"in_cluster_config=false alone is not a Kubernetes API to front", []string{"in_cluster_config=false", "secret_suffix=s"}, false},
		{"config_path is fronted and replaced by the state API's kubeconfig", []string{"secret_suffix=s", "config_path=" + kubeconfig, "namespace=ns"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			workdir := t.TempDir()
			got, api, err := startStateAPI(tt.config, workdir, false)
			if err != nil {
				t.Fatal(err)
			}
			defer api.stop()
			if !tt.proxied {
				if api != nil || !slices.Equal(got, tt.config) {
					t.Fatalf("got %q (api %v), want %q unchanged", got, api != nil, tt.config)
				}
				return
			}
			want := []string{"secret_suffix=s", "namespace=ns", "config_path=" + filepath.Join(workdir, stateAPIKubeconfig)}
			if api == nil || !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

func TestStateAPIRequests(t *testing.T) {
	up, kubeconfig := startUpstream(t)
	workdir := t.TempDir()
	config, api, err := startStateAPI([]string{"config_path=" + kubeconfig, "config_context=c"}, workdir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer api.stop()
	loopback, err := clientcmd.BuildConfigFromFlags("", strings.TrimPrefix(config[0], "config_path="))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		method    string
		path      string
		forwarded bool
		body      string
	}{
		{"the backend's list of Secrets is answered empty and never reaches the API server", "GET", "/api/v1/namespaces/ns/secrets?labelSelector=tfstate%3Dtrue", false, emptySecretList},
		{"its own state Secret is read from the API server", "GET", "/api/v1/namespaces/ns/secrets/tfstate-default-s", true, "upstream"},
		{"its state Secret, small enough for one Secret, is written to the API server as sent", "PUT", "/api/v1/namespaces/ns/secrets/tfstate-default-s", true, "upstream"},
		{"its lock Lease is read from the API server", "GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lock-tfstate-default-s", true, "upstream"},
		{"a watch of Secrets is not a list and goes to the API server, which judges it", "GET", "/api/v1/namespaces/ns/secrets?watch=true", true, "upstream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := up.seen()
			sent := "{}"
			if tt.method == "PUT" {
				sent = `{"kind":"Secret","apiVersion":"v1","metadata":{"name":"tfstate-default-s","namespace":"ns"},"data":{"tfstate":"c21hbGw="}}`
			}
			req, err := http.NewRequest(tt.method, loopback.Host+tt.path, strings.NewReader(sent))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer forged")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), tt.body) {
				t.Fatalf("status %d body %s, want 200 with %q", resp.StatusCode, body, tt.body)
			}
			after, auth := up.seen()
			if forwarded := len(after) > len(before); forwarded != tt.forwarded {
				t.Fatalf("forwarded %v, want %v (upstream saw %q)", forwarded, tt.forwarded, after)
			}
			if tt.forwarded {
				if got := after[len(after)-1]; got != tt.method+" "+tt.path {
					t.Fatalf("upstream saw %q, want %q", got, tt.method+" "+tt.path)
				}
				if got := auth[len(auth)-1]; got != "Bearer pod-token" {
					t.Fatalf("upstream saw Authorization %q, want the pod's token and never the caller's", got)
				}
			}
		})
	}
}

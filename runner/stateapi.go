package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The kubernetes backend settings that say where the API server is and who the backend is.
const (
	backendInCluster     = "in_cluster_config"
	backendConfigPath    = "config_path"
	backendConfigContext = "config_context"
)

// stateAPIKubeconfig is the kubeconfig, in the work directory, that points the backend at the
// runner's state API.
const stateAPIKubeconfig = "state-api.kubeconfig"

// secretListPath matches a list of the Secrets of one namespace.
var secretListPath = regexp.MustCompile(`^/api/v1/namespaces/[^/]+/secrets/?$`)

// emptySecretList is the runner's answer to the backend's list of Secrets.
const emptySecretList = `{"kind":"SecretList","apiVersion":"v1","metadata":{},"items":[]}`

// statePartsWait bounds how long a state write waits for the controller to create the parts it
// asked for; the controller creates them in its next pass, woken by the request.
const statePartsWait = 2 * time.Minute

// stateAPI serves the kubernetes backend on loopback and forwards its requests to the API
// server under the pod's identity, with two exceptions: its state Secret, whose reads and writes
// it serves itself so that a state larger than one Secret is kept in parts (stateParts), and a
// list of Secrets. The backend lists the
// Secrets labelled tfstate=true only to name the workspaces besides "default", which it always
// reports and which is the only one captf uses. A run's identity may only get and update its own
// state Secret and lock Lease by name, and RBAC cannot limit a list to one object, so the list
// is answered here, empty, and the identity never needs a right that would show it every
// Secret of its namespace.
type stateAPI struct {
	server   *http.Server
	listener net.Listener
}

// startStateAPI starts the state API (repairing, for a restore: see stateParts.repair) when the backend configuration names a Kubernetes API
// (in_cluster_config=true or config_path=…), writes a kubeconfig for it into workdir and returns
// the backend configuration rewritten to use it. Without either setting it returns config as
// given and a nil stateAPI.
func startStateAPI(config []string, workdir string, repair bool) ([]string, *stateAPI, error) {
	var inCluster bool
	var path, kubeContext string
	var rest []string
	for _, bc := range config {
		key, value, ok := strings.Cut(bc, "=")
		switch {
		case ok && key == backendInCluster:
			inCluster = value == "true"
		case ok && key == backendConfigPath:
			path = value
		case ok && key == backendConfigContext:
			kubeContext = value
		default:
			rest = append(rest, bc)
		}
	}
	if !inCluster && path == "" {
		return config, nil, nil
	}
	upstream, err := upstreamConfig(inCluster, path, kubeContext)
	if err != nil {
		return nil, nil, fmt.Errorf("state API: %w", err)
	}
	handler, err := newStateAPIHandler(upstream, repair)
	if err != nil {
		return nil, nil, fmt.Errorf("state API: %w", err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("state API: %w", err)
	}
	api := &stateAPI{server: &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}, listener: listener}
	file := filepath.Join(workdir, stateAPIKubeconfig)
	if err := writeLoopbackKubeconfig(file, "http://"+listener.Addr().String()); err != nil {
		_ = listener.Close()
		return nil, nil, fmt.Errorf("state API: %w", err)
	}
	go func() { _ = api.server.Serve(listener) }()
	return append(rest, backendConfigPath+"="+file), api, nil
}

// stop ends the state API; nil is a no-op.
func (a *stateAPI) stop() {
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.server.Shutdown(ctx)
}

// upstreamConfig is the API server and identity the backend was given.
func upstreamConfig(inCluster bool, path, kubeContext string) (*rest.Config, error) {
	if path == "" {
		return rest.InClusterConfig()
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
}

// newStateAPIHandler forwards to upstream with its credentials and answers Secret lists itself.
func newStateAPIHandler(upstream *rest.Config, repair bool) (http.Handler, error) {
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, err
	}
	host, _, err := rest.DefaultServerUrlFor(upstream)
	if err != nil {
		return nil, err
	}
	if host.Path != "" && host.Path != "/" {
		return nil, errors.New("an API server URL with a path is not supported")
	}
	// A save of a state in 8 parts is about 20 requests; client-go's default of 5 a second would
	// spread it over seconds.
	partsConfig := rest.CopyConfig(upstream)
	partsConfig.QPS, partsConfig.Burst = 50, 100
	clientset, err := kubernetes.NewForConfig(partsConfig)
	if err != nil {
		return nil, err
	}
	parts := &stateParts{client: clientset, partsWait: statePartsWait, poll: time.Second, repair: repair}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: host.Scheme, Host: host.Host})
			// The identity is the pod's, added by the transport.
			r.Out.Header.Del("Authorization")
		},
		Transport: transport,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && secretListPath.MatchString(r.URL.Path) && r.URL.Query().Get("watch") == "" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(emptySecretList))
			return
		}
		if namespace, suffix, ok := stateSecretOf(r); ok {
			parts.serve(w, r, namespace, suffix)
			return
		}
		proxy.ServeHTTP(w, r)
	}), nil
}

// writeLoopbackKubeconfig writes a kubeconfig for server, without credentials.
func writeLoopbackKubeconfig(path, server string) error {
	config := clientcmdapi.NewConfig()
	config.Clusters["state-api"] = &clientcmdapi.Cluster{Server: server}
	config.AuthInfos["runner"] = &clientcmdapi.AuthInfo{}
	config.Contexts["state-api"] = &clientcmdapi.Context{Cluster: "state-api", AuthInfo: "runner"}
	config.CurrentContext = "state-api"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*config, path)
}

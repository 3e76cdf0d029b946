package nodeagent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// serveLogs serves container logs the way the API server asks a kubelet for them
// (GET /containerLogs/<namespace>/<pod>/<container>, follow=true to stream), so that
// `kubectl logs` and pods/log work for the agent's pods. It listens on the node's loopback
// address with a self-signed certificate: the test API server is started without
// --kubelet-certificate-authority and so does not verify it, and it sends no client
// certificate, so this dev-only endpoint does not authenticate. It returns the port.
func (a *Agent) serveLogs(ctx context.Context) (int, error) {
	cert, err := selfSigned()
	if err != nil {
		return 0, err
	}
	listener, err := tls.Listen("tcp", net.JoinHostPort(nodeIP, "0"), &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return 0, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", a.containerLogs)
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = server.Serve(listener) }()
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	return listener.Addr().(*net.TCPAddr).Port, nil
}

// containerLogs writes a container's log file; with follow=true it keeps writing what the
// container appends until the container has terminated or the client goes away.
func (a *Agent) containerLogs(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("namespace") + "/" + r.PathValue("pod")
	container := r.PathValue("container")
	pod := a.podByKey(key)
	if pod == nil {
		http.Error(w, "pod "+key+" is not on this node", http.StatusNotFound)
		return
	}
	f, err := os.Open(filepath.Join(a.podDir(pod.UID), container+".log"))
	if err != nil {
		http.Error(w, "container "+container+" of pod "+key+" has no log yet", http.StatusNotFound)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "text/plain")
	follow := strings.EqualFold(r.URL.Query().Get("follow"), "true")
	flusher, _ := w.(http.Flusher)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := io.Copy(w, f)
		if err != nil && !errors.Is(err, io.EOF) {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		// Stop once nothing more can come: the container finished and the file is drained.
		if !follow || n == 0 && terminated(a.podByKey(key), container) {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// podByKey returns a pod of this node from the informer, or nil.
func (a *Agent) podByKey(key string) *corev1.Pod {
	obj, exists, err := a.nodePods.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return nil
	}
	pod, _ := obj.(*corev1.Pod)
	return pod
}

// terminated reports whether a container of pod has ended, or the pod is gone.
func terminated(pod *corev1.Pod, container string) bool {
	if pod == nil {
		return true
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range statuses {
			if s.Name == container {
				return s.State.Terminated != nil
			}
		}
	}
	return false
}

// selfSigned makes a serving certificate for the node's address.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "captf-nodeagent"},
		IPAddresses:  []net.IP{net.ParseIP(nodeIP)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour * 365),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

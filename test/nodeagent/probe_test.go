package nodeagent

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The thresholds, a row per rule: a readiness probe starts unready and turns ready after
// successThreshold successes; either turns unhealthy after failureThreshold failures in a row,
// and a success in between starts the count again.
func TestProberThresholds(t *testing.T) {
	ok, fail := probeResult{ok: true}, probeResult{}
	for _, tc := range []struct {
		name    string
		probe   corev1.Probe
		start   bool
		results []probeResult
		want    bool
	}{
		{"a readiness probe starts unready", corev1.Probe{}, false, nil, false},
		{"one success makes ready by default", corev1.Probe{}, false, []probeResult{ok}, true},
		{"successThreshold successes make ready", corev1.Probe{SuccessThreshold: 2}, false, []probeResult{ok}, false},
		{"two of two successes make ready", corev1.Probe{SuccessThreshold: 2}, false, []probeResult{ok, ok}, true},
		{"two failures of the default three keep a live container alive", corev1.Probe{}, true, []probeResult{fail, fail}, true},
		{"three failures in a row kill by default", corev1.Probe{}, true, []probeResult{fail, fail, fail}, false},
		{"a success resets the failures", corev1.Probe{}, true, []probeResult{fail, fail, ok, fail, fail}, true},
		{"failureThreshold 1 fails at once", corev1.Probe{FailureThreshold: 1}, true, []probeResult{fail}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProber(&tc.probe, tc.start)
			for _, r := range tc.results {
				p.observe(r)
			}
			if p.healthy != tc.want {
				t.Errorf("healthy = %v, want %v", p.healthy, tc.want)
			}
		})
	}
}

// httpGet and tcpSocket probes reach the node's address on a numbered or named port; a status
// from 200 to 399 passes; exec probes are not run by the agent.
func TestRunProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer tlsSrv.Close()
	port := func(s *httptest.Server) int {
		_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
		n, _ := strconv.Atoi(p)
		return n
	}
	container := &corev1.Container{Ports: []corev1.ContainerPort{{Name: "probes", ContainerPort: int32(port(srv))}}}
	for _, tc := range []struct {
		name  string
		probe corev1.Probe
		ok    bool
	}{
		{"an HTTP 200 passes", corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt(port(srv))}}}, true},
		{"a named port is the container's", corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("probes")}}}, true},
		{"an HTTP 503 fails", corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/other", Port: intstr.FromInt(port(srv))}}}, false},
		{"an unknown port name fails", corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("nope")}}}, false},
		{"HTTPS is not verified, as a kubelet does", corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt(port(tlsSrv)), Scheme: corev1.URISchemeHTTPS}}}, true},
		{"a TCP connection passes", corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(port(srv))}}}, true},
		{"exec is not run", corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runProbe(t.Context(), &tc.probe, container); got.ok != tc.ok {
				t.Errorf("runProbe = %+v, want ok %v", got, tc.ok)
			}
		})
	}
}

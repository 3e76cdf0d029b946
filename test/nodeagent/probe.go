package nodeagent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Defaults of a probe's fields, as the API server defaults them.
const (
	defaultProbePeriod           = 10 * time.Second
	defaultProbeTimeout          = time.Second
	defaultProbeFailureThreshold = 3
	defaultProbeSuccessThreshold = 1
)

// probeResult is what one probe found; message says why it failed.
type probeResult struct {
	ok      bool
	message string
}

// runProbe runs a probe once against a container of the pod: httpGet and tcpSocket on the
// node's address (every pod shares it), with the probe's timeout. exec and grpc probes are not
// run by the agent: they fail, saying so.
func runProbe(ctx context.Context, probe *corev1.Probe, c *corev1.Container) probeResult {
	timeout := defaultProbeTimeout
	if probe.TimeoutSeconds > 0 {
		timeout = time.Duration(probe.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case probe.HTTPGet != nil:
		g := probe.HTTPGet
		port, err := probePort(g.Port, c)
		if err != nil {
			return probeResult{message: err.Error()}
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		host := nodeIP
		if g.Host != "" {
			host = g.Host
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+g.Path, nil)
		if err != nil {
			return probeResult{message: err.Error()}
		}
		for _, h := range g.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		// As a kubelet does: HTTPS probes do not verify the server, and redirects are followed.
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a kubelet's probes do not verify either
		resp, err := client.Do(req)
		if err != nil {
			return probeResult{message: err.Error()}
		}
		_ = resp.Body.Close()
		if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusBadRequest {
			return probeResult{message: fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode)}
		}
		return probeResult{ok: true}
	case probe.TCPSocket != nil:
		port, err := probePort(probe.TCPSocket.Port, c)
		if err != nil {
			return probeResult{message: err.Error()}
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(nodeIP, strconv.Itoa(port)))
		if err != nil {
			return probeResult{message: err.Error()}
		}
		_ = conn.Close()
		return probeResult{ok: true}
	}
	return probeResult{message: "the node agent runs httpGet and tcpSocket probes only"}
}

// probePort resolves a probe's port: a number, or the name of one of the container's ports.
func probePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("the container has no port named %q", port.StrVal)
}

// prober runs one probe of a running container on its schedule and counts its results against
// the thresholds, as a kubelet's prober worker does.
type prober struct {
	probe     *corev1.Probe
	successes int32
	failures  int32
	// healthy is the probe's verdict: a readiness probe starts unready, a liveness probe alive.
	healthy bool
}

func newProber(probe *corev1.Probe, startHealthy bool) *prober {
	return &prober{probe: probe, healthy: startHealthy}
}

// observe records one result and reports whether the verdict changed.
func (p *prober) observe(r probeResult) bool {
	success, failure := p.probe.SuccessThreshold, p.probe.FailureThreshold
	if success <= 0 {
		success = defaultProbeSuccessThreshold
	}
	if failure <= 0 {
		failure = defaultProbeFailureThreshold
	}
	before := p.healthy
	if r.ok {
		p.failures = 0
		if p.successes++; p.successes >= success {
			p.healthy = true
		}
	} else {
		p.successes = 0
		if p.failures++; p.failures >= failure {
			p.healthy = false
		}
	}
	return p.healthy != before
}

func (p *prober) period() time.Duration {
	if p.probe.PeriodSeconds > 0 {
		return time.Duration(p.probe.PeriodSeconds) * time.Second
	}
	return defaultProbePeriod
}

func (p *prober) initialDelay() time.Duration {
	return time.Duration(p.probe.InitialDelaySeconds) * time.Second
}

// probeContainer runs the container's readiness and liveness probes until done is closed: a
// change of readiness is reported in the pod's status, and a liveness verdict of dead stops the
// process, which the restart policy then restarts.
func (w *podWorker) probeContainer(ctx context.Context, pod *corev1.Pod, c *containerState, p *process) {
	var probers []*prober
	readiness, liveness := c.spec.ReadinessProbe, c.spec.LivenessProbe
	if readiness != nil {
		probers = append(probers, newProber(readiness, false))
	}
	if liveness != nil {
		probers = append(probers, newProber(liveness, true))
	}
	for _, pr := range probers {
		go func() {
			if !w.sleepUntil(ctx, p, pr.initialDelay()) {
				return
			}
			for {
				result := runProbe(ctx, pr.probe, &c.spec)
				changed := pr.observe(result)
				if !result.ok {
					kind := "Readiness"
					if pr.probe == liveness {
						kind = "Liveness"
					}
					w.event(pod, c.spec.Name, corev1.EventTypeWarning, "Unhealthy", kind+" probe failed: "+result.message)
				}
				if changed && pr.probe == readiness {
					w.mu.Lock()
					c.ready = pr.healthy
					w.mu.Unlock()
					w.report(ctx)
				}
				if changed && pr.probe == liveness && !pr.healthy {
					w.event(pod, c.spec.Name, corev1.EventTypeNormal, "Killing", "Container "+c.spec.Name+" failed liveness probe, will be restarted")
					p.terminate()
					return
				}
				if !w.sleepUntil(ctx, p, pr.period()) {
					return
				}
			}
		}()
	}
}

// sleepUntil waits d and reports whether the process still runs.
func (w *podWorker) sleepUntil(ctx context.Context, p *process, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.Done():
		return false
	case <-ctx.Done():
		return false
	}
}

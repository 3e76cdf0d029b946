package aggregated

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// replayServer stands between kubectl and kube-apiserver: while recording it forwards each
// request and keeps the answer; then it answers the same requests with the kept bytes alone.
// kubectl reading a list from it is the floor of that list: kubectl's own work on the same
// Table answers, with a server that spends nothing.
type replayServer struct {
	server    *httptest.Server
	target    string
	transport http.RoundTripper

	mu        sync.Mutex
	recording bool
	answers   map[string]recordedAnswer
	// missed counts requests replayed without a recorded answer.
	missed int
}

// recordedAnswer is one response as kube-apiserver sent it.
type recordedAnswer struct {
	status int
	header http.Header
	body   []byte
}

// newReplayServer starts a recording replayServer in front of the API server of cfg.
func newReplayServer(cfg *rest.Config) (*replayServer, error) {
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	s := &replayServer{target: strings.TrimSuffix(cfg.Host, "/"), transport: transport, recording: true, answers: map[string]recordedAnswer{}}
	s.server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s, nil
}

// replay stops forwarding: from now on only recorded answers are served.
func (s *replayServer) replay() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recording = false
}

func (s *replayServer) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("Accept")
	s.mu.Lock()
	recording := s.recording
	answer, ok := s.answers[key]
	if !recording && !ok {
		s.missed++
	}
	s.mu.Unlock()
	if recording {
		var err error
		if answer, err = s.forward(r); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		s.mu.Lock()
		s.answers[key] = answer
		s.mu.Unlock()
	} else if !ok {
		http.Error(w, "not recorded: "+key, http.StatusNotFound)
		return
	}
	for k, v := range answer.header {
		w.Header()[k] = v
	}
	w.WriteHeader(answer.status)
	_, _ = w.Write(answer.body)
}

// forward sends r to the API server and reads its whole answer.
func (s *replayServer) forward(r *http.Request) (recordedAnswer, error) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, s.target+r.URL.RequestURI(), r.Body)
	if err != nil {
		return recordedAnswer{}, err
	}
	out.Header = r.Header.Clone()
	resp, err := s.transport.RoundTrip(out)
	if err != nil {
		return recordedAnswer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return recordedAnswer{}, err
	}
	return recordedAnswer{status: resp.StatusCode, header: resp.Header.Clone(), body: body}, nil
}

// kubectl runs kubectl against the replay server with its own discovery cache, returning how
// long it took.
func (s *replayServer) kubectl(dir string, args ...string) (time.Duration, error) {
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if _, err := os.Stat(kubeconfig); err != nil {
		config := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: replay\n  cluster:\n    server: %s\ncontexts:\n- name: replay\n  context:\n    cluster: replay\n    user: replay\nusers:\n- name: replay\n  user: {}\ncurrent-context: replay\n", s.server.URL)
		if err := os.WriteFile(kubeconfig, []byte(config), 0o600); err != nil {
			return 0, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(env.BinDir, "kubectl"), append([]string{"--kubeconfig=" + kubeconfig, "--cache-dir=" + filepath.Join(dir, "cache")}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return time.Since(start), nil
}

// kubectlFloor measures the floor of a kubectl command: it records the command's requests
// once, then times the command against the recorded answers.
func kubectlFloor(b *testing.B, args ...string) {
	s, err := newReplayServer(getEnv(b).Config)
	if err != nil {
		b.Fatal(err)
	}
	defer s.server.Close()
	dir := b.TempDir()
	if _, err := s.kubectl(dir, args...); err != nil {
		b.Fatal(err)
	}
	s.replay()
	for b.Loop() {
		if _, err := s.kubectl(dir, args...); err != nil {
			b.Fatal(err)
		}
	}
	s.mu.Lock()
	missed := s.missed
	s.mu.Unlock()
	if missed > 0 {
		b.Fatalf("kubectl made %d requests the recording does not have: the floor did not replay the same work", missed)
	}
}

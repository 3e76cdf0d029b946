package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/captf/captf/jobs"
)

// hangingRuntime stands in for OpenTofu: it answers version and hangs in init until SIGTERM,
// which it records.
const hangingRuntime = `#!/bin/sh
case "$1" in
version) echo '{"terraform_version":"0.0.0"}'; exit 0 ;;
init)
  trap 'echo term > "$FAKE_DIR/got-term"; exit 143' TERM
  echo started > "$FAKE_DIR/started"
  sleep 60 &
  wait
  exit 0 ;;
esac
exit 0
`

// layout writes a fake runtime, a module and a config dir, and returns the run flags for them.
func layout(t *testing.T) (dir string, flags []string) {
	t.Helper()
	dir = t.TempDir()
	for path, content := range map[string]string{
		"bin/tofu":            hangingRuntime,
		"module/main.tf":      "",
		"config/main.tf.json": "{}",
		"result":              "",
	} {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, []string{
		"--bin=" + filepath.Join(dir, "bin/tofu"),
		"--module=" + filepath.Join(dir, "module"),
		"--config=" + filepath.Join(dir, "config"),
		"--workdir=" + filepath.Join(dir, "work"),
		"--result=" + filepath.Join(dir, "result"),
	}
}

func readResult(t *testing.T, path string) jobs.RunnerResult {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := jobs.ParseRunnerResult(doc)
	if err != nil {
		t.Fatalf("result %q: %v", doc, err)
	}
	return r
}

func TestExitCodes(t *testing.T) {
	dir, flags := layout(t)
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"no command is a usage error", nil, 2},
		{"an unknown command is a usage error", []string{"frobnicate"}, 2},
		{"version succeeds", []string{"version"}, 0},
		{"version takes no arguments", []string{"version", "x"}, 2},
		{"copy needs a destination", []string{"copy"}, 2},
		{"copy takes one destination", []string{"copy", "a", "b"}, 2},
		{"copy into a missing directory fails", []string{"copy", filepath.Join(dir, "missing", "runner")}, 1},
		{"copy succeeds", []string{"copy", filepath.Join(dir, "runner")}, 0},
		{"run needs --op", append([]string{"run"}, flags...), 2},
		{"run refuses an unknown op", append([]string{"run", "--op=import"}, flags...), 2},
		{"run refuses an unknown flag", append([]string{"run", "--op=apply", "--bogus"}, flags...), 2},
		{"run refuses a bad duration", append([]string{"run", "--op=apply", "--lock-timeout=soon"}, flags...), 2},
		{"run takes no arguments", append([]string{"run", "--op=apply", "extra"}, flags...), 2},
		{"run refuses expect-plan on a destroy", append([]string{"run", "--op=destroy", "--expect-plan=" + jobs.EmptyPlanHash}, flags...), 2},
		{"run fails on a bad image layout", append(append([]string{"run", "--op=apply"}, flags...), "--module="+dir), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := execute(context.Background(), tt.args, &stdout, &stderr); got != tt.want {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", got, tt.want, &stdout, &stderr)
			}
		})
	}
	info, err := os.Stat(filepath.Join(dir, "runner"))
	if err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("copy installed %v, %v; want mode 0755", info, err)
	}
}

func TestUsageErrorIsReported(t *testing.T) {
	dir, flags := layout(t)
	var stderr bytes.Buffer
	if code := execute(context.Background(), append([]string{"run", "--op=import"}, flags...), &bytes.Buffer{}, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	r := readResult(t, filepath.Join(dir, "result"))
	if r.Error == nil || r.Error.Kind != jobs.ErrorKindStep || r.Error.Step != "flags" || !strings.Contains(r.Error.Tail, "--op") {
		t.Errorf("result error %+v, want a step error in flags naming --op", r.Error)
	}
}

func TestVersion(t *testing.T) {
	var stdout bytes.Buffer
	if code := execute(context.Background(), []string{"version"}, &stdout, &bytes.Buffer{}); code != 0 || !strings.HasPrefix(stdout.String(), "runner ") {
		t.Errorf("exit %d, output %q", code, &stdout)
	}
}

// TestSIGTERMIsForwarded builds the real binary, sends it SIGTERM while the runtime runs, and
// checks that the runtime got SIGTERM and the result says interrupted.
func TestSIGTERMIsForwarded(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the runner")
	}
	dir, flags := layout(t)
	bin := filepath.Join(dir, "runner")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var log bytes.Buffer
	cmd := exec.Command(bin, append([]string{"run", "--op=apply", "--stop-timeout=30s"}, flags...)...)
	cmd.Env = append(os.Environ(), "FAKE_DIR="+dir)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runtime did not start; log:\n%s", &log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
		t.Fatalf("runner exited %v, want exit 1; log:\n%s", err, &log)
	}
	if _, err := os.Stat(filepath.Join(dir, "got-term")); err != nil {
		t.Errorf("the runtime did not get SIGTERM; log:\n%s", &log)
	}
	r := readResult(t, filepath.Join(dir, "result"))
	if r.Error == nil || r.Error.Kind != jobs.ErrorKindInterrupted || r.Error.Step != "init" {
		t.Errorf("result error %+v, want interrupted in init", r.Error)
	}
}

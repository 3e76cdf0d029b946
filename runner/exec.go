package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// maxStdoutTail bounds the stdout a logged step keeps in memory (validate diagnostics, the
// apply summary line, state list).
const maxStdoutTail = 1 << 20

// pipeDrainDelay bounds how long a finished runtime's output may stay open, held by a child it
// left behind outside its process group, before the runner stops reading it.
const pipeDrainDelay = 5 * time.Second

// stepSpec is one runtime invocation.
type stepSpec struct {
	// name is the step's name in the result.
	name string
	// args follow the runtime command.
	args []string
	// capture holds stdout in memory instead of logging it; `show -json` carries every value
	// of the plan, sensitive ones included.
	capture bool
	// withhold logs only the summary lines of stdout: plan, apply, destroy and refresh print
	// the planned changes, with every value that is not sensitive.
	withhold bool
	// okExits are the exit codes that count as success besides 0 (2 for -detailed-exitcode).
	okExits []int
}

// stepOutcome is what a step did.
type stepOutcome struct {
	exit    int
	seconds float64
	// stdout is the captured output, or the last maxStdoutTail bytes of the logged output.
	stdout []byte
	// stderr is the last maxStderrTail bytes of stderr.
	stderr string
	// stopped is set when a stop request arrived while the step ran.
	stopped bool
	// startErr is set when the runtime could not be started at all.
	startErr error
}

func (s stepSpec) succeeded(exit int) bool {
	if exit == 0 {
		return true
	}
	for _, ok := range s.okExits {
		if exit == ok {
			return true
		}
	}
	return false
}

// execStep runs one step with the runtime. A stop request (ctx done) is forwarded to the
// runtime alone as SIGTERM; if it has not exited after stopTimeout, it and its process group
// are killed.
func (r *runner) execStep(ctx context.Context, spec stepSpec) stepOutcome {
	argv := append(append([]string(nil), r.o.Bin...), spec.args...)
	shown := make([]string, len(argv))
	for i, a := range argv {
		shown[i] = displayArg(a)
	}
	r.logf("step %s: %s", spec.name, strings.Join(shown, " "))

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = r.rootDir
	cmd.Env = r.env
	isolate(cmd)

	var captured bytes.Buffer
	stdoutTail := newRingBuffer(maxStdoutTail)
	stderrTail := newRingBuffer(maxStderrTail)
	// The log gets the output line by line and scrubbed; the tails keep it as printed, in
	// memory only, for the error tail and the change counts.
	stdoutLog := newLogWriter(r.stdout, &r.secrets, spec.withhold)
	stderrLog := newLogWriter(r.stderr, &r.secrets, false)
	var stdout io.Writer = io.MultiWriter(stdoutLog, stdoutTail)
	if spec.capture {
		stdout = &captured
	}
	// Own pipes, not exec's: Wait then returns when the runtime exits, and the runner decides
	// how long to keep reading output a left-behind child may still hold open.
	pipes, err := newOutputPipes(cmd, stdout, io.MultiWriter(stderrLog, stderrTail))
	if err != nil {
		return stepOutcome{exit: -1, startErr: err}
	}

	start := time.Now()
	if err := cmd.Start(); err != nil {
		pipes.abort()
		return stepOutcome{exit: -1, startErr: err}
	}
	pipes.started()

	done := make(chan struct{})
	// stopped is written by the watcher and read after it has finished (<-watcher).
	stopped := false
	watcher := make(chan struct{})
	go func() {
		defer close(watcher)
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		stopped = true
		r.logf("stop requested: sending SIGTERM to the runtime (pid %d), waiting up to %s", cmd.Process.Pid, r.o.StopTimeout)
		if err := terminate(cmd.Process); err != nil {
			r.logf("signalling the runtime: %v", err)
		}
		timer := time.NewTimer(r.o.StopTimeout)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			r.logf("the runtime did not stop within %s: killing it", r.o.StopTimeout)
			_ = kill(cmd.Process)
		}
	}()

	err = cmd.Wait()
	close(done)
	<-watcher
	// Whatever the runtime left running in its process group is an orphan of this step.
	reapGroup(cmd.Process)
	if !pipes.drain(pipeDrainDelay) {
		r.logf("step %s: output stayed open after the runtime exited; stopped reading it", spec.name)
	}
	_ = stdoutLog.Close()
	_ = stderrLog.Close()
	if n := stdoutLog.Withheld(); n > 0 {
		r.logf("step %s: withheld %d line(s) of output from the log: they show planned values, which only plan readers may see", spec.name, n)
	}
	out := stepOutcome{exit: 0, seconds: time.Since(start).Seconds(), stderr: stderrTail.String()}
	if spec.capture {
		out.stdout = captured.Bytes()
	} else {
		out.stdout = []byte(stdoutTail.String())
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		out.exit = exitErr.ExitCode()
	default:
		out.exit = -1
		out.startErr = fmt.Errorf("waiting for the runtime: %w", err)
	}
	out.stopped = stopped
	r.logf("step %s: exit %d after %.1fs", spec.name, out.exit, out.seconds)
	return out
}

// shownBackendKeys are the backend settings whose values may appear in the log; any other
// (token, password, client_key, exec, …) could be a credential.
var shownBackendKeys = map[string]bool{
	"secret_suffix": true, "namespace": true, "labels": true, "in_cluster_config": true,
	"config_path": true, "config_paths": true, "config_context": true, "load_config_file": true,
	"host": true, "insecure": true,
}

// displayArg is an argument as the log shows it: -backend-config values other than
// shownBackendKeys are hidden.
func displayArg(arg string) string {
	const flag = "-backend-config="
	setting, ok := strings.CutPrefix(arg, flag)
	if !ok {
		return arg
	}
	key, _, isPair := strings.Cut(setting, "=")
	if !isPair || shownBackendKeys[strings.TrimSpace(key)] {
		return arg
	}
	return flag + key + "=(hidden)"
}

// outputPipes carry a runtime's stdout and stderr to their writers.
type outputPipes struct {
	readers []*os.File
	writers []*os.File
	copied  sync.WaitGroup
}

func newOutputPipes(cmd *exec.Cmd, stdout, stderr io.Writer) (*outputPipes, error) {
	p := &outputPipes{}
	for _, dst := range []io.Writer{stdout, stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			p.abort()
			return nil, fmt.Errorf("creating an output pipe: %w", err)
		}
		p.readers = append(p.readers, r)
		p.writers = append(p.writers, w)
		p.copied.Add(1)
		go func() {
			defer p.copied.Done()
			_, _ = io.Copy(dst, r)
		}()
	}
	cmd.Stdout, cmd.Stderr = p.writers[0], p.writers[1]
	return p, nil
}

// started closes the runner's copies of the write ends, so the readers see EOF once the
// runtime and its children have closed theirs.
func (p *outputPipes) started() {
	for _, w := range p.writers {
		_ = w.Close()
	}
}

// abort closes everything, for a runtime that never started.
func (p *outputPipes) abort() {
	p.started()
	for _, r := range p.readers {
		_ = r.Close()
	}
	p.copied.Wait()
}

// drain waits up to d for the output to end, then stops reading. It reports whether the output
// ended by itself.
func (p *outputPipes) drain(d time.Duration) bool {
	ended := make(chan struct{})
	go func() {
		p.copied.Wait()
		close(ended)
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	clean := true
	select {
	case <-ended:
	case <-timer.C:
		clean = false
		for _, r := range p.readers {
			_ = r.Close()
		}
		<-ended
	}
	for _, r := range p.readers {
		_ = r.Close()
	}
	return clean
}

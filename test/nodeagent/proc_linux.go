//go:build linux

package nodeagent

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// process is a container's main process.
type process struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{}

	// mu orders signals against reaping: while exited is false the process has not been
	// reaped, so its PID (and process group ID) cannot have been reused by another process.
	mu     sync.Mutex
	exited bool
}

// startProcess starts spec. The process gets its own process group, so that signals reach what
// it starts, and the kernel kills it when the agent dies, so that no container outlives an
// agent that could not clean up.
func startProcess(spec procSpec) (*process, error) {
	cmd := &exec.Cmd{
		Path:   spec.path,
		Args:   spec.args,
		Env:    spec.env,
		Dir:    spec.dir,
		Stdout: spec.log,
		Stderr: spec.log,
		// Stdin nil is /dev/null.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go p.wait()
	return p, nil
}

// wait waits for the exit without reaping first, so the rest of the process group can be
// killed while the group ID is still safely the container's, as the end of a container's main
// process ends the whole container. Then it reaps.
func (p *process) wait() {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.mu.Lock()
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	p.exited = true
	p.mu.Unlock()
	_ = p.cmd.Wait()
	close(p.done)
}

// Done is closed once the process has exited and been reaped.
func (p *process) Done() <-chan struct{} { return p.done }

// Pid is the process ID.
func (p *process) Pid() int { return p.pid }

// terminate sends SIGTERM to the process group.
func (p *process) terminate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	}
}

// kill kills the process and everything it started.
func (p *process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		killTree(p.pid)
	}
}

// exitStatus returns the exit code as a container runtime reports it (128+n after signal n)
// and the signal, once Done is closed.
func (p *process) exitStatus() (code int32, signal int32) {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok {
		return int32(p.cmd.ProcessState.ExitCode()), 0
	}
	if ws.Signaled() {
		return 128 + int32(ws.Signal()), int32(ws.Signal())
	}
	return int32(ws.ExitStatus()), 0
}

// procInfo is what /proc tells about one process.
type procInfo struct {
	ppid  int
	pgrp  int
	state byte
}

// listProcs reads every process's parent, process group and state from /proc.
func listProcs() map[int]procInfo {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	procs := make(map[int]procInfo, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if info, ok := readProc(pid); ok {
			procs[pid] = info
		}
	}
	return procs
}

// readProc parses /proc/<pid>/stat. The command name is in parentheses and may itself hold
// spaces and parentheses, so the fields are read after the last ')'.
func readProc(pid int) (procInfo, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return procInfo{}, false
	}
	fields := strings.Fields(s[i+2:])
	if len(fields) < 3 || len(fields[0]) != 1 {
		return procInfo{}, false
	}
	ppid, err1 := strconv.Atoi(fields[1])
	pgrp, err2 := strconv.Atoi(fields[2])
	if err1 != nil || err2 != nil {
		return procInfo{}, false
	}
	return procInfo{ppid: ppid, pgrp: pgrp, state: fields[0][0]}, true
}

// processAlive reports whether pid names a process that has not exited; a zombie has.
func processAlive(pid int) bool {
	info, ok := readProc(pid)
	return ok && info.state != 'Z' && info.state != 'X'
}

// killTree kills a container's processes: root, everything descended from it, and everything
// in its process group, including descendants that moved to a group of their own (the runner
// runs OpenTofu in one). A container runtime gets this from the container's PID namespace;
// here the tree is found in /proc. Each process is stopped before its children are looked for,
// so none can fork away or be reparented while the tree is collected; then all are killed.
func killTree(root int) {
	stopped := map[int]bool{}
	for round := 0; round < 20; round++ {
		procs := listProcs()
		children := map[int][]int{}
		for pid, info := range procs {
			children[info.ppid] = append(children[info.ppid], pid)
		}
		found := map[int]bool{}
		var walk func(pid int)
		walk = func(pid int) {
			if found[pid] {
				return
			}
			found[pid] = true
			for _, c := range children[pid] {
				walk(c)
			}
		}
		if _, ok := procs[root]; ok {
			walk(root)
		}
		for pid, info := range procs {
			if info.pgrp == root {
				walk(pid)
			}
		}
		for pid := range stopped {
			if _, ok := procs[pid]; ok {
				walk(pid)
			}
		}
		more := false
		for pid := range found {
			if !stopped[pid] {
				_ = syscall.Kill(pid, syscall.SIGSTOP)
				stopped[pid] = true
				more = true
			}
		}
		if !more {
			break
		}
	}
	for pid := range stopped {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(-root, syscall.SIGKILL)
}

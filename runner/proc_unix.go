//go:build unix

package runner

import (
	"os"
	"os/exec"
	"syscall"
)

// isolate puts the runtime in its own process group: a terminal's Ctrl-C then reaches only the
// runner, which decides what to forward, and a kill can take the runtime's children with it.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminate asks the runtime, and only the runtime, to stop; OpenTofu then stops its own
// children gracefully.
func terminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }

// kill ends the runtime and whatever it started.
func kill(p *os.Process) error {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	return p.Kill()
}

// reapGroup kills what is left of an exited runtime's process group. The group keeps its ID
// while it has members, so the ID cannot have been reused.
func reapGroup(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }

//go:build !unix

package runner

import (
	"os"
	"os/exec"
)

// isolate does nothing where process groups do not exist.
func isolate(*exec.Cmd) {}

// terminate stops the runtime; without SIGTERM the only way is to kill it.
func terminate(p *os.Process) error { return p.Kill() }

// kill ends the runtime.
func kill(p *os.Process) error { return p.Kill() }

// reapGroup does nothing where process groups do not exist.
func reapGroup(*os.Process) {}

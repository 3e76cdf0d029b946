//go:build !linux

package nodeagent

import "errors"

// process is a container's main process; the agent runs processes on Linux only, since it
// relies on process groups, the parent-death signal and /proc.
type process struct{ done chan struct{} }

func startProcess(procSpec) (*process, error) {
	return nil, errors.New("the node agent runs containers on Linux only")
}

func (p *process) Done() <-chan struct{}                  { return p.done }
func (p *process) Pid() int                               { return 0 }
func (p *process) terminate()                             {}
func (p *process) kill()                                  {}
func (p *process) exitStatus() (code int32, signal int32) { return 0, 0 }

func processAlive(int) bool { return false }

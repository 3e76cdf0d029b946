package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// reapOrphans kills control-plane processes started from binDir whose parent is gone. envtest
// starts etcd and kube-apiserver without tying them to the test process, so a test binary that
// was killed (a timeout, a crash) leaves them running; the next control plane cleans them up.
func reapOrphans(binDir string) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Dir(exe) != binDir {
			continue
		}
		if base := filepath.Base(exe); base != "etcd" && base != "kube-apiserver" && base != ControllerManagerBinary {
			continue
		}
		if parentPID(pid) == 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// parentPID reads a process's parent from /proc/<pid>/stat, or 0.
func parentPID(pid int) int {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may hold spaces; the fields after it are fixed.
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

package jetstream

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the process of cmd get SIGKILL when the test process
// dies, so that a worker process never outlives a test binary killed at its
// timeout.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

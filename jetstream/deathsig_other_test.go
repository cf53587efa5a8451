//go:build !linux

package jetstream

import "os/exec"

// dieWithParent does nothing where the system cannot kill a child with its
// parent.
func dieWithParent(*exec.Cmd) {}

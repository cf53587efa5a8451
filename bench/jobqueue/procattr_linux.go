package main

import "syscall"

// childAttr makes a child process (a worker, redis-server) get SIGKILL
// when this process dies, so that none outlives a crashed or killed run.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

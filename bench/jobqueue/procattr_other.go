//go:build !linux

package main

import "syscall"

// childAttr returns nil: outside Linux a child process is not killed with
// this one. The workers still exit when their stdin ends; redis-server is
// stopped by this process on every return and on SIGINT and SIGTERM.
func childAttr() *syscall.SysProcAttr { return nil }

package main

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A child is a process this one started: a worker or redis-server.
type child struct {
	cmd  *exec.Cmd
	log  *tailBuffer   // the end of its stderr (and stdout, unless piped)
	done chan struct{} // closed once it has exited and been waited for
	err  error         // cmd.Wait's error, set before done is closed
}

// startChild starts cmd, which gets SIGKILL should this process die (on
// Linux). A goroutine calls read, if not nil, which must read the piped
// stdout of cmd to its end, then waits for cmd.
func startChild(cmd *exec.Cmd, read func()) (*child, error) {
	c := &child{cmd: cmd, log: &tailBuffer{}, done: make(chan struct{})}
	cmd.Stderr = c.log
	if cmd.Stdout == nil {
		cmd.Stdout = c.log
	}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		if read != nil {
			read()
		}
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// exited reports whether c has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends c SIGTERM and waits for it to exit (see wait).
func (c *child) stop(grace time.Duration) error {
	if c.exited() {
		return c.err
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	return c.wait(grace)
}

// wait waits for c to exit; if it has not within grace, wait kills it. It
// returns c's exit error, or that it was killed.
func (c *child) wait(grace time.Duration) error {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return c.err
	case <-t.C:
		c.kill()
		return fmt.Errorf("still running %v after SIGTERM: killed", grace)
	}
}

// kill kills c, if it is running, and waits for it.
func (c *child) kill() {
	if !c.exited() {
		c.cmd.Process.Kill()
	}
	<-c.done
}

// describe returns err, if any, with the end of c's log.
func (c *child) describe(err error) error {
	if s := strings.TrimSpace(c.log.String()); s != "" {
		return fmt.Errorf("%w; its output ends:\n%s", err, s)
	}
	return err
}

// A tailBuffer keeps the last tailSize bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 8 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - tailSize; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// A redisServer is redis-server running as a child process.
type redisServer struct {
	*child
	addr string
}

// redisReady is how long redis-server may take to accept connections.
const redisReady = 10 * time.Second

// startRedis starts redis-server on a random free loopback port with dir
// as its working directory: without persistence, or, if durable, with an
// append-only file synced every second. It returns once the server
// answers PING.
func startRedis(ctx context.Context, dir string, durable bool) (*redisServer, error) {
	path, err := lookRedis()
	if err != nil {
		return nil, err
	}
	persistence := []string{"--appendonly", "no"}
	if durable {
		persistence = []string{"--appendonly", "yes", "--appendfsync", "everysec"}
	}
	// The port is free when chosen, but another process may take it before
	// redis-server binds it: try a few.
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--daemonize", "no", "--logfile", ""}, persistence...)
		c, err := startChild(exec.Command(path, args...), nil)
		if err != nil {
			return nil, fmt.Errorf("redis-server: %w", err)
		}
		r := &redisServer{child: c, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		err = r.waitReady(ctx)
		if err == nil {
			return r, nil
		}
		r.kill()
		if !errors.Is(err, errExited) {
			return nil, r.describe(err)
		}
	}
	return nil, errors.New("redis-server did not start on 3 free ports")
}

var errExited = errors.New("redis-server exited")

// waitReady waits until the server answers PING, it exits (errExited),
// ctx ends or redisReady passes.
func (r *redisServer) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(redisReady)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if ping(r.addr) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server at %s not answering PING after %v", r.addr, redisReady)
		}
		select {
		case <-r.done:
			return errExited
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// ping sends PING to the redis server at addr and expects PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// close stops the server (SIGTERM, then SIGKILL after 10s).
func (r *redisServer) close() { r.stop(10 * time.Second) }

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redisVersion returns "redis-server" and its version, or an error that
// says how to install it.
func redisVersion() (string, error) {
	path, err := lookRedis()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return "redis-server " + v, nil
		}
	}
	return "redis-server (version unknown)", nil
}

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// TestMain makes the test binary a worker process when a round starts it
// as one, as the command does with itself.
func TestMain(m *testing.M) {
	if role := os.Getenv(envWorker); role != "" {
		os.Exit(workerMain(role))
	}
	os.Exit(m.Run())
}

// runCmd runs the command with args and returns its exit code, stdout and
// stderr; it checks that no process it started is left.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, &stdout, &stderr)
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left running after the command: %v", kids)
	}
	return code, stdout.String(), stderr.String()
}

// children returns the processes whose parent is this one (Linux /proc),
// or skips the check elsewhere.
func children(t *testing.T) []string {
	t.Helper()
	if runtime.GOOS != "linux" {
		return nil
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	me := strconv.Itoa(os.Getpid())
	var kids []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, not ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == me {
			kids = append(kids, strings.TrimSpace(s[:strings.LastIndexByte(s, ')')+1]))
		}
	}
	return kids
}

func needRedis(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (apt-get install -y redis-server)")
	}
}

// checkTable checks that out has a row of rows jobs with no duplicates and
// none lost for each system and process count.
func checkTable(t *testing.T, out string, jobs int, systems []string, procs ...int) {
	t.Helper()
	for _, p := range procs {
		for _, s := range systems {
			prefix := "| " + s + " | " + strconv.Itoa(p) + " | " + strconv.Itoa(jobs) + " | "
			found := false
			for line := range strings.Lines(out) {
				if strings.HasPrefix(line, prefix) {
					found = true
					if !strings.HasSuffix(strings.TrimSpace(line), " 0/0 |") {
						t.Errorf("row with duplicates or lost jobs: %s", line)
					}
				}
			}
			if !found {
				t.Errorf("no row %q in:\n%s", prefix, out)
			}
		}
	}
}

func TestCrew(t *testing.T) {
	leak.Check(t)
	code, out, errOut := runCmd(t, "-systems", "crew", "-jobs", "200", "-procs", "1,2", "-rounds", "1", "-work", "1ms")
	if code != 0 {
		t.Fatalf("exit code %d\n%s%s", code, out, errOut)
	}
	checkTable(t, out, 200, []string{"crew"}, 1, 2)
	if !strings.Contains(out, "stream in memory") {
		t.Errorf("the report does not say how durable the store is:\n%s", out)
	}
	t.Log("\n" + out)
}

func TestBoth(t *testing.T) {
	leak.Check(t)
	needRedis(t)
	code, out, errOut := runCmd(t, "-jobs", "200", "-procs", "1", "-rounds", "1")
	if code != 0 {
		t.Fatalf("exit code %d\n%s%s", code, out, errOut)
	}
	checkTable(t, out, 200, []string{"crew", "asynq"}, 1)
	// The rounds alternate, crew first.
	if i, j := strings.Index(errOut, "round 1: crew,"), strings.Index(errOut, "round 1: asynq,"); i < 0 || j < i {
		t.Errorf("rounds not in order crew, asynq:\n%s", errOut)
	}
	for _, want := range []string{"no persistence", "stream in memory", "Concurrency 16", "crew.New(16)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	t.Log("\n" + out)
}

func TestDurable(t *testing.T) {
	leak.Check(t)
	needRedis(t)
	code, out, errOut := runCmd(t, "-jobs", "100", "-procs", "1", "-rounds", "1", "-durable", "-nats-sync", "1s", "-asynq-check", "50ms")
	if code != 0 {
		t.Fatalf("exit code %d\n%s%s", code, out, errOut)
	}
	checkTable(t, out, 100, []string{"crew", "asynq"}, 1)
	for _, want := range []string{"appendfsync everysec", "file storage", "sync interval 1s", "TaskCheckInterval 50ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
}

// A round that cannot finish reports a timeout, and kills its workers.
func TestTimeout(t *testing.T) {
	leak.Check(t)
	start := time.Now()
	code, out, errOut := runCmd(t, "-systems", "crew", "-jobs", "20", "-procs", "1", "-concurrency", "1",
		"-work", "1m", "-rounds", "1", "-timeout", "2s")
	if code != 1 || !strings.Contains(errOut, "timed out after 2s") || !strings.Contains(errOut, "0 of 20 jobs completed") {
		t.Errorf("exit code %d, stderr:\n%s%s", code, errOut, out)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("a round with -timeout 2s took %v", d)
	}
}

func TestNoRedis(t *testing.T) {
	leak.Check(t)
	t.Setenv("PATH", t.TempDir())
	code, _, errOut := runCmd(t, "-systems", "asynq", "-jobs", "10", "-procs", "1", "-rounds", "1")
	if code != 1 || !strings.Contains(errOut, "redis-server is not on PATH") || !strings.Contains(errOut, "apt-get install -y redis-server") {
		t.Errorf("exit code %d, stderr:\n%s", code, errOut)
	}
}

func TestBadFlags(t *testing.T) {
	leak.Check(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-jobs", "0"}, "-jobs 0"},
		{[]string{"-jobs", "x"}, "invalid value"},
		{[]string{"-procs", "1,,2"}, "-procs"},
		{[]string{"-procs", "0"}, "-procs"},
		{[]string{"-procs", "65"}, "-procs"},
		{[]string{"-concurrency", "-1"}, "-concurrency"},
		{[]string{"-producers", "0"}, "-producers"},
		{[]string{"-work", "-1ms"}, "-work"},
		{[]string{"-rounds", "0"}, "-rounds"},
		{[]string{"-systems", "sidekiq"}, "unknown system"},
		{[]string{"-systems", "crew,crew"}, "twice"},
		{[]string{"-systems", ""}, "unknown system"},
		{[]string{"-nats-sync", "1s"}, "-durable only"},
		{[]string{"-durable", "-nats-sync", "-1s"}, "-nats-sync"},
		{[]string{"-asynq-check", "-1s"}, "-asynq-check"},
		{[]string{"-timeout", "0s"}, "-timeout"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-nosuchflag"}, "not defined"},
	} {
		code, _, errOut := runCmd(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit code %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if code, _, errOut := runCmd(t, "-h"); code != 0 || !strings.Contains(errOut, "-procs") {
		t.Errorf("-h: exit code %d, stderr %q", code, errOut)
	}
}

func TestPercentile(t *testing.T) {
	leak.Check(t)
	v := make([]int64, 200)
	for i := range v {
		v[i] = int64(i + 1)
	}
	for _, tc := range []struct{ p, want int }{{50, 100}, {99, 198}, {100, 200}, {1, 2}} {
		if got := percentile(v, tc.p); got != int64(tc.want) {
			t.Errorf("percentile(1..200, %d) = %d, want %d", tc.p, got, tc.want)
		}
	}
	if got := percentile([]int64{7}, 99); got != 7 {
		t.Errorf("percentile([7], 99) = %d", got)
	}
}

package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// The cluster test runs worker processes, copies of the test binary that
// run TestClusterWorkerProcess, against a server in the test process.
const (
	clusterWorkerEnv = "CREWJS_CLUSTER_WORKER" // the worker's name; unset: not a worker
	clusterURLEnv    = "CREWJS_CLUSTER_URL"
	clusterDirEnv    = "CREWJS_CLUSTER_DIR" // where workers write their records
	clusterParts     = 16
	clusterAckWait   = time.Second
)

// A clusterJob is the N-th job of Key. Poison jobs fail permanently until
// the file cured exists in the cluster directory; due jobs were delayed
// until DueNano.
type clusterJob struct {
	Key     string `json:"key"`
	N       int    `json:"n"`
	Poison  bool   `json:"poison,omitempty"`
	DueNano int64  `json:"due,omitempty"`
}

func (j clusterJob) id() string { return "job-" + j.Key + "-" + strconv.Itoa(j.N) }

// TestClusterWorkerProcess is a worker process of
// TestClusterKeepsEveryGuarantee: it runs a KeyedConsumer of the jobs
// until SIGTERM, recording each job's start and end in a file of its own,
// one write per line, so that a SIGKILL loses no record written.
func TestClusterWorkerProcess(t *testing.T) {
	name := os.Getenv(clusterWorkerEnv)
	if name == "" {
		t.Skip("run by TestClusterKeepsEveryGuarantee as a worker process")
	}
	dir := os.Getenv(clusterDirEnv)
	if err := clusterWorker(name, os.Getenv(clusterURLEnv), dir); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func clusterWorker(name, url, dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	out, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	record := func(what string, j clusterJob) {
		fmt.Fprintf(out, "%s %s %d %d\n", what, j.Key, j.N, time.Now().UnixNano())
	}
	pool := crew.New(8)
	defer pool.Stop()
	handle := func(ctx context.Context, m Msg[clusterJob]) error {
		j := m.Value
		record("start", j)
		time.Sleep(time.Millisecond) // the job's work
		if _, err := os.Stat(filepath.Join(dir, "cured")); j.Poison && err != nil {
			return Permanent(errors.New("poison"))
		}
		record("done", j)
		return nil
	}
	// The consumers may be made while the server restarts: try again.
	var kc *KeyedConsumer[clusterJob]
	for {
		kc, err = NewKeyedConsumer(ctx, js, "JOBS", clusterConfig(), clusterParts, pool, handle,
			WithDeadLetter(js, "dead.run"), WithErrorHandler(func(error) {}),
			WithBackoff(func(int) time.Duration { return 50 * time.Millisecond }))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	record("ready", clusterJob{Key: "-"})
	if err := kc.Run(ctx); err != nil && !errors.Is(err, ErrDrainTimeout) {
		return err
	}
	return nil
}

func clusterConfig() natsjs.ConsumerConfig {
	return natsjs.ConsumerConfig{Durable: "runners", FilterSubject: "jobs.run", AckWait: clusterAckWait}
}

// clusterRecord is a line a worker wrote.
type clusterRecord struct {
	worker, what, key string
	n                 int
	at                int64
}

// clusterLog reads the records the workers write, each file from where
// the last read stopped, and keeps the distinct jobs done.
type clusterLog struct {
	t       *testing.T
	dir     string
	read    map[string]int // bytes of each file read so far, whole lines only
	records []clusterRecord
	done    map[string]bool            // jobs done, by id
	by      map[string]map[string]bool // what each worker recorded: "ready", "done"
}

func newClusterLog(t *testing.T, dir string) *clusterLog {
	return &clusterLog{t: t, dir: dir, read: map[string]int{}, done: map[string]bool{}, by: map[string]map[string]bool{}}
}

// update reads what the workers wrote since the last call; a last line cut
// short (being written, or by a SIGKILL) waits for its end.
func (l *clusterLog) update() *clusterLog {
	files, err := filepath.Glob(filepath.Join(l.dir, "*.log"))
	if err != nil {
		l.t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			l.t.Fatal(err)
		}
		worker := strings.TrimSuffix(filepath.Base(f), ".log")
		for {
			rest := data[l.read[f]:]
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			l.read[f] += i + 1
			r := clusterRecord{worker: worker}
			if _, err := fmt.Sscanf(string(rest[:i]), "%s %s %d %d", &r.what, &r.key, &r.n, &r.at); err != nil {
				continue
			}
			l.records = append(l.records, r)
			if l.by[worker] == nil {
				l.by[worker] = map[string]bool{}
			}
			l.by[worker][r.what] = true
			if r.what == "done" {
				l.done[clusterJob{Key: r.key, N: r.n}.id()] = true
			}
		}
	}
	return l
}

// clusterProc is a worker process.
type clusterProc struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

func startClusterWorker(t *testing.T, name, url, dir string) *clusterProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), clusterWorkerEnv+"="+name, clusterURLEnv+"="+url, clusterDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &clusterProc{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

// stop sends sig and waits for the process to exit.
func (p *clusterProc) stop(t *testing.T, sig os.Signal) error {
	t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(testTimeout):
		t.Fatalf("%s did not exit after %v", p.name, sig)
		return nil
	}
}

// Three worker processes run a partitioned queue's jobs while one is
// killed with SIGKILL, one is stopped and started again, and the server
// restarts: every job runs at least once, each key's jobs in enqueue
// order, a unique id is stored once, a delayed job does not run before
// its time, and dead-lettered jobs, replayed, run.
func TestClusterKeepsEveryGuarantee(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes for seconds")
	}
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout) // the whole run
	defer cancel()
	createStreamWith(t, js, natsjs.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, AllowMsgSchedules: true})
	createStream(t, js, "DEAD", "dead.>")
	dir := t.TempDir()

	const keys, perKey, poisons, delayed = 24, 25, 4, 8
	var jobs []clusterJob
	for n := range perKey {
		for k := range keys {
			jobs = append(jobs, clusterJob{Key: "k" + strconv.Itoa(k), N: n})
		}
	}
	for i := range poisons {
		jobs = append(jobs, clusterJob{Key: "poison" + strconv.Itoa(i), Poison: true})
	}
	delay := 1500 * time.Millisecond
	for i := range delayed {
		jobs = append(jobs, clusterJob{Key: "later" + strconv.Itoa(i), DueNano: -1})
	}

	workers := map[string]*clusterProc{}
	for _, name := range []string{"w1", "w2", "w3"} {
		workers[name] = startClusterWorker(t, name, ts.url(), dir)
	}

	// The producer enqueues each job, and every fifth one twice, retrying
	// through the server's restart with the same unique id: the second
	// Enqueue of a job must find it stored.
	q := NewQueue[clusterJob](js, "jobs.run", WithPartitions(clusterParts))
	enqueue := func(j clusterJob) error {
		opts := []EnqueueOption{WithKey(j.Key), WithUniqueID(j.id())}
		if j.DueNano != 0 {
			opts = append(opts, WithDelay(delay))
		}
		for {
			_, err := q.Enqueue(ctx, j, opts...)
			if err == nil || errors.Is(err, ErrDuplicate) || ctx.Err() != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond) // the server is restarting
		}
	}
	produced := make(chan struct{})
	gate := make(chan struct{}) // the second part of the jobs waits for w2b
	go func() {
		defer close(produced)
		for i, j := range jobs {
			if i == 2*len(jobs)/5 {
				<-gate
			}
			if j.DueNano != 0 {
				j.DueNano = time.Now().Add(delay).UnixNano()
				jobs[i] = j
			}
			if err := enqueue(j); err != nil && !errors.Is(err, ErrDuplicate) {
				t.Errorf("enqueue %s: %v", j.id(), err)
			}
			if i%5 == 0 {
				if err := enqueue(j); !errors.Is(err, ErrDuplicate) {
					t.Errorf("second enqueue of %s: %v, want ErrDuplicate", j.id(), err)
				}
			}
		}
	}()

	total := len(jobs) - poisons
	log := newClusterLog(t, dir)
	progress := func(n int) func() bool {
		return func() bool { return len(log.update().done) >= n }
	}
	waitFor(t, testTimeout, "a fifth of the jobs", progress(total/5))
	workers["w1"].stop(t, syscall.SIGKILL)
	waitFor(t, testTimeout, "the first two fifths of the jobs", progress(2*len(jobs)/5))
	if err := workers["w2"].stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("w2 stopped with %v", err)
	}
	workers["w2b"] = startClusterWorker(t, "w2b", ts.url(), dir)
	byW2b := func(what string) func() bool {
		return func() bool { return log.update().by["w2b"][what] }
	}
	waitFor(t, testTimeout, "w2b to make its consumers", byW2b("ready"))
	close(gate)
	waitFor(t, testTimeout, "w2b to run jobs", byW2b("done"))
	waitFor(t, testTimeout, "three fifths of the jobs", progress(3*total/5))
	ts.restart()
	<-produced
	waitFor(t, testTimeout, "every job but the poisoned", progress(total))

	// The poisoned jobs were dead-lettered; cured, they run when replayed.
	dead := NewDeadLetters(js, "dead.run")
	var seqs []uint64
	waitFor(t, testTimeout, "the dead letters", func() bool {
		seqs = seqs[:0]
		for dl, err := range dead.List(ctx) {
			if err != nil {
				return false
			}
			seqs = append(seqs, dl.Seq)
		}
		return len(seqs) == poisons
	})
	if err := os.WriteFile(filepath.Join(dir, "cured"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, seq := range seqs {
		if _, err := dead.Replay(ctx, seq); err != nil {
			t.Fatalf("replay %d: %v", seq, err)
		}
	}
	waitFor(t, testTimeout, "the replayed jobs", progress(len(jobs)))
	for _, name := range []string{"w2b", "w3"} {
		if err := workers[name].stop(t, syscall.SIGTERM); err != nil {
			t.Errorf("%s stopped with %v", name, err)
		}
	}

	rs := log.update().records
	checkClusterRecords(t, jobs, rs)
	// Each job is in the stream once: the delayed ones and the replays
	// were published by the server and by Replay.
	st, err := js.Stream(ctx, "JOBS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter("jobs.run.part.>"))
	if err != nil {
		t.Fatal(err)
	}
	var inStream uint64
	for _, n := range info.State.Subjects {
		inStream += n
	}
	if want := uint64(len(jobs) + poisons); inStream != want {
		t.Errorf("%d jobs in the partitions, want %d (each once, and the replays)", inStream, want)
	}
	byWorker := map[string]int{}
	for _, r := range rs {
		if r.what == "done" {
			byWorker[r.worker]++
		}
	}
	t.Logf("jobs done by worker: %v", byWorker)
}

// checkClusterRecords checks that every job ran, each key's jobs in order,
// and no delayed job before its time.
func checkClusterRecords(t *testing.T, jobs []clusterJob, rs []clusterRecord) {
	t.Helper()
	firstStart := map[string]int64{}
	firstDone := map[string]int64{}
	for _, r := range rs {
		id := clusterJob{Key: r.key, N: r.n}.id()
		switch r.what {
		case "start":
			if at, ok := firstStart[id]; !ok || r.at < at {
				firstStart[id] = r.at
			}
		case "done":
			if at, ok := firstDone[id]; !ok || r.at < at {
				firstDone[id] = r.at
			}
		}
	}
	for _, j := range jobs {
		if _, ok := firstDone[j.id()]; !ok {
			t.Errorf("job %s never done", j.id())
			continue
		}
		if j.N > 0 {
			prev := clusterJob{Key: j.Key, N: j.N - 1}.id()
			// A run of the job before it ended before this one's first start.
			if firstDone[prev] > firstStart[j.id()] {
				t.Errorf("job %s started before job %s was done", j.id(), prev)
			}
		}
		if j.DueNano > 0 && firstStart[j.id()] < j.DueNano {
			t.Errorf("delayed job %s started %v before its time", j.id(), time.Duration(j.DueNano-firstStart[j.id()]))
		}
	}
}

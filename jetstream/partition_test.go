package jetstream

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
)

// keyedJob is the payload of the partition tests: the N-th job of Key.
type keyedJob struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// keyLog checks, as handlers run, that a key's jobs run one at a time and
// in order, each after the one before it succeeded.
type keyLog struct {
	t       testing.TB
	mu      sync.Mutex
	running map[string]bool
	done    map[string]int // jobs of the key done, in order
	runs    int
}

func newKeyLog(t testing.TB) *keyLog {
	return &keyLog{t: t, running: map[string]bool{}, done: map[string]int{}}
}

// start records that job j starts, failing the test if another job of its
// key runs or j is not the key's next job.
func (l *keyLog) start(j keyedJob) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs++
	if l.running[j.Key] {
		l.t.Errorf("job %d of key %s started while another of its key ran", j.N, j.Key)
	}
	l.running[j.Key] = true
	if next := l.done[j.Key]; j.N != next && j.N != next-1 { // next-1: a redelivery of a job done but not acknowledged
		l.t.Errorf("job %d of key %s started when %d of its jobs were done", j.N, j.Key, next)
	}
}

// end records that job j returned, done or not.
func (l *keyLog) end(j keyedJob, done bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[j.Key] = false
	if done && l.done[j.Key] == j.N {
		l.done[j.Key]++
	}
}

func (l *keyLog) doneCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, d := range l.done {
		n += d
	}
	return n
}

// partitionedQueue makes the stream JOBS over jobs.> and a Queue of n
// partitions on jobs.run.
func partitionedQueue(t *testing.T, js natsjs.JetStream, n int) *Queue[keyedJob] {
	t.Helper()
	createStream(t, js, "JOBS", "jobs.>")
	return NewQueue[keyedJob](js, "jobs.run", WithPartitions(n))
}

// enqueueKeyed enqueues perKey jobs for each of keys keys, interleaved.
func enqueueKeyed(t *testing.T, q *Queue[keyedJob], keys, perKey int) {
	t.Helper()
	ctx := testCtx(t)
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			if _, err := q.Enqueue(ctx, keyedJob{Key: key, N: n}, WithKey(key)); err != nil {
				t.Fatalf("enqueue: %v", err)
			}
		}
	}
}

func keyedConfig(ackWait time.Duration) natsjs.ConsumerConfig {
	return natsjs.ConsumerConfig{Durable: "runners", FilterSubject: "jobs.run", AckWait: ackWait}
}

func newKeyed(t *testing.T, js natsjs.JetStream, n int, pool *crew.Pool, h Handler[keyedJob], opts ...ConsumerOption) *KeyedConsumer[keyedJob] {
	t.Helper()
	kc, err := NewKeyedConsumer(testCtx(t), js, "JOBS", keyedConfig(time.Second), n, pool, h, opts...)
	if err != nil {
		t.Fatalf("NewKeyedConsumer: %v", err)
	}
	return kc
}

func TestPartitionSubjects(t *testing.T) {
	if got := PartitionSubject("jobs.email", 7); got != "jobs.email.part.7" {
		t.Errorf("PartitionSubject = %q", got)
	}
	seen := map[int]bool{}
	for k := range 1000 {
		p := Partition(fmt.Sprint("key", k), 16)
		if p < 0 || p >= 16 {
			t.Fatalf("Partition = %d, want [0, 16)", p)
		}
		if p != Partition(fmt.Sprint("key", k), 16) {
			t.Fatal("Partition is not a function of the key")
		}
		seen[p] = true
	}
	if len(seen) != 16 {
		t.Errorf("1000 keys fell in %d of 16 partitions", len(seen))
	}
	if Partition("x", 0) != 0 {
		t.Error("Partition(key, 0) != 0")
	}
}

// A partitioned Queue publishes each job to its key's partition subject;
// delayed jobs are scheduled to it.
func TestPartitionedQueuePublishesToTheKeysPartition(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStreamWith(t, js, natsjs.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, AllowMsgSchedules: true})
	q := NewQueue[keyedJob](js, "jobs.run", WithPartitions(8))
	ctx := testCtx(t)
	seq, err := q.Enqueue(ctx, keyedJob{Key: "alice"}, WithKey("alice"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "JOBS")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	if want := PartitionSubject("jobs.run", Partition("alice", 8)); raw.Subject != want {
		t.Errorf("job stored on %s, want %s", raw.Subject, want)
	}
	seq, err = q.Enqueue(ctx, keyedJob{Key: "bob"}, WithKey("bob"), WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = st.GetMsg(ctx, seq); err != nil {
		t.Fatal(err)
	}
	if got, want := raw.Header.Get(natsjs.ScheduleTargetHeader), PartitionSubject("jobs.run", Partition("bob", 8)); got != want {
		t.Errorf("delayed job's schedule targets %s, want %s", got, want)
	}
}

func TestPartitionBadInput(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	createStream(t, js, "JOBS", "jobs.>")
	ctx := testCtx(t)
	for _, n := range []int{0, -1, maxPartitions + 1} {
		func() {
			defer func() {
				if err, _ := recover().(error); !errors.Is(err, crew.ErrInvalid) {
					t.Errorf("NewQueue with WithPartitions(%d): recovered %v, want ErrInvalid", n, err)
				}
			}()
			NewQueue[keyedJob](js, "jobs.run", WithPartitions(n))
		}()
	}
	pq := NewQueue[keyedJob](js, "jobs.run", WithPartitions(4))
	if _, err := pq.Enqueue(ctx, keyedJob{}); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Enqueue without a key on a partitioned Queue: %v", err)
	}
	if _, err := pq.Schedule(ctx, "tick", "@every 1m", keyedJob{}); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("Schedule without a key on a partitioned Queue: %v", err)
	}
	q := NewQueue[keyedJob](js, "jobs.plain")
	if _, err := q.Enqueue(ctx, keyedJob{}, WithKey("a")); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("WithKey on a Queue without partitions: %v", err)
	}

	pool := crew.New(2)
	defer pool.Stop()
	h := func(context.Context, Msg[keyedJob]) error { return nil }
	good := keyedConfig(time.Second)
	for name, f := range map[string]func() error{
		"nil ctx": func() error {
			_, err := NewKeyedConsumer(nil, js, "JOBS", good, 4, pool, h) //nolint:staticcheck // the nil context is the test
			return err
		},
		"nil js":       func() error { _, err := NewKeyedConsumer(ctx, nil, "JOBS", good, 4, pool, h); return err },
		"nil executor": func() error { _, err := NewKeyedConsumer(ctx, js, "JOBS", good, 4, nil, h); return err },
		"nil handler":  func() error { _, err := NewKeyedConsumer[keyedJob](ctx, js, "JOBS", good, 4, pool, nil); return err },
		"no stream":    func() error { _, err := NewKeyedConsumer(ctx, js, "", good, 4, pool, h); return err },
		"n = 0":        func() error { _, err := NewKeyedConsumer(ctx, js, "JOBS", good, 0, pool, h); return err },
		"no durable": func() error {
			c := good
			c.Durable = ""
			_, err := NewKeyedConsumer(ctx, js, "JOBS", c, 4, pool, h)
			return err
		},
		"wildcard filter": func() error {
			c := good
			c.FilterSubject = "jobs.*"
			_, err := NewKeyedConsumer(ctx, js, "JOBS", c, 4, pool, h)
			return err
		},
		"max ack pending": func() error {
			c := good
			c.MaxAckPending = 10
			_, err := NewKeyedConsumer(ctx, js, "JOBS", c, 4, pool, h)
			return err
		},
		"ack all": func() error {
			c := good
			c.AckPolicy = natsjs.AckAllPolicy
			_, err := NewKeyedConsumer(ctx, js, "JOBS", c, 4, pool, h)
			return err
		},
		"bad option": func() error { _, err := NewKeyedConsumer(ctx, js, "JOBS", good, 4, pool, h, WithPulls(0)); return err },
		"zero pool":  func() error { _, err := NewKeyedConsumer(ctx, js, "JOBS", good, 4, &crew.Pool{}, h); return err },
	} {
		if err := f(); !errors.Is(err, crew.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// Nothing was created by the refused calls.
	if names := consumerNames(t, js, "JOBS"); len(names) != 0 {
		t.Errorf("refused calls created consumers %v", names)
	}
	var kc *KeyedConsumer[keyedJob]
	if err := kc.Run(ctx); !errors.Is(err, crew.ErrInvalid) {
		t.Errorf("nil KeyedConsumer's Run: %v", err)
	}
	if kc.Partitions() != 0 || kc.Stats() != (Stats{}) {
		t.Error("nil KeyedConsumer reports partitions or counts")
	}
}

func consumerNames(t *testing.T, js natsjs.JetStream, stream string) []string {
	t.Helper()
	st, err := js.Stream(testCtx(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	l := st.ConsumerNames(testCtx(t))
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// Two processes' KeyedConsumers run each key's jobs one at a time, in
// order, while the keys spread over both; the consumers are made once.
func TestKeyedConsumersKeepKeyOrderAcrossConsumers(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	const parts, keys, perKey = 8, 20, 15
	q := partitionedQueue(t, js, parts)
	log := newKeyLog(t)
	var mu sync.Mutex
	by := map[int]int{} // jobs run by each consumer
	for c := range 2 {
		_, js := ts.connect(t)
		pool := crew.New(8)
		defer pool.Stop()
		kc := newKeyed(t, js, parts, pool, func(_ context.Context, m Msg[keyedJob]) error {
			log.start(m.Value)
			mu.Lock()
			by[c]++
			mu.Unlock()
			log.end(m.Value, true)
			return nil
		})
		if kc.Partitions() != parts {
			t.Fatalf("Partitions() = %d", kc.Partitions())
		}
		runConsumer(t, kc)
	}
	enqueueKeyed(t, q, keys, perKey)
	waitFor(t, testTimeout, "every job", func() bool { return log.doneCount() == keys*perKey })
	if names := consumerNames(t, js, "JOBS"); len(names) != parts {
		t.Errorf("%d consumers, want %d: %v", len(names), parts, names)
	}
	mu.Lock()
	defer mu.Unlock()
	if by[0] == 0 || by[1] == 0 {
		t.Errorf("jobs by consumer: %v, want both to run some", by)
	}
}

// A job that fails is retried before its key's next job runs: the server
// holds the partition's next message back while the failed one waits for
// its backoff.
func TestKeyedConsumerRetriesBeforeTheKeysNextJob(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	q := partitionedQueue(t, js, 2)
	log := newKeyLog(t)
	var mu sync.Mutex
	failed := map[keyedJob]bool{}
	pool := crew.New(4)
	defer pool.Stop()
	kc := newKeyed(t, js, 2, pool, func(_ context.Context, m Msg[keyedJob]) error {
		log.start(m.Value)
		mu.Lock()
		fail := m.Value.N%3 == 0 && !failed[m.Value]
		failed[m.Value] = true
		mu.Unlock()
		log.end(m.Value, !fail)
		if fail {
			return errors.New("transient")
		}
		return nil
	}, WithBackoff(func(int) time.Duration { return 30 * time.Millisecond }))
	runConsumer(t, kc)
	const keys, perKey = 4, 7
	enqueueKeyed(t, q, keys, perKey)
	waitFor(t, testTimeout, "every job", func() bool { return log.doneCount() == keys*perKey })
	// A job counts as done inside its handler; the consumer counts its
	// message after the handler returns and the message is settled. Once
	// every job is acked and nothing is held, every count is in: a message
	// is counted before it stops being held.
	waitFor(t, testTimeout, "every message settled", func() bool {
		s := kc.Stats()
		return s.Acked >= keys*perKey && s.InFlight == 0
	})
	if s := kc.Stats(); s.Nacked != keys*3 || s.Acked != keys*perKey {
		t.Errorf("Stats = %+v, want %d nacked and %d acked", s, keys*3, keys*perKey)
	}
}

// A process that dies holding a job holds its partition: the job is
// redelivered to another process after AckWait, before the key's next.
func TestKeyedConsumerFailoverKeepsKeyOrder(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	q := partitionedQueue(t, js, 1)
	log := newKeyLog(t)

	// The first process takes job 0 and dies in it, its connection closed.
	nc1, js1 := ts.connect(t)
	pool1 := crew.New(2)
	defer pool1.Stop()
	took := make(chan struct{})
	release := make(chan struct{})
	kc1, err := NewKeyedConsumer(testCtx(t), js1, "JOBS", keyedConfig(time.Second), 1, pool1, func(ctx context.Context, m Msg[keyedJob]) error {
		log.start(m.Value)
		close(took)
		<-release
		return errors.New("the process died")
	}, WithDrainTimeout(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	stop1 := runConsumer(t, kc1)
	enqueueKeyed(t, q, 1, 5)
	recvWithin(t, took, "job 0 to start")
	nc1.Close()
	close(release)
	stop1()
	log.end(keyedJob{Key: "k0", N: 0}, false)

	// The second process runs job 0 first, then the rest.
	_, js2 := ts.connect(t)
	pool2 := crew.New(2)
	defer pool2.Stop()
	kc2 := newKeyed(t, js2, 1, pool2, func(_ context.Context, m Msg[keyedJob]) error {
		log.start(m.Value)
		log.end(m.Value, true)
		return nil
	})
	runConsumer(t, kc2)
	waitFor(t, testTimeout, "every job", func() bool { return log.doneCount() == 5 })
}

func recvWithin(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Run stops every partition when one fails, and returns its error.
func TestKeyedConsumerRunStopsWhenAPartitionFails(t *testing.T) {
	checkLeaks(t)
	ts := startServer(t)
	_, js := ts.connect(t)
	partitionedQueue(t, js, 3)
	pool := crew.New(2)
	defer pool.Stop()
	kc := newKeyed(t, js, 3, pool, func(context.Context, Msg[keyedJob]) error { return nil })
	errc := make(chan error, 1)
	go func() { errc <- kc.Run(testCtx(t)) }()
	waitFor(t, testTimeout, "the partitions to run", func() bool {
		for _, c := range kc.consumers {
			if !c.running.Load() {
				return false
			}
		}
		return true
	})
	if err := kc.Run(testCtx(t)); err != ErrRunning {
		t.Errorf("a second Run = %v, want ErrRunning", err)
	}
	if err := js.DeleteConsumer(testCtx(t), "JOBS", "runners-p1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, natsjs.ErrConsumerNotFound) && !errors.Is(err, natsjs.ErrConsumerDeleted) {
			t.Errorf("Run = %v, want the deleted consumer's error", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Run did not return after a partition's consumer was deleted")
	}
}

// Stats.plus adds every field, so that a KeyedConsumer's Stats miss no
// counter a Consumer gains.
func TestStatsPlusAddsEveryField(t *testing.T) {
	var one Stats
	v := reflect.ValueOf(&one).Elem()
	for i := range v.NumField() {
		v.Field(i).Set(reflect.ValueOf(1).Convert(v.Field(i).Type()))
	}
	sum := reflect.ValueOf(one.plus(one))
	for i := range sum.NumField() {
		if got := sum.Field(i).Convert(reflect.TypeOf(0)).Interface(); got != 2 {
			t.Errorf("Stats.plus: %s = %v, want 2", sum.Type().Field(i).Name, got)
		}
	}
}

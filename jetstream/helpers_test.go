package jetstream

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// testTimeout bounds every test: each one takes seconds.
const testTimeout = 30 * time.Second

// item is the payload of the tests.
type item struct {
	ID   int    `json:"id"`
	Body string `json:"body,omitempty"`
}

func itemID(it item) string { return "item-" + strconv.Itoa(it.ID) }

// checkLeaks fails t if goroutines started during the test outlive it.
// Call it first, so that it runs after every other cleanup.
func checkLeaks(t testing.TB) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// testCtx returns a context that ends with the test or at its deadline.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// testServer is an embedded nats-server with JetStream on a loopback port,
// storing in a temporary directory that outlives restarts.
type testServer struct {
	t    testing.TB
	dir  string
	port int
	mu   sync.Mutex
	s    *server.Server
}

// startServer starts an embedded server on a random loopback port with a
// fresh store directory; it is shut down when the test ends.
func startServer(t testing.TB) *testServer {
	t.Helper()
	ts := &testServer{t: t, dir: t.TempDir(), port: -1}
	ts.start()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) start() {
	ts.t.Helper()
	s, err := server.NewServer(&server.Options{
		Host:               "127.0.0.1",
		Port:               ts.port, // -1 the first time: a random free port
		JetStream:          true,
		StoreDir:           ts.dir,
		JetStreamMaxMemory: 64 << 20,
		JetStreamMaxStore:  1 << 30,
		NoLog:              true,
		NoSigs:             true,
	})
	if err != nil {
		ts.t.Fatalf("nats-server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		ts.t.Fatal("nats-server not ready in 10s")
	}
	ts.mu.Lock()
	ts.s = s
	ts.port = s.Addr().(*net.TCPAddr).Port
	ts.mu.Unlock()
}

// stop shuts the server down and waits until it has.
func (ts *testServer) stop() {
	ts.mu.Lock()
	s := ts.s
	ts.s = nil
	ts.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// restart stops the server and starts a new one on the same port and
// store directory, so that clients reconnect to it.
func (ts *testServer) restart() {
	ts.t.Helper()
	ts.stop()
	ts.start()
}

func (ts *testServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(ts.port) }

// connect opens a client connection that reconnects quickly and forever;
// it is closed when the test ends.
func (ts *testServer) connect(t testing.TB) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(ts.url(),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond),
		nats.ReconnectJitter(0, 0),
		nats.Timeout(2*time.Second),
	)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// createStream creates a file-backed stream with a duplicate window of a
// minute.
func createStream(t testing.TB, js natsjs.JetStream, name string, subjects ...string) natsjs.Stream {
	t.Helper()
	return createStreamWith(t, js, natsjs.StreamConfig{Name: name, Subjects: subjects})
}

// createStreamWith creates a file-backed stream with a duplicate window of
// a minute; cfg's other fields are kept.
func createStreamWith(t testing.TB, js natsjs.JetStream, cfg natsjs.StreamConfig) natsjs.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg.Storage = natsjs.FileStorage
	cfg.Duplicates = time.Minute
	st, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	return st
}

// createDurable creates a durable pull consumer with explicit acks; cfg's
// other fields are kept.
func createDurable(t testing.TB, js natsjs.JetStream, stream, name string, cfg natsjs.ConsumerConfig) natsjs.Consumer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg.Durable = name
	cfg.AckPolicy = natsjs.AckExplicitPolicy
	c, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		t.Fatalf("create consumer %s: %v", name, err)
	}
	return c
}

// publish publishes items synchronously, each acknowledged by the stream.
func publish(t testing.TB, js natsjs.JetStream, subject string, items ...item) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, it := range items {
		data, err := JSON{}.Marshal(it)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, subject, data, natsjs.WithMsgID(itemID(it))); err != nil {
			t.Fatalf("publish %d: %v", it.ID, err)
		}
	}
}

func items(from, to int) []item {
	out := make([]item, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, item{ID: i})
	}
	return out
}

// waitFor polls cond until it is true, failing t if it is not within d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
}

// runner is a Consumer or a KeyedConsumer.
type runner interface {
	Run(ctx context.Context) error
}

// runConsumer runs c.Run in a goroutine and returns a function that
// cancels it and returns its error, failing t if Run does not return in
// time. The function is also called when the test ends.
func runConsumer(t testing.TB, c runner) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(testTimeout):
				err = errors.New("Run did not return")
				t.Error(err)
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// consumerInfo fetches fresh consumer info.
func consumerInfo(t testing.TB, c natsjs.Consumer) *natsjs.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info
}

// wantSettled waits until the server shows c with no message pending or
// awaiting an ack: every message was acked, terminated or handed back and
// settled since. It fails t if that does not happen within 10s, and
// returns the last info fetched. It waits because the server applies an
// ack (or a nak or term) in a goroutine of the consumer's, after the ack
// has left the client: an info request sent after the ack may be answered
// before the ack is applied.
func wantSettled(t testing.TB, c natsjs.Consumer) *natsjs.ConsumerInfo {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		info := consumerInfo(t, c)
		if info.NumAckPending == 0 && info.NumPending == 0 {
			return info
		}
		if time.Now().After(deadline) {
			t.Errorf("consumer still has %d pending ack, %d pending after 10s", info.NumAckPending, info.NumPending)
			return info
		}
		<-tick.C
	}
}

// idSet is a concurrency-safe multiset of item ids.
type idSet struct {
	mu sync.Mutex
	m  map[int]int
}

func newIDSet() *idSet { return &idSet{m: map[int]int{}} }

func (s *idSet) add(id int) {
	s.mu.Lock()
	s.m[id]++
	s.mu.Unlock()
}

// distinct returns the number of distinct ids.
func (s *idSet) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

func (s *idSet) count(id int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id]
}

// snapshot returns a copy of the counts.
func (s *idSet) snapshot() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]int, len(s.m))
	for k, v := range s.m {
		out[k] = v
	}
	return out
}

// atomicMax is a counter that remembers its maximum.
type atomicMax struct {
	mu  sync.Mutex
	v   int
	max int
}

func (a *atomicMax) add(d int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.v += d
	a.max = max(a.max, a.v)
	return a.v
}

func (a *atomicMax) load() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.v
}

func (a *atomicMax) peak() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.max
}

// storedItem returns the item and the headers of the message at seq in st.
func storedItem(ctx context.Context, t testing.TB, st natsjs.Stream, seq uint64) (item, nats.Header) {
	t.Helper()
	raw, err := st.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	var it item
	if err := (JSON{}).Unmarshal(raw.Data, &it); err != nil {
		t.Fatal(err)
	}
	return it, raw.Header
}

// Command twoworkers runs two worker processes and one producer that share
// one JetStream stream on loopback, and checks that every order was
// processed.
//
// The program starts an embedded NATS server with JetStream (a temporary
// store, a random loopback port), creates an ORDERS stream with a durable
// pull consumer, and starts two copies of itself as worker processes. Each
// worker has its own NATS connection and its own crew pool, and runs a
// crewjs.Consumer of the same durable consumer: the server spreads the
// orders between them. For each order a worker publishes a record to the
// DONE stream and then returns nil, which acknowledges the order. The
// producer, in this process, publishes the orders through a
// crewjs.Publisher. When the DONE stream holds a record for every order,
// the program stops the workers (SIGINT: they drain and exit) and prints
// who processed what.
//
// With -kill, the first worker is killed (SIGKILL) in the middle of its
// work: the orders it held are redelivered to the second worker once their
// AckWait passes, and none is lost.
//
//	go run ./examples/twoworkers
//	go run ./examples/twoworkers -orders 5000 -kill
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/batch"
	crewjs "github.com/gocrew/crew/jetstream"
)

// An Order is what the producer publishes and the workers process.
type Order struct {
	ID     int    `json:"id"`
	Amount int    `json:"amount"`
	Item   string `json:"item"`
}

// A Done record says which worker processed which order.
type Done struct {
	Order  int    `json:"order"`
	Worker string `json:"worker"`
}

// The environment of a worker process.
const (
	envRole = "TWOWORKERS_ROLE" // "worker" in a worker process
	envURL  = "TWOWORKERS_URL"
	envName = "TWOWORKERS_NAME"
)

const (
	ackWait = 2 * time.Second
	work    = 2 * time.Millisecond // each order's simulated I/O
)

func main() {
	if os.Getenv(envRole) == "worker" {
		os.Exit(workerMain())
	}
	orders := flag.Int("orders", 2000, "number of orders to publish")
	kill := flag.Bool("kill", false, "kill the first worker in the middle of its work")
	flag.Parse()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "twoworkers:", err)
		os.Exit(1)
	}
	if err := run(os.Stdout, self, nil, *orders, *kill); err != nil {
		fmt.Fprintln(os.Stderr, "twoworkers:", err)
		os.Exit(1)
	}
}

// run starts a server, two worker processes (the program self with args,
// and the worker role in its environment) and a producer of n orders, and
// reports to out.
func run(out io.Writer, self string, args []string, n int, kill bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "twoworkers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(dir)
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	url := srv.ClientURL()

	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return err
	}
	if err := setup(ctx, js); err != nil {
		return err
	}

	// Collect the done records as they are stored.
	var mu sync.Mutex
	byOrder := map[int][]string{}
	var records int
	collector, err := js.OrderedConsumer(ctx, "DONE", natsjs.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	cc, err := collector.Consume(func(m natsjs.Msg) {
		var d Done
		if json.Unmarshal(m.Data(), &d) == nil {
			mu.Lock()
			byOrder[d.Order] = append(byOrder[d.Order], d.Worker)
			records++
			mu.Unlock()
		}
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	progress := func() (distinct, total int) {
		mu.Lock()
		defer mu.Unlock()
		return len(byOrder), records
	}

	workers := make([]*exec.Cmd, 2)
	for i := range workers {
		cmd := exec.Command(self, args...)
		cmd.Env = append(os.Environ(), envRole+"=worker", envURL+"="+url, envName+"=worker-"+strconv.Itoa(i+1))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		workers[i] = cmd
		defer func() { // in case of an early return
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		}()
	}

	// The producer publishes while the workers work.
	start := time.Now()
	pub := crewjs.NewPublisher(js, "orders.new", func(o Order) string { return "order-" + strconv.Itoa(o.ID) },
		crewjs.WithBatch(batch.WithMaxItems(100)))
	produced := make(chan error, 1)
	go func() {
		for i := range n {
			if err := pub.Add(ctx, Order{ID: i, Amount: 1 + i%50, Item: "widget"}); err != nil {
				pub.Close(ctx)
				produced <- err
				return
			}
		}
		produced <- pub.Close(ctx)
	}()

	killed := false
	if kill {
		// Kill worker-1 once it has done some orders and a quarter of
		// them are done.
		err := waitUntil(ctx, func() bool {
			d, _ := progress()
			return d >= n/4 && countBy(&mu, byOrder, "worker-1") > 0
		})
		if err != nil {
			return fmt.Errorf("waiting to kill worker-1: %w", err)
		}
		if err := workers[0].Process.Kill(); err != nil {
			return err
		}
		workers[0].Wait()
		killed = true
		d, _ := progress()
		fmt.Fprintf(out, "worker-1 killed (SIGKILL) with %d of %d orders done; what it held comes back after AckWait (%v)\n", d, n, ackWait)
	}
	if err := <-produced; err != nil {
		return fmt.Errorf("publishing: %w", err)
	}
	ps := pub.Stats()
	fmt.Fprintf(out, "producer: %d orders published and acknowledged by the stream (%d duplicates dropped)\n", ps.Stored, ps.Duplicates)
	if err := waitUntil(ctx, func() bool { d, _ := progress(); return d == n }); err != nil {
		d, _ := progress()
		return fmt.Errorf("%d of %d orders processed: %w", d, n, err)
	}
	elapsed := time.Since(start)

	// Stop the workers still running: they drain and exit.
	for i, w := range workers {
		if killed && i == 0 {
			continue
		}
		w.Process.Signal(os.Interrupt)
		if err := w.Wait(); err != nil {
			return fmt.Errorf("worker-%d: %w", i+1, err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	perWorker := map[string]int{}
	twice, lost := 0, 0
	for id := range n {
		ws := byOrder[id]
		if len(ws) == 0 {
			lost++
		}
		if len(ws) > 1 {
			twice++
		}
		for _, w := range ws {
			perWorker[w]++
		}
	}
	names := make([]string, 0, len(perWorker))
	for w := range perWorker {
		names = append(names, w)
	}
	slices.Sort(names)
	for _, w := range names {
		fmt.Fprintf(out, "%s: processed %d orders\n", w, perWorker[w])
	}
	fmt.Fprintf(out, "%d orders published, %d processed in %v: %d lost, %d processed more than once\n",
		n, n-lost, elapsed.Round(time.Millisecond), lost, twice)
	if lost > 0 {
		return fmt.Errorf("%d orders lost", lost)
	}
	if twice == 0 {
		fmt.Fprintln(out, "every order was processed exactly once")
	} else {
		fmt.Fprintln(out, "every order was processed at least once (a worker died between its work and its ack)")
	}
	return nil
}

// startServer starts an embedded NATS server with JetStream on a random
// loopback port, storing in dir.
func startServer(dir string) (*server.Server, error) {
	srv, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		return nil, err
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("nats-server not ready")
	}
	return srv, nil
}

// setup creates the ORDERS stream and its durable consumer "workers", and
// the DONE stream.
func setup(ctx context.Context, js natsjs.JetStream) error {
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: natsjs.FileStorage}); err != nil {
		return err
	}
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "DONE", Subjects: []string{"done.>"}, Storage: natsjs.FileStorage}); err != nil {
		return err
	}
	_, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", natsjs.ConsumerConfig{
		Durable:    "workers",
		AckPolicy:  natsjs.AckExplicitPolicy,
		AckWait:    ackWait,
		MaxDeliver: 5,
	})
	return err
}

// workerMain is a worker process: it processes orders until SIGINT or
// SIGTERM, then drains and exits.
func workerMain() int {
	name := os.Getenv(envName)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := nats.Connect(os.Getenv(envURL), nats.Name(name))
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	cons, err := js.Consumer(ctx, "ORDERS", "workers")
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	pool := crew.New(8, crew.WithQueueSize(0), crew.WithName(name))
	defer pool.Stop()
	c := crewjs.NewConsumer(cons, pool, func(ctx context.Context, m crewjs.Msg[Order]) error {
		t := time.NewTimer(work) // the order's work
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		data, _ := json.Marshal(Done{Order: m.Value.ID, Worker: name})
		_, err := js.Publish(ctx, "done."+name, data)
		return err
	})
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	return 0
}

// waitUntil polls cond every few milliseconds until it is true or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// countBy returns the number of orders that worker has a done record for.
func countBy(mu *sync.Mutex, byOrder map[int][]string, worker string) int {
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, ws := range byOrder {
		if slices.Contains(ws, worker) {
			n++
		}
	}
	return n
}

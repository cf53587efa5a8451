// Command eventsink sends events to an HTTP collector in batches.
//
// It starts a collector on a loopback port, then producers that record
// events through a batch.Batcher: each flush POSTs one JSON array of events,
// up to four at a time. The collector turns every seventh request away with
// 503 Service Unavailable (a batch at most once, so that the retries always
// get through), and the batcher retries. When the producers are
// done, the program closes the batcher, checks that the collector received
// every event exactly once, prints a summary and exits.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew/batch"
)

// An Event is what the producers record.
type Event struct {
	ID   int       `json:"id"`
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`
}

var kinds = []string{"view", "click", "purchase"}

func main() {
	if err := run(os.Stdout, 20000, 8); err != nil {
		fmt.Fprintln(os.Stderr, "eventsink:", err)
		os.Exit(1)
	}
}

// run sends events from the given number of producers to a collector it
// starts, and reports to out.
func run(out io.Writer, events, producers int) error {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	col := &collector{seen: make(map[int]int), turned: make(map[int]bool)}
	srv := &http.Server{Handler: col, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	const flushes = 4
	transport := &http.Transport{MaxIdleConnsPerHost: flushes}
	client := &http.Client{Transport: transport, Timeout: 5 * time.Second}
	s := &sender{client: client, url: "http://" + ln.Addr().String() + "/events"}
	var lost atomic.Int64
	sink := batch.New(s.post,
		batch.WithMaxItems(250),
		batch.WithMaxWait(20*time.Millisecond),
		batch.WithMaxConcurrentFlushes(flushes),
		batch.WithRetry(4, 2*time.Millisecond, 50*time.Millisecond),
		batch.WithErrorHandler(func(_ context.Context, evs []Event, err error) {
			lost.Add(int64(len(evs)))
			log.Printf("eventsink: %d events lost: %v", len(evs), err)
		}))

	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for id := p; id < events; id += producers {
				ev := Event{ID: id, Kind: kinds[id%len(kinds)], At: time.Now()}
				if err := sink.Add(ctx, ev); err != nil {
					log.Printf("eventsink: event %d: %v", id, err)
				}
			}
		})
	}
	wg.Wait()
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	closeErr := sink.Close(closeCtx)
	elapsed := time.Since(start)

	transport.CloseIdleConnections()
	if err := srv.Shutdown(closeCtx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}

	st := sink.Stats()
	fmt.Fprintf(out, "sent %d events in %d batches in %v (%.0f events/s)\n",
		st.Flushed, st.Batches, elapsed.Round(time.Millisecond), float64(st.Flushed)/elapsed.Seconds())
	fmt.Fprintf(out, "collector: %d requests, %d turned away, %d retries; %d events lost\n",
		col.requests, col.refused, st.Retries, lost.Load())
	fmt.Fprintf(out, "flush latency: mean %v, p99 under %v, max %v\n",
		st.Latency.Mean().Round(time.Microsecond), st.Latency.Quantile(0.99).Round(time.Microsecond), st.Latency.Max.Round(time.Microsecond))
	if closeErr != nil {
		return closeErr
	}
	return col.check(events)
}

// sender posts batches of events to the collector.
type sender struct {
	client *http.Client
	url    string
}

// post is the batcher's flush function: one request per batch.
func (s *sender) post(ctx context.Context, evs []Event) error {
	body, err := json.Marshal(evs)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	return accepted(resp)
}

// accepted reads and closes resp, and reports whether the collector took
// the batch: it answers 204 No Content. Reading the body to its end lets
// the client reuse the connection.
func accepted(resp *http.Response) error {
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("collector answered %s", resp.Status)
	}
	return nil
}

// collector is the HTTP server receiving the batches.
type collector struct {
	mu       sync.Mutex
	requests int
	refused  int
	seen     map[int]int  // times each event ID was received
	turned   map[int]bool // first event IDs of the batches turned away
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var evs []Event
	if err := json.NewDecoder(r.Body).Decode(&evs); err != nil || len(evs) == 0 {
		http.Error(w, fmt.Sprintf("want a non-empty JSON array of events: %v", err), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	if c.requests%7 == 0 && !c.turned[evs[0].ID] {
		c.turned[evs[0].ID] = true
		c.refused++
		http.Error(w, "busy, try again", http.StatusServiceUnavailable)
		return
	}
	for _, ev := range evs {
		c.seen[ev.ID]++
	}
	w.WriteHeader(http.StatusNoContent)
}

// check reports an error unless events 0 to n-1 each arrived exactly once.
func (c *collector) check(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range n {
		if got := c.seen[id]; got != 1 {
			return fmt.Errorf("event %d received %d times", id, got)
		}
	}
	if len(c.seen) != n {
		return fmt.Errorf("collector received %d distinct events, want %d", len(c.seen), n)
	}
	return nil
}

// Command eventsink sends events to an HTTP collector in batches.
//
// It starts a collector on a loopback port, then producers that record
// events through a batch.Batcher: each flush POSTs one JSON array of events,
// up to four at a time. The collector turns every seventh request away with
// 503 Service Unavailable (a batch at most once, so that the retries always
// get through), and the batcher retries. When the producers are
// done, the program closes the batcher, checks that the collector received
// every event exactly once, prints a summary and exits.
//
// The collector does not trust its clients. A request must be one POST of
// a JSON array of 1 or more valid events (see Event.validate), at most
// maxBodyBytes long, or it is answered 400 Bad Request (413 Request Entity
// Too Large for a longer body), with a message saying what is wrong. Its
// server cuts off clients that are slow to send a request, to read the
// answer or to use an idle connection (see timeouts). It remembers the
// last dedupWindow event IDs it received, to drop duplicates.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gocrew/crew"
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

// Limits on what the collector accepts. A batch of 250 events, the most
// the sender puts in one, takes some 20 KB of JSON: the body limit leaves
// room for fifty times that while bounding the memory a request can take.
const (
	maxBodyBytes = 1 << 20 // bytes in a request body
	maxKindBytes = 64      // bytes in an event's kind
)

// validate reports what is wrong with an event received: it needs a
// positive ID, a kind of 1 to maxKindBytes bytes and a time.
func (ev Event) validate() error {
	switch {
	case ev.ID <= 0:
		return fmt.Errorf("id is %d, want a positive id", ev.ID)
	case ev.Kind == "":
		return errors.New("no kind")
	case len(ev.Kind) > maxKindBytes:
		return fmt.Errorf("kind is %d bytes long, want at most %d", len(ev.Kind), maxKindBytes)
	case ev.At.IsZero():
		return errors.New("no time (at)")
	}
	return nil
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
	col := newCollector(dedupWindow)
	srv := newServer(col, defaultTimeouts)
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
		batch.WithRetry(crew.Retry{Attempts: 4, Delay: 2 * time.Millisecond, MaxDelay: 50 * time.Millisecond}),
		batch.WithErrorHandler(func(_ context.Context, evs []Event, err error) {
			lost.Add(int64(len(evs)))
			log.Printf("eventsink: %d events lost: %v", len(evs), err)
		}))

	start := time.Now()
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for id := p + 1; id <= events; id += producers {
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

// timeouts bound how long the collector's server waits on a client, so
// that a slow or stalled one cannot hold a connection and its goroutine.
type timeouts struct {
	header time.Duration // to read a request's headers
	read   time.Duration // to read a whole request, body included
	write  time.Duration // from the end of the headers to the end of the answer
	idle   time.Duration // for the next request on a kept-alive connection
}

// defaultTimeouts let a client send a body of maxBodyBytes at 200 KB/s.
var defaultTimeouts = timeouts{
	header: 2 * time.Second,
	read:   5 * time.Second,
	write:  10 * time.Second,
	idle:   60 * time.Second,
}

// newServer returns a server for h that cuts off clients as t says.
func newServer(h http.Handler, t timeouts) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: t.header,
		ReadTimeout:       t.read,
		WriteTimeout:      t.write,
		IdleTimeout:       t.idle,
	}
}

// dedupWindow is how many event IDs the collector remembers, a few
// megabytes' worth. A duplicate is dropped if it arrives before that many
// other events; one arriving later is taken for a new event. The sender's
// retries come within milliseconds, well inside the window.
const dedupWindow = 1 << 16

// collector is the HTTP server receiving the batches.
type collector struct {
	mu       sync.Mutex
	requests int
	refused  int
	events   int     // events received, less the duplicates dropped
	dups     int     // duplicates dropped
	maxID    int     // highest event ID received
	seen     *recent // IDs of the events received last
	turned   *recent // first event IDs of the batches turned away last
}

// newCollector returns a collector that remembers the last window event
// IDs it received; window must be positive. It turns a batch away at most
// once, if it is retried before 64 other batches are turned away.
func newCollector(window int) *collector {
	return &collector{seen: newRecent(window), turned: newRecent(64)}
}

// ServeHTTP takes a batch of events: 204 No Content once it has them,
// 400 Bad Request for anything but a JSON array of 1 or more valid events,
// 413 Request Entity Too Large for a body over maxBodyBytes.
func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	evs, err := decodeBatch(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if tooBig, ok := errors.AsType[*http.MaxBytesError](err); ok {
		http.Error(w, fmt.Sprintf("body too large: the limit is %d bytes", tooBig.Limit), http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(w, "bad batch: "+err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests++
	if c.requests%7 == 0 && c.turned.add(evs[0].ID) {
		c.refused++
		http.Error(w, "busy, try again", http.StatusServiceUnavailable)
		return
	}
	for _, ev := range evs {
		if !c.seen.add(ev.ID) {
			c.dups++
			continue
		}
		c.events++
		c.maxID = max(c.maxID, ev.ID)
	}
	w.WriteHeader(http.StatusNoContent)
}

// decodeBatch reads body, which must hold one JSON array of 1 or more
// valid events and nothing after it but white space.
func decodeBatch(body io.Reader) ([]Event, error) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var evs []Event
	if err := dec.Decode(&evs); err != nil {
		if err == io.EOF {
			return nil, errors.New("empty body, want a JSON array of events")
		}
		return nil, err
	}
	rest, err := io.ReadAll(io.MultiReader(dec.Buffered(), body))
	switch {
	case err != nil:
		return nil, err
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, errors.New("data after the array of events")
	case evs == nil:
		return nil, errors.New("null, want a JSON array of events")
	case len(evs) == 0:
		return nil, errors.New("empty array, want at least one event")
	}
	for i, ev := range evs {
		if err := ev.validate(); err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
	}
	return evs, nil
}

// check reports an error unless events 1 to n each arrived exactly once.
// It is exact for n up to the collector's window; beyond, it misses a
// duplicate arriving more than a window after the first copy.
func (c *collector) check(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.dups > 0:
		return fmt.Errorf("collector received %d duplicate events", c.dups)
	case c.events != n || c.maxID != n:
		return fmt.Errorf("collector received %d distinct events with IDs up to %d, want %d", c.events, c.maxID, n)
	}
	return nil
}

// recent is a set of the last n IDs added to it: once it holds n, adding
// one more forgets the oldest.
type recent struct {
	ids  map[int]struct{}
	ring []int // the IDs in the order added; once full, ring[next] is the oldest
	next int
}

// newRecent returns an empty set of at most n IDs; n must be positive.
func newRecent(n int) *recent {
	return &recent{ids: make(map[int]struct{}, n), ring: make([]int, 0, n)}
}

// add adds id to the set and reports whether it was not there already.
func (s *recent) add(id int) bool {
	if _, ok := s.ids[id]; ok {
		return false
	}
	if len(s.ring) < cap(s.ring) {
		s.ring = append(s.ring, id)
	} else {
		delete(s.ids, s.ring[s.next])
		s.ring[s.next] = id
		s.next = (s.next + 1) % len(s.ring)
	}
	s.ids[id] = struct{}{}
	return true
}

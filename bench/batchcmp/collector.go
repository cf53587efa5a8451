package batchcmp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// collector is the loopback HTTP server the events are sent to. It counts
// the lines (events) of each request body, takes delay per request and
// answers 204 No Content.
type collector struct {
	url      string
	delay    time.Duration
	srv      *http.Server
	served   chan error
	events   atomic.Int64
	requests atomic.Int64
	bufs     sync.Pool // *[]byte for reading bodies
}

// startCollector starts a collector on 127.0.0.1 and a free port.
func startCollector(delay time.Duration) (*collector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &collector{
		url:    "http://" + ln.Addr().String() + "/events",
		delay:  delay,
		served: make(chan error, 1),
		bufs:   sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }},
	}
	c.srv = &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	go func() { c.served <- c.srv.Serve(ln) }()
	return c, nil
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	buf := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(buf)
	var lines int64
	for {
		n, err := r.Body.Read(*buf)
		lines += int64(bytes.Count((*buf)[:n], []byte{'\n'}))
		if err == io.EOF {
			break
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	time.Sleep(c.delay) // the collector's work
	c.events.Add(lines)
	c.requests.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// stop shuts the collector down and waits for it.
func (c *collector) stop() {
	c.srv.Shutdown(context.Background())
	<-c.served
}

// errStatus is returned when the collector does not answer 204.
var errStatus = errors.New("collector refused the request")

// client posts to the collector, keeping as many idle connections as it
// has requests in flight.
type client struct {
	url       string
	http      *http.Client
	transport *http.Transport
}

func newClient(url string, conns int) *client {
	t := &http.Transport{MaxIdleConnsPerHost: conns}
	return &client{url: url, http: &http.Client{Transport: t, Timeout: 30 * time.Second}, transport: t}
}

// post sends body and waits for the answer.
func (c *client) post(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("%w: %s", errStatus, resp.Status)
	}
	return nil
}

// close closes the client's idle connections.
func (c *client) close() { c.transport.CloseIdleConnections() }

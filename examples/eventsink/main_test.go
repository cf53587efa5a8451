package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

func TestRun(t *testing.T) {
	leak.Check(t)
	var out strings.Builder
	if err := run(&out, 3000, 4); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	if !strings.Contains(out.String(), "sent 3000 events") || !strings.Contains(out.String(), "0 events lost") {
		t.Fatalf("unexpected report:\n%s", out.String())
	}
}

// startCollector serves c on a loopback port until the test ends and
// returns its URL. A collector turns every seventh batch away: each test
// posts fewer.
func startCollector(t *testing.T, c *collector, to timeouts) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = newServer(c, to)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL
}

// post sends body to url and returns the status code and the answer.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(msg)
}

// events returns a JSON array of valid events with the given IDs.
func events(ids ...int) string {
	evs := make([]Event, len(ids))
	for i, id := range ids {
		evs[i] = Event{ID: id, Kind: "view", At: time.Unix(1, 0).UTC()}
	}
	b, err := json.Marshal(evs)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestCollectorLimitsSize(t *testing.T) {
	leak.Check(t)
	url := startCollector(t, newCollector(dedupWindow), defaultTimeouts)
	const ev = `{"id":1,"kind":"view","at":"2025-01-01T00:00:00Z"}`
	big := "[" + strings.Repeat(ev+",", maxBodyBytes/len(ev)) + ev + "]"
	longKind := fmt.Sprintf(`[{"id":1,"kind":%q,"at":"2025-01-01T00:00:00Z"}]`, strings.Repeat("k", maxKindBytes+1))
	for _, tc := range []struct {
		name, body string
		code       int
		msg        string
	}{
		{"body over the limit", big, http.StatusRequestEntityTooLarge, "body too large"},
		{"long kind", longKind, http.StatusBadRequest, "kind is 65 bytes long"},
	} {
		code, msg := post(t, url, tc.body)
		if code != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: answered %d %q, want %d %q", tc.name, code, msg, tc.code, tc.msg)
		}
	}
}

func TestCollectorRejectsMalformed(t *testing.T) {
	leak.Check(t)
	url := startCollector(t, newCollector(dedupWindow), defaultTimeouts)
	for _, tc := range []struct{ body, msg string }{
		{``, "empty body"},
		{`null`, "null, want a JSON array"},
		{`[]`, "empty array, want at least one event"},
		{`{"id":1}`, "cannot unmarshal object"},
		{`[null]`, "event 0: id is 0"},
		{`[{}]`, "event 0: id is 0"},
		{`[{"id":-2,"kind":"view","at":"2025-01-01T00:00:00Z"}]`, "event 0: id is -2"},
		{`[{"id":1,"at":"2025-01-01T00:00:00Z"}]`, "event 0: no kind"},
		{`[{"id":1,"kind":"view"}]`, "event 0: no time"},
		{`[{"id":"1","kind":"view","at":"2025-01-01T00:00:00Z"}]`, "cannot unmarshal string"},
		{`[{"id":1,"kind":"view","at":"2025-01-01T00:00:00Z","extra":1}]`, `unknown field "extra"`},
		{`[{"id":1,"kind":"view","at":"2025-01-01T00:00:00Z"}`, "unexpected EOF"},
		{events(1) + ` garbage`, "data after the array"},
		{events(1) + `]`, "data after the array"},
		{events(1) + events(2), "data after the array"},
	} {
		code, msg := post(t, url, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(msg, tc.msg) || strings.Contains(msg, "<nil>") {
			t.Errorf("%q: answered %d %q, want 400 %q", tc.body, code, msg, tc.msg)
		}
	}
	if code, msg := post(t, url, events(1, 2)+"\n"); code != http.StatusNoContent {
		t.Errorf("valid batch: answered %d %q, want 204", code, msg)
	}
}

func TestCollectorForgetsOldIDs(t *testing.T) {
	leak.Check(t)
	const window = 4
	c := newCollector(window)
	url := startCollector(t, c, defaultTimeouts)
	for _, tc := range []struct {
		ids    []int
		events int // events received, less duplicates, after posting ids
		dups   int
	}{
		{[]int{1, 2, 3, 4}, 4, 0},
		{[]int{4, 1}, 4, 2},    // duplicates, dropped
		{[]int{5, 6, 7}, 7, 2}, // 1, 2 and 3 forgotten
		{[]int{1, 7}, 8, 3},    // 1 taken for new, 7 a duplicate
	} {
		if code, msg := post(t, url, events(tc.ids...)); code != http.StatusNoContent {
			t.Fatalf("%v: answered %d %q", tc.ids, code, msg)
		}
		c.mu.Lock()
		n, dups, kept := c.events, c.dups, len(c.seen.ids)
		c.mu.Unlock()
		if n != tc.events || dups != tc.dups || kept > window {
			t.Errorf("after %v: %d events, %d duplicates, %d IDs kept; want %d, %d, at most %d",
				tc.ids, n, dups, kept, tc.events, tc.dups, window)
		}
	}
}

func TestServerCutsOffSlowClients(t *testing.T) {
	leak.Check(t)
	to := timeouts{header: 50 * time.Millisecond, read: 100 * time.Millisecond, write: 100 * time.Millisecond, idle: 100 * time.Millisecond}
	addr := strings.TrimPrefix(startCollector(t, newCollector(dedupWindow), to), "http://")
	request := "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
	valid := events(1)
	for _, tc := range []struct {
		name      string
		sent      string // at once
		dribbled  string // a byte at a time
		wantReply bool
	}{
		{"slow headers", "", fmt.Sprintf(request, len(valid), valid), false},
		{"slow body", fmt.Sprintf(request, len(valid), ""), valid, false},
		{"idle after a request", fmt.Sprintf(request, len(valid), valid), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tc.sent); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			dribbled := make(chan struct{})
			defer func() { close(done); <-dribbled }()
			go func() {
				defer close(dribbled)
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for i := 0; i < len(tc.dribbled); i++ {
					select {
					case <-done:
						return
					case <-tick.C:
					}
					if _, err := io.WriteString(conn, tc.dribbled[i:i+1]); err != nil {
						return
					}
				}
			}()
			// The server must close the connection long before the client
			// would have sent everything, or gone away.
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			reply, err := io.ReadAll(conn)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("connection still open after %d bytes read", len(reply))
			}
			if got := strings.HasPrefix(string(reply), "HTTP/1.1 204"); got != tc.wantReply {
				t.Errorf("reply %q, want a 204 reply: %v", reply, tc.wantReply)
			}
		})
	}
}

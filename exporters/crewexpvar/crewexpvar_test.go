package crewexpvar_test

import (
	"encoding/json"
	"expvar"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewexpvar"
	"github.com/gocrew/crew/internal/leak"
)

var publishRuns atomic.Int64

func TestPublishServesPoolStats(t *testing.T) {
	leak.Check(t)
	p := crew.New(3, crew.WithName("expvar-test"), crew.WithLatency(), crew.WithPanicHandler(func(*crew.PanicError) {}))
	for range 10 {
		p.Go(func() {})
	}
	p.Go(func() { panic("boom") })
	// The names are new in each run of the test (go test -count): a
	// published name cannot be published again.
	run := publishRuns.Add(1)
	poolName, plainName := fmt.Sprintf("crew.expvar-test-%d", run), fmt.Sprintf("crew.plain-%d", run)
	crewexpvar.Publish(poolName, p)
	plain := crew.New(1)
	crewexpvar.Publish(plainName, plain)
	p.Stop()
	plain.Stop()

	// Read it the way a monitoring system does: from /debug/vars.
	rec := httptest.NewRecorder()
	expvar.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/vars", nil))
	var vars map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &vars); err != nil {
		t.Fatalf("%v\n%s", err, rec.Body)
	}
	var s crewexpvar.Snapshot
	var plainVars map[string]any
	if err := json.Unmarshal(vars[poolName], &s); err != nil {
		t.Fatalf("%s: %v\n%s", poolName, err, rec.Body)
	}
	if err := json.Unmarshal(vars[plainName], &plainVars); err != nil {
		t.Fatalf("%s: %v\n%s", plainName, err, rec.Body)
	}
	if s.Name != "expvar-test" || s.MaxWorkers != 3 || s.Submitted != 11 || s.Completed != 11 || s.Panicked != 1 || s.Workers != 0 {
		t.Errorf("published %+v", s)
	}
	if s.Wait == nil || s.Run == nil || s.Run.Count != 11 || s.Wait.Count != 11 || s.Run.MaxNs < s.Run.P50Ns {
		t.Errorf("latency %+v %+v", s.Wait, s.Run)
	}
	if _, ok := plainVars["wait"]; ok {
		t.Errorf("a pool without WithLatency publishes latency: %v", plainVars)
	}
	if plainVars["max_workers"] != 1.0 {
		t.Errorf("plain pool: %v", plainVars)
	}
}

func TestReadQuantiles(t *testing.T) {
	leak.Check(t)
	p := crew.New(1, crew.WithLatency())
	done := make(chan struct{})
	p.Go(func() {
		for start := time.Now(); time.Since(start) < time.Millisecond; {
		}
		close(done)
	})
	<-done
	p.Stop()
	s := crewexpvar.Read(p)
	if s.Run == nil || s.Run.Count != 1 || s.Run.P50Ns < 968*time.Microsecond || s.Run.MaxNs < time.Millisecond {
		t.Fatalf("run %+v", s.Run)
	}
}

package crewexpvar_test

import (
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewexpvar"
	"github.com/gocrew/crew/internal/leak"
)

var badInputRuns atomic.Int64

// panicOf calls f and returns the error it panicked with, and whether it
// panicked at all.
func panicOf(f func()) (err error, panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			if err, _ = v.(error); err == nil {
				err = fmt.Errorf("a non-error value: %v", v)
			}
		}
	}()
	f()
	return nil, false
}

// TestBadInput feeds Read, Func and Publish the mistakes users make. Read
// reports zeros for a nil or zero pool, as Pool.Stats does; Func and
// Publish panic, like make, with an error wrapping crew.ErrInvalid, and
// Publish then publishes nothing.
func TestBadInput(t *testing.T) {
	leak.Check(t)
	run := badInputRuns.Add(1)
	name := func(s string) string { return fmt.Sprintf("crewexpvar.badinput.%d.%s", run, s) }
	good := crew.New(2, crew.WithName("good"))
	defer good.Stop()
	stopped := crew.New(3, crew.WithName("stopped"))
	done := make(chan struct{})
	stopped.Go(func() { close(done) })
	<-done
	stopped.Stop()
	var nilPool *crew.Pool
	zero := new(crew.Pool)

	// published reads the variable published under n, as /debug/vars
	// serves it.
	published := func(n string) (crewexpvar.Snapshot, error) {
		var s crewexpvar.Snapshot
		v := expvar.Get(n)
		if v == nil {
			return s, fmt.Errorf("%s is not published", n)
		}
		return s, json.Unmarshal([]byte(v.String()), &s)
	}

	for _, c := range []struct {
		name string
		call func() error // returns an error where the outcome is wrong
		ok   bool         // the call must not panic; otherwise it must, with ErrInvalid
	}{
		{name: "Read nil pool", ok: true, call: func() error { return want(crewexpvar.Read(nilPool), crewexpvar.Snapshot{}) }},
		{name: "Read zero pool", ok: true, call: func() error { return want(crewexpvar.Read(zero), crewexpvar.Snapshot{}) }},
		{name: "Read stopped pool", ok: true, call: func() error {
			s := crewexpvar.Read(stopped)
			return want(s, crewexpvar.Snapshot{Name: "stopped", MaxWorkers: 3, Submitted: 1, Completed: 1})
		}},
		{name: "Func nil pool", call: func() error { crewexpvar.Func(nilPool); return nil }},
		{name: "Func zero pool", call: func() error { crewexpvar.Func(zero); return nil }},
		{name: "Func stopped pool", ok: true, call: func() error {
			var s crewexpvar.Snapshot
			if err := json.Unmarshal([]byte(crewexpvar.Func(stopped).String()), &s); err != nil {
				return err
			}
			return want(s, crewexpvar.Snapshot{Name: "stopped", MaxWorkers: 3, Submitted: 1, Completed: 1})
		}},
		{name: "Publish nil pool", call: func() error { crewexpvar.Publish(name("nil"), nilPool); return nil }},
		{name: "Publish nil pool: the name stays free", ok: true, call: func() error {
			panicOf(func() { crewexpvar.Publish(name("nil-free"), nilPool) })
			if expvar.Get(name("nil-free")) != nil {
				return errors.New("a refused Publish took the name")
			}
			crewexpvar.Publish(name("nil-free"), good)
			return nil
		}},
		{name: "Publish zero pool", call: func() error { crewexpvar.Publish(name("zero"), zero); return nil }},
		{name: "Publish empty name", call: func() error { crewexpvar.Publish("", good); return nil }},
		{name: "Publish empty name, nil pool", call: func() error { crewexpvar.Publish("", nilPool); return nil }},
		{name: "Publish a name expvar took", call: func() error { crewexpvar.Publish("memstats", good); return nil }},
		{name: "Publish a name twice", call: func() error {
			crewexpvar.Publish(name("twice"), good)
			crewexpvar.Publish(name("twice"), stopped)
			return nil
		}},
		{name: "Publish a name twice: the first stays", ok: true, call: func() error {
			crewexpvar.Publish(name("first"), stopped)
			panicOf(func() { crewexpvar.Publish(name("first"), good) })
			s, err := published(name("first"))
			if err != nil {
				return err
			}
			return want(s, crewexpvar.Read(stopped))
		}},
		{name: "Publish one name from goroutines at once", ok: true, call: func() error {
			const n = 8
			var wg sync.WaitGroup
			var won atomic.Int64
			errs := make(chan error, n)
			for range n {
				wg.Go(func() {
					err, panicked := panicOf(func() { crewexpvar.Publish(name("race"), good) })
					switch {
					case !panicked:
						won.Add(1)
					case !errors.Is(err, crew.ErrInvalid):
						errs <- fmt.Errorf("a losing Publish panicked with %v, want an error wrapping crew.ErrInvalid", err)
					}
				})
			}
			wg.Wait()
			close(errs)
			if won.Load() != 1 {
				return fmt.Errorf("%d of %d Publish calls succeeded, want 1", won.Load(), n)
			}
			return <-errs
		}},
		{name: "Publish stopped pool", ok: true, call: func() error {
			crewexpvar.Publish(name("stopped"), stopped)
			s, err := published(name("stopped"))
			if err != nil {
				return err
			}
			return want(s, crewexpvar.Snapshot{Name: "stopped", MaxWorkers: 3, Submitted: 1, Completed: 1})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			perr, panicked := panicOf(func() { err = c.call() })
			switch {
			case c.ok && panicked:
				t.Fatalf("panicked: %v", perr)
			case !c.ok && !panicked:
				t.Fatal("no panic: the mistake passes unseen")
			case !c.ok && !errors.Is(perr, crew.ErrInvalid):
				t.Fatalf("panicked with %v, want an error wrapping crew.ErrInvalid", perr)
			case err != nil:
				t.Fatal(err)
			}
		})
	}
}

// want reports whether got is w.
func want(got, w crewexpvar.Snapshot) error {
	if got != w {
		return fmt.Errorf("snapshot %+v, want %+v", got, w)
	}
	return nil
}

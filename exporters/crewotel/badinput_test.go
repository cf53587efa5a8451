package crewotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewotel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/goleak"
)

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

// TestBadInput feeds Register (and the Quantiles it reads) the mistakes
// users make. Register never panics: it returns an error wrapping
// crew.ErrInvalid, and creates nothing, for arguments it cannot export
// correctly; what it accepts collects without error and reports each
// pool under its own name.
func TestBadInput(t *testing.T) {
	defer goleak.VerifyNone(t)
	good := crew.New(1, crew.WithName("good"))
	other := crew.New(2, crew.WithName("other"))
	twin := crew.New(1, crew.WithName("good"))
	unnamed := crew.New(1)
	unnamed2 := crew.New(1)
	notUTF8 := crew.New(1, crew.WithName("bad\xff"))
	stopped := crew.New(3, crew.WithName("stopped"), crew.WithLatency())
	done := make(chan struct{})
	stopped.Go(func() { close(done) })
	<-done
	stopped.Stop()
	defer func() {
		for _, p := range []*crew.Pool{good, other, twin, unnamed, unnamed2, notUTF8} {
			p.Stop()
		}
	}()
	zero := new(crew.Pool)
	var nilPool *crew.Pool
	pools := func(ps ...*crew.Pool) []*crew.Pool { return ps }

	for _, c := range []struct {
		name      string
		nilMeter  bool
		pools     []*crew.Pool
		quantiles []float64 // Quantiles while Register runs, if not nil
		ok        bool      // Register accepts it
		want      map[string]float64
	}{
		{name: "nil meter", nilMeter: true, pools: pools(good)},
		{name: "no pools", pools: nil},
		{name: "empty pool slice", pools: []*crew.Pool{}},
		{name: "nil pool", pools: pools(nilPool)},
		{name: "nil pool among good ones", pools: pools(good, nilPool, other)},
		{name: "zero pool", pools: pools(zero)},
		{name: "zero pool among good ones", pools: pools(good, zero)},
		{name: "same pool twice", pools: pools(good, other, good)},
		{name: "two pools with one name", pools: pools(good, twin)},
		{name: "two unnamed pools", pools: pools(unnamed, unnamed2)},
		{name: "name not UTF-8", pools: pools(notUTF8)},
		{name: "NaN quantile", pools: pools(good), quantiles: []float64{0.5, math.NaN()}},
		{name: "negative quantile", pools: pools(good), quantiles: []float64{-0.5}},
		{name: "quantile above 1", pools: pools(good), quantiles: []float64{0.5, 2}},
		{name: "duplicate quantile", pools: pools(good), quantiles: []float64{0.5, 0.5}},
		{name: "one unnamed pool", pools: pools(unnamed, good), ok: true, want: map[string]float64{
			"crew.pool.workers.max ": 1, "crew.pool.workers.max good": 1,
		}},
		{name: "stopped pool", pools: pools(stopped, good), ok: true, want: map[string]float64{
			"crew.pool.workers.max stopped": 3, "crew.pool.tasks.completed stopped": 1, "crew.pool.task.run.duration stopped 1": -1,
		}},
		{name: "other quantiles", pools: pools(stopped), quantiles: []float64{0, 0.75}, ok: true, want: map[string]float64{
			"crew.pool.task.run.duration stopped 0": -1, "crew.pool.task.run.duration stopped 0.75": -1,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			reader := sdkmetric.NewManualReader()
			provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer provider.Shutdown(context.Background())
			var meter metric.Meter
			if !c.nilMeter {
				meter = provider.Meter("badinput")
			}
			if c.quantiles != nil {
				saved := crewotel.Quantiles
				crewotel.Quantiles = c.quantiles
				defer func() { crewotel.Quantiles = saved }()
			}
			var reg metric.Registration
			var err error
			perr, panicked := panicOf(func() { reg, err = crewotel.Register(meter, c.pools...) })
			switch {
			case panicked:
				t.Fatalf("Register panicked: %v", perr)
			case !c.ok && !errors.Is(err, crew.ErrInvalid):
				t.Fatalf("Register = %v, want an error wrapping crew.ErrInvalid", err)
			case !c.ok:
				if reg != nil {
					t.Error("Register returned a registration with its error")
				}
				if points, _ := collect(t, reader); len(points) != 0 {
					t.Errorf("a refused Register reports %v", points)
				}
				return
			case err != nil:
				t.Fatalf("Register: %v", err)
			}
			defer reg.Unregister()
			points, _ := collect(t, reader)
			for k, v := range c.want {
				got, ok := points[k]
				if !ok || v >= 0 && got != v {
					t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
				}
			}
		})
	}

	// Register reads Quantiles once: growing them afterwards changes
	// nothing, and collecting never indexes past what it read.
	t.Run("Quantiles changed after Register", func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer provider.Shutdown(context.Background())
		reg, err := crewotel.Register(provider.Meter("badinput"), stopped)
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Unregister()
		saved := crewotel.Quantiles
		crewotel.Quantiles = append(append([]float64(nil), saved...), 0.25)
		defer func() { crewotel.Quantiles = saved }()
		var points map[string]float64
		if err, panicked := panicOf(func() { points, _ = collect(t, reader) }); panicked {
			t.Fatalf("collecting panicked: %v", err)
		}
		if _, ok := points["crew.pool.task.run.duration stopped 0.25"]; ok {
			t.Error("a quantile added after Register is reported")
		}
		if _, ok := points["crew.pool.task.run.duration stopped 0.99"]; !ok {
			t.Error("a quantile read by Register is missing")
		}
	})

	// A meter that reports nothing (the global meter before a provider is
	// set) is valid: Register succeeds.
	t.Run("noop meter", func(t *testing.T) {
		reg, err := crewotel.Register(noop.NewMeterProvider().Meter("badinput"), good)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Unregister(); err != nil {
			t.Fatal(err)
		}
	})
}

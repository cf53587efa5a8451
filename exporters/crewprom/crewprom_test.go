package crewprom_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/exporters/crewprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// metric finds the sample of family name for pool.
func metric(t *testing.T, fams []*dto.MetricFamily, name, pool string) *dto.Metric {
	t.Helper()
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					return m
				}
			}
		}
	}
	return nil
}

func TestCollectorGathered(t *testing.T) {
	defer goleak.VerifyNone(t)
	timed := crew.New(2, crew.WithName("timed"), crew.WithLatency(), crew.WithPanicHandler(func(*crew.PanicError) {}))
	plain := crew.New(3, crew.WithName("plain"))
	const work = 200 * time.Microsecond
	for range 20 {
		timed.Go(func() { spin(work) })
	}
	timed.Go(func() { panic("boom") })
	timed.Submit(func(context.Context) error { return errors.New("failed") }).Wait()
	plain.Go(func() {})
	timed.Stop()
	plain.Stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(crewprom.NewCollector([]*crew.Pool{timed, plain}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, pool string
		want       float64
	}{
		{"crew_pool_max_workers", "timed", 2},
		{"crew_pool_max_workers", "plain", 3},
		{"crew_pool_workers", "timed", 0},
		{"crew_pool_tasks_submitted_total", "timed", 22},
		{"crew_pool_tasks_completed_total", "timed", 22},
		{"crew_pool_tasks_failed_total", "timed", 1},
		{"crew_pool_tasks_panicked_total", "timed", 1},
		{"crew_pool_tasks_dropped_total", "timed", 0},
		{"crew_pool_tasks_cancelled_total", "timed", 0},
		{"crew_pool_tasks_completed_total", "plain", 1},
	} {
		m := metric(t, fams, c.name, c.pool)
		if m == nil {
			t.Errorf("%s{pool=%q} missing", c.name, c.pool)
			continue
		}
		got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		if got != c.want {
			t.Errorf("%s{pool=%q} = %v, want %v", c.name, c.pool, got, c.want)
		}
	}

	run := metric(t, fams, "crew_pool_task_run_seconds", "timed").GetHistogram()
	if run == nil || run.GetSampleCount() != 22 {
		t.Fatalf("run histogram: %v", run)
	}
	if run.GetSampleSum() < 20*work.Seconds() {
		t.Errorf("run sum %vs, want at least %vs", run.GetSampleSum(), 20*work.Seconds())
	}
	var prev uint64
	for _, b := range run.GetBucket() {
		n := b.GetCumulativeCount()
		if n < prev {
			t.Errorf("bucket le=%v: cumulative count %d below the previous %d", b.GetUpperBound(), n, prev)
		}
		prev = n
		// The 20 spinning tasks ran at least 200µs each: none reads below
		// 100µs; only the panicking and the failing task can.
		if b.GetUpperBound() == 1e-4 && n > 2 {
			t.Errorf("%d runs at or below 100µs, want at most 2", n)
		}
		if b.GetUpperBound() == 10 && n != 22 {
			t.Errorf("%d runs at or below 10s, want 22", n)
		}
	}
	if metric(t, fams, "crew_pool_task_wait_seconds", "timed").GetHistogram().GetSampleCount() != 22 {
		t.Error("wait histogram count")
	}
	if metric(t, fams, "crew_pool_task_run_seconds", "plain") != nil {
		t.Error("a pool without WithLatency exports a histogram")
	}

	problems, err := testutil.CollectAndLint(crewprom.NewCollector([]*crew.Pool{timed, plain}))
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", err, problems)
	}
}

func TestCollectorOptions(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := ranOnce("opts", func() { spin(2 * time.Millisecond) })
	c := crewprom.NewCollector([]*crew.Pool{p}, crewprom.WithNamespace("app"), crewprom.WithBuckets(0.001, 1))
	l, _ := p.Latency()
	compareHistogram(t, c, "app_pool_task_run_seconds", "Time from a task's start to its return.", `
app_pool_task_run_seconds_bucket{pool="opts",le="0.001"} 0
app_pool_task_run_seconds_bucket{pool="opts",le="1"} 1
app_pool_task_run_seconds_bucket{pool="opts",le="+Inf"} 1
`, "opts", l.Run.Sum.Seconds())
}

// ranOnce returns a stopped pool named name, built WithLatency, that ran
// task once.
func ranOnce(name string, task func()) *crew.Pool {
	p := crew.New(1, crew.WithName(name), crew.WithLatency())
	done := make(chan struct{})
	p.Go(func() { task(); close(done) })
	<-done
	p.Stop()
	return p
}

// compareHistogram checks c's exposition of the histogram metric: its
// help, the bucket lines given, and a count of 1 with the sum given.
func compareHistogram(t *testing.T, c prometheus.Collector, metric, help, buckets, pool string, sum float64) {
	t.Helper()
	want := "# HELP " + metric + " " + help + "\n# TYPE " + metric + " histogram" + buckets
	want += metric + "_sum{pool=\"" + pool + "\"} " + formatFloat(sum) + "\n"
	want += metric + "_count{pool=\"" + pool + "\"} 1\n"
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), metric); err != nil {
		t.Error(err)
	}
}

// +Inf and bounds beyond the longest time.Duration are accepted: they
// count every observation.
func TestWithBucketsAcceptsHugeBounds(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := ranOnce("huge", func() {})
	c := crewprom.NewCollector([]*crew.Pool{p}, crewprom.WithBuckets(1e12, math.Inf(1)))
	l, _ := p.Latency()
	compareHistogram(t, c, "crew_pool_task_wait_seconds", "Time from a task's submission to its start.", `
crew_pool_task_wait_seconds_bucket{pool="huge",le="1e+12"} 1
crew_pool_task_wait_seconds_bucket{pool="huge",le="+Inf"} 1
`, "huge", l.Wait.Sum.Seconds())
}

// A bucket's cumulative count is a counter: a later scrape never reports
// less, even when a longer task raises the histogram's maximum. (A task of
// exactly 10ms, alone, is at the maximum; with a 20ms task after it, it
// reads as crew's value for its bucket, a little above 10ms.)
func TestHistogramBucketsNeverGoDown(t *testing.T) {
	defer goleak.VerifyNone(t)
	synctest.Test(t, func(t *testing.T) {
		p := crew.New(1, crew.WithName("mono"), crew.WithLatency())
		defer p.Stop()
		c := crewprom.NewCollector([]*crew.Pool{p})
		scrape := func() map[float64]uint64 {
			t.Helper()
			reg := prometheus.NewRegistry()
			reg.MustRegister(c)
			fams, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			buckets := make(map[float64]uint64)
			for _, b := range metric(t, fams, "crew_pool_task_run_seconds", "mono").GetHistogram().GetBucket() {
				buckets[b.GetUpperBound()] = b.GetCumulativeCount()
			}
			return buckets
		}
		run := func(d time.Duration) {
			done := make(chan struct{})
			p.Go(func() { time.Sleep(d); close(done) })
			<-done
			synctest.Wait() // the worker has recorded the run
		}
		var prev map[float64]uint64
		for _, d := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, time.Millisecond, time.Second} {
			run(d)
			now := scrape()
			for upper, n := range prev {
				if now[upper] < n {
					t.Errorf("after a %v task, bucket le=%v went from %d to %d", d, upper, n, now[upper])
				}
			}
			prev = now
		}
	})
}

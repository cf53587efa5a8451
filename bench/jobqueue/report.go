package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// writeTable writes a markdown table of results, by system and
// worker-process count: the median of each measure over the rounds, and
// the duplicates and lost jobs of all rounds together.
func writeTable(w io.Writer, cfg config, results map[string]map[int][]result) {
	fmt.Fprintln(w, "| system | worker processes | jobs | throughput (jobs/s) | enqueue (jobs/s) | p50 latency | p99 latency | duplicates/lost |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, procs := range cfg.procs {
		for _, name := range cfg.systems {
			rs := results[name][procs]
			if len(rs) == 0 {
				continue
			}
			dups, lost := 0, 0
			for _, r := range rs {
				dups += r.duplicates
				lost += r.lost
			}
			fmt.Fprintf(w, "| %s | %d | %d | %.0f | %.0f | %s | %s | %d/%d |\n", name, procs, rs[0].jobs,
				median(rs, func(r result) float64 { return r.throughput }),
				median(rs, func(r result) float64 { return r.enqueue }),
				fmtDur(time.Duration(median(rs, func(r result) float64 { return float64(r.p50) }))),
				fmtDur(time.Duration(median(rs, func(r result) float64 { return float64(r.p99) }))),
				dups, lost)
		}
	}
}

// median returns the median of f over rs, which must not be empty.
func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// fmtDur formats d with three significant digits or so.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gocrew/crew/bench/subjects"
	"github.com/gocrew/crew/bench/workload"
)

// A Report is everything one crewbench invocation measured; it is written
// as results.json and rendered as results.md and the SVG charts.
type Report struct {
	Meta    Meta     `json:"meta"`
	Groups  []Group  `json:"groups"`
	Samples []Sample `json:"samples"`
}

// Meta describes the machine and the settings of the invocation.
type Meta struct {
	Started   time.Time `json:"started"`
	GoVersion string    `json:"go_version"`
	OS        string    `json:"os"`
	Arch      string    `json:"arch"`
	NumCPU    int       `json:"num_cpu"`
	Scale     float64   `json:"scale"`
	Runs      int       `json:"runs"`
	Seed      uint64    `json:"seed"` // of the subjects' order in each round
}

// A Group is one table: a task kind at one GOMAXPROCS, with the workloads
// (after scaling) as columns and the subjects as rows, in run order.
type Group struct {
	Task      string              `json:"task"`
	Procs     int                 `json:"procs"`
	Workloads []workload.Workload `json:"workloads"`
	Subjects  []string            `json:"subjects"`
	fn        func()              // the task
}

// A Cell holds the medians over the runs of one subject in one workload.
type Cell struct {
	WallNs, Bytes, Allocs, PeakHeap, PeakGoroutines float64
	OK                                              bool
}

// cell returns the medians of the samples of g for workload w and subject s.
func (r *Report) cell(g Group, w, s string) Cell {
	var wall, bytes, allocs, heap, gor []float64
	for _, x := range r.Samples {
		if x.Task == g.Task && x.Procs == g.Procs && x.Workload == w && x.Subject == s {
			wall = append(wall, float64(x.WallNs))
			bytes = append(bytes, float64(x.Bytes))
			allocs = append(allocs, float64(x.Allocs))
			heap = append(heap, float64(x.PeakHeap))
			gor = append(gor, float64(x.PeakGoroutines))
		}
	}
	if len(wall) == 0 {
		return Cell{}
	}
	return Cell{median(wall), median(bytes), median(allocs), median(heap), median(gor), true}
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// fastestPeer returns the lowest median wall time of the peers (not crew) in
// column w of g, or 0 when no peer ran.
func (r *Report) fastestPeer(g Group, w string) float64 {
	best := 0.0
	for _, s := range g.Subjects {
		if c := r.cell(g, w, s); c.OK && !isCrew(s) && (best == 0 || c.WallNs < best) {
			best = c.WallNs
		}
	}
	return best
}

func isCrew(name string) bool {
	for _, s := range subjects.All() {
		if s.Name == name {
			return s.Crew
		}
	}
	return false
}

// WriteMarkdown renders the two tables of every group.
func (r *Report) WriteMarkdown(w io.Writer) {
	m := r.Meta
	fmt.Fprintf(w, "# crew vs peers\n\n%s %s/%s, %d CPUs, scale %g, median of %d runs in shuffled order (seed %d), %s.\n",
		m.GoVersion, m.OS, m.Arch, m.NumCPU, m.Scale, m.Runs, m.Seed, m.Started.Format(time.DateTime))
	for _, g := range r.Groups {
		fmt.Fprintf(w, "\n## %s, GOMAXPROCS=%d\n\n", g.Task, g.Procs)
		for _, wl := range g.Workloads {
			fmt.Fprintf(w, "- %s: %s\n", wl.Name, wl)
		}
		fmt.Fprintf(w, "\nWall time per run in ms (median), and in brackets the ratio to the fastest peer in the column (crew not counted; below 1 is faster).\n\n")
		r.table(w, g, func(c Cell, wl string) string {
			s := fmtMs(c.WallNs)
			if best := r.fastestPeer(g, wl); best > 0 {
				s += " (" + fmtRatio(c.WallNs/best) + ")"
			}
			return s
		})
		fmt.Fprintf(w, "\nAllocations / peak heap growth / peak goroutines per run (medians). Heap growth is the peak of live heap objects, sampled every millisecond, above the heap at the start of the run.\n\n")
		r.table(w, g, func(c Cell, _ string) string {
			return fmt.Sprintf("%s / %s / %s", fmtCount(c.Allocs), fmtBytes(c.PeakHeap), fmtCount(c.PeakGoroutines))
		})
	}
}

// table writes one markdown table of g, a row per subject (crew's in bold).
func (r *Report) table(w io.Writer, g Group, format func(c Cell, workload string) string) {
	fmt.Fprint(w, "| subject |")
	for _, wl := range g.Workloads {
		fmt.Fprintf(w, " %s |", wl.Name)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(g.Workloads)))
	for _, s := range g.Subjects {
		bold := func(x string) string { return x }
		if isCrew(s) {
			bold = func(x string) string { return "**" + x + "**" }
		}
		fmt.Fprintf(w, "| %s |", bold(s))
		for _, wl := range g.Workloads {
			text := "-"
			if c := r.cell(g, wl.Name, s); c.OK {
				text = bold(format(c, wl.Name))
			}
			fmt.Fprintf(w, " %s |", text)
		}
		fmt.Fprintln(w)
	}
}

// fmtMs writes a duration of ns nanoseconds in milliseconds (see fmtShort).
func fmtMs(ns float64) string { return fmtShort(ns/1e6, "") }

// fmtRatio writes r as a factor, "1.25x" (see fmtShort).
func fmtRatio(r float64) string { return fmtShort(r, "x") }

// fmtShort writes x followed by suffix, with two decimals below 10, one
// below 100 and none from 100 on.
func fmtShort(x float64, suffix string) string {
	decimals := 2
	switch {
	case x >= 100:
		decimals = 0
	case x >= 10:
		decimals = 1
	}
	return fmt.Sprintf("%.*f%s", decimals, x, suffix)
}

// fmtCount writes n with a k or M suffix and about three significant digits.
func fmtCount(n float64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.3gM", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.3gk", n/1e3)
	default:
		return fmt.Sprintf("%.0f", n)
	}
}

func fmtBytes(b float64) string {
	return fmt.Sprintf("%.3g MiB", b/(1<<20))
}

// Command bench compares crew with its peers on pond's users x tasks matrix
// and a CPU-bound workload, and writes the results as markdown, JSON and SVG
// charts. Run it from the bench folder: go run . -quick (see README.md).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gocrew/crew/bench/subjects"
	"github.com/gocrew/crew/bench/workload"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "crewbench:", err)
		os.Exit(1)
	}
}

// Quick mode's settings, used unless -scale or -runs are given explicitly.
const (
	quickScale = 0.02
	quickRuns  = 3
)

func run() error {
	envScale, err := workload.ScaleFromEnv()
	if err != nil {
		return err
	}
	var (
		workloads  = flag.String("workloads", "all", "comma-separated workload names (1u-1Mt,100u-10Kt,1Ku-1Kt,10Ku-100t,1Mu-1t,1u-100Kt,bursts,mixed,fanout,spawn) or all")
		tasks      = flag.String("tasks", "rand,sleep,cpu,service", "comma-separated task kinds: rand, sleep, cpu, service")
		subjectArg = flag.String("subjects", "all", "comma-separated subjects or all: "+strings.Join(subjects.Names(), ","))
		runs       = flag.Int("runs", 3, "repetitions of every measurement; tables show the median")
		procs      = flag.String("procs", strconv.Itoa(runtime.GOMAXPROCS(0)), "comma-separated GOMAXPROCS values to run under")
		quick      = flag.Bool("quick", false, fmt.Sprintf("quick look (under 2 minutes on 2 cores): -scale %g -runs %d unless given", quickScale, quickRuns))
		scale      = flag.Float64("scale", envScale, "multiply every workload's task count by this factor in (0, 1] (default $"+workload.ScaleEnv+" or 1)")
		out        = flag.String("out", "results", "folder for results.md, results.json and the SVG charts")
		seed       = flag.Uint64("seed", 0, "seed of the subjects' order in each round (default: from the clock; the report records it)")
	)
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["scale"] {
			*scale = quickScale
		}
		if !set["runs"] {
			*runs = quickRuns
		}
	}
	if *scale <= 0 || *scale > 1 || *runs < 1 {
		return fmt.Errorf("want 0 < -scale <= 1 and -runs >= 1")
	}
	subs, err := subjects.Select(*subjectArg)
	if err != nil {
		return err
	}
	procList, err := parseInts(*procs)
	if err != nil {
		return fmt.Errorf("-procs: %v", err)
	}
	groups, err := plan(*tasks, *workloads, procList, subs, *scale)
	if err != nil {
		return err
	}

	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	report := &Report{
		Meta: Meta{
			Started: time.Now(), GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			NumCPU: runtime.NumCPU(), Scale: *scale, Runs: *runs, Seed: *seed,
		},
		Groups: groups,
	}
	measureAll(report, subs)

	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	var md bytes.Buffer
	report.WriteMarkdown(&md)
	js, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "results.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "results.json"), js, 0o644); err != nil {
		return err
	}
	for _, g := range groups {
		path := filepath.Join(*out, fmt.Sprintf("%s-procs%d.svg", g.Task, g.Procs))
		if err := report.WriteChart(g, path); err != nil {
			return fmt.Errorf("chart %s: %v", path, err)
		}
	}
	fmt.Print(md.String())
	fmt.Fprintf(os.Stderr, "wrote %s/results.md, results.json and charts\n", *out)
	return nil
}

// plan returns one group per selected task kind and GOMAXPROCS value, with
// the selected workloads of that task scaled by scale.
func plan(tasks, workloads string, procs []int, subs []subjects.Subject, scale float64) ([]Group, error) {
	wantTask, wantWorkload := set(tasks), set(workloads)
	var names []string
	for _, s := range subs {
		names = append(names, s.Name)
	}
	var groups []Group
	used := map[string]bool{"all": true}
	for _, t := range workload.Tasks {
		if !wantTask[t.Name] {
			continue
		}
		delete(wantTask, t.Name)
		var ws []workload.Workload
		for _, w := range t.Workloads {
			if workloads == "all" || wantWorkload[w.Name] {
				ws = append(ws, w.Scale(scale))
			}
		}
		for _, w := range ws {
			used[w.Name] = true
		}
		if len(ws) == 0 {
			fmt.Fprintf(os.Stderr, "task %s: none of its workloads selected, skipped\n", t.Name)
			continue
		}
		for _, p := range procs {
			groups = append(groups, Group{Task: t.Name, Procs: p, Workloads: ws, Subjects: names, fn: t.Fn})
		}
	}
	for t := range wantTask {
		return nil, fmt.Errorf("unknown task %q (have rand, sleep, cpu, service)", t)
	}
	for w := range wantWorkload {
		if !used[w] {
			return nil, fmt.Errorf("unknown workload %q, or its task is not selected", w)
		}
	}
	return groups, nil
}

// measureAll runs every group: for each workload, the repetitions are the
// outer loop and the subjects the inner one, in an order shuffled afresh
// for each repetition (from the report's seed), so that no subject always
// runs just after another, whose garbage or leftover goroutines it would
// then always inherit, and all subjects share the machine's noise fairly.
func measureAll(r *Report, subs []subjects.Subject) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	total := 0
	for _, g := range r.Groups {
		total += len(g.Workloads) * r.Meta.Runs * len(subs)
	}
	most := 0
	for _, g := range r.Groups {
		for _, w := range g.Workloads {
			most = max(most, w.Users+w.Limit)
		}
	}
	warmGoroutines(most)

	rng := rand.New(rand.NewPCG(r.Meta.Seed, 0))
	done := 0
	for _, g := range r.Groups {
		runtime.GOMAXPROCS(g.Procs)
		for _, w := range g.Workloads {
			for run := range r.Meta.Runs {
				for _, i := range rng.Perm(len(subs)) {
					s := subs[i]
					fn := g.fn
					if w.Fn != nil {
						fn = w.Fn
					}
					x := measure(func() { s.RunPaced(w.Users, w.TasksPerUser, w.Limit, w.Burst, w.Gap, fn) })
					x.Task, x.Procs, x.Workload, x.Subject, x.Run = g.Task, g.Procs, w.Name, s.Name, run
					r.Samples = append(r.Samples, x)
					done++
					fmt.Fprintf(os.Stderr, "[%*d/%d] %-5s procs=%d %-9s %-19s run %d/%d %10.2f ms\n",
						len(strconv.Itoa(total)), done, total, g.Task, g.Procs, w.Name, s.Name,
						run+1, r.Meta.Runs, float64(x.WallNs)/1e6)
				}
			}
		}
	}
}

func set(list string) map[string]bool {
	m := map[string]bool{}
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			m[s] = true
		}
	}
	return m
}

func parseInts(list string) ([]int, error) {
	var out []int
	for s := range set(list) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad value %q", s)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"time"

	"github.com/gocrew/crew/bench/subjects"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// palette gives each subject (by its place in subjects.All) a distinct
// colour; crew, the first, is black.
var palette = []color.Color{
	rgb(0x000000), rgb(0x1f77b4), rgb(0xaec7e8), rgb(0xff7f0e), rgb(0xffbb78),
	rgb(0x2ca02c), rgb(0x98df8a), rgb(0xd62728), rgb(0xff9896), rgb(0x9467bd),
	rgb(0xc5b0d5), rgb(0x8c564b), rgb(0xe377c2), rgb(0x7f7f7f), rgb(0xbcbd22),
	rgb(0x17becf),
}

func rgb(c uint32) color.Color {
	return color.RGBA{uint8(c >> 16), uint8(c >> 8), uint8(c), 0xff}
}

// WriteChart draws g as a grouped bar chart in SVG: the workloads on the x
// axis, one bar per subject with its median wall time on a log scale.
func (r *Report) WriteChart(g Group, path string) error {
	// gonum's log scale cannot draw bars that start at 0, so each bar's
	// height is its decades above floor (10^floor ns) on a linear axis whose
	// ticks are labelled as durations.
	floor := math.Inf(1)
	for _, wl := range g.Workloads {
		for _, s := range g.Subjects {
			if c := r.cell(g, wl.Name, s); c.OK {
				floor = min(floor, math.Floor(math.Log10(c.WallNs)))
			}
		}
	}
	if math.IsInf(floor, 1) {
		return nil // nothing ran
	}

	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: wall time per run, GOMAXPROCS=%d, scale %g (median of %d)",
		g.Task, g.Procs, r.Meta.Scale, r.Meta.Runs)
	p.Y.Label.Text = "wall time (log scale)"
	p.Y.Min = 0
	p.Y.Tick.Marker = decadeTicks{floor}
	p.Add(plotter.NewGrid())

	barWidth := vg.Points(8)
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(10)
	n := len(g.Subjects)
	for i, s := range g.Subjects {
		heights := make(plotter.Values, len(g.Workloads))
		for j, wl := range g.Workloads {
			if c := r.cell(g, wl.Name, s); c.OK {
				heights[j] = math.Log10(c.WallNs) - floor
			}
		}
		bars, err := plotter.NewBarChart(heights, barWidth)
		if err != nil {
			return err
		}
		bars.Color = palette[max(0, slices.Index(subjects.Names(), s))%len(palette)]
		bars.LineStyle.Width = 0
		bars.Offset = barWidth * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(bars)
		legend.Add(s, bars)
	}
	var names []string
	for _, wl := range g.Workloads {
		names = append(names, wl.Name)
	}
	p.NominalX(names...)
	p.X.Padding = 0
	p.Y.Max = math.Max(1, math.Ceil(p.Y.Max))

	// The plot takes the left part of the canvas, the legend the right.
	groupWidth := barWidth*vg.Length(n) + vg.Points(24)
	width := max(8*vg.Inch, groupWidth*vg.Length(len(names))+3.5*vg.Inch)
	legendWidth := 2.4 * vg.Inch
	canvas := vgsvg.New(width, 5*vg.Inch)
	dc := draw.New(canvas)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	legend.Draw(draw.Crop(dc, width-legendWidth+vg.Points(12), 0, 0, -vg.Points(30)))

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// decadeTicks labels a linear axis of decades above 10^floor ns as durations,
// with unlabelled minor ticks at 2..9 times each decade.
type decadeTicks struct{ floor float64 }

func (d decadeTicks) Ticks(_, max float64) []plot.Tick {
	var ticks []plot.Tick
	for k := 0.0; k <= math.Ceil(max); k++ {
		ns := math.Pow(10, d.floor+k)
		ticks = append(ticks, plot.Tick{Value: k, Label: time.Duration(ns).String()})
		for m := 2.0; m < 10 && k+math.Log10(m) <= math.Ceil(max); m++ {
			ticks = append(ticks, plot.Tick{Value: k + math.Log10(m)})
		}
	}
	return ticks
}

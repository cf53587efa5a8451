// Command profile shows crew's pools in a CPU profile.
//
// It runs two named pools side by side: "resize" scales synthetic images
// down, "checksum" hashes buffers, with about three times as much work
// for resize. Every worker of a named pool carries the pprof label
// crew.pool=NAME, so the profile it writes splits by pool:
//
//	$ go run ./examples/profile -cpuprofile cpu.prof
//	resize: 300 tasks, run p50 1.15ms p99 31.98ms, wait p50 276.82ms
//	checksum: 100 tasks, run p50 2.56ms p99 27.79ms, wait p50 127.93ms
//	wrote cpu.prof
//	$ go tool pprof -tags cpu.prof
//	 crew.pool: Total 390ms of 410ms (95.12%)
//	            300ms (73.17%): resize
//	             90ms (21.95%): checksum
//
//	$ go tool pprof -tagfocus=crew.pool=checksum -top cpu.prof   # one pool only
//
// (One run on two shared cores: the 3:1 split of the work shows as 73:22;
// the 5% without a label is the program itself.) In a goroutine profile
// (/debug/pprof/goroutine?debug=1) the pools' idle and blocked workers
// carry the same label, and while an execution trace is recorded
// (runtime/trace, /debug/pprof/trace) every task runs in a region named
// after its pool.
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/gocrew/crew"
)

func main() {
	out := flag.String("cpuprofile", "cpu.prof", "write the CPU profile to `file`")
	flag.Parse()
	if err := run(os.Stdout, *out, 300, 100); err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		os.Exit(1)
	}
}

// run resizes images and hashes buffers on two named pools under a CPU
// profile written to path, then reports the pools' latency to w.
func run(w io.Writer, path string, images, buffers int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	resize := crew.New(2, crew.WithName("resize"), crew.WithLatency())
	checksum := crew.New(2, crew.WithName("checksum"), crew.WithLatency())
	src := make([]byte, 1024*1024)
	for i := range src {
		src[i] = byte(i * 31)
	}
	buf := make([]byte, 2<<20)
	for i := range max(images, buffers) {
		if i < images {
			resize.Go(func() { downscale(src, 1024) })
		}
		if i < buffers {
			checksum.Go(func() { sha256.Sum256(buf) })
		}
	}
	resize.Stop()
	checksum.Stop()
	pprof.StopCPUProfile()
	for _, p := range []*crew.Pool{resize, checksum} {
		l, _ := p.Latency()
		fmt.Fprintf(w, "%s: %d tasks, run p50 %v p99 %v, wait p50 %v\n", p.Name(), l.Run.Count,
			l.Run.Quantile(0.5).Round(10*time.Microsecond), l.Run.Quantile(0.99).Round(10*time.Microsecond),
			l.Wait.Quantile(0.5).Round(10*time.Microsecond))
	}
	fmt.Fprintln(w, "wrote", path)
	return f.Close()
}

// downscale halves a side×side grey image three times with a box filter.
func downscale(img []byte, side int) []byte {
	for range 3 {
		half := side / 2
		dst := make([]byte, half*half)
		for y := range half {
			for x := range half {
				s := int(img[2*y*side+2*x]) + int(img[2*y*side+2*x+1]) +
					int(img[(2*y+1)*side+2*x]) + int(img[(2*y+1)*side+2*x+1])
				dst[y*half+x] = byte(s / 4)
			}
		}
		img, side = dst, half
	}
	return img
}

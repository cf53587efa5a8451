package crew

import (
	"sync"
	"testing"
	"time"

	"github.com/gocrew/crew/internal/leak"
)

// The token times of a RateLimited, read under its lock at the moment each
// task takes its token, obey the bucket's bound exactly, from several
// producers at once.
func TestRateLimitedIsNeverExceeded(t *testing.T) {
	leak.Check(t)
	p := New(4)
	defer p.Stop()
	r := Rate{Limit: 3, Per: 6 * time.Millisecond, Burst: 4} // one per 2ms
	rl := NewRateLimited(p, r)
	var took []int64
	rl.tookToken = func(now int64) { took = append(took, now) } // under rl.mu
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				rl.Go(func() {})
			}
		})
	}
	wg.Wait()
	rl.Wait()
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if len(took) != 40 {
		t.Fatalf("%d tokens taken for 40 tasks", len(took))
	}
	b, _ := r.bucket()
	checkBucketBound(t, took, b)
}

// The bucket's arithmetic: tokens accrue at one per e up to cap, and at
// reports when a count will be there.
func TestTokenBucket(t *testing.T) {
	b, err := Rate{Limit: 3, Per: 10, Burst: 2}.bucket() // e rounds 10/3 up to 4
	if err != nil || b.e != 4 || b.cap != 2 {
		t.Fatalf("bucket = %+v, %v", b, err)
	}
	if b.avail(0) != 2 {
		t.Fatal("a new bucket is not full")
	}
	b.take(100)
	b.take(100)
	if b.avail(100) != 0 || b.avail(103) != 0 || b.avail(104) != 1 || b.avail(108) != 2 || b.avail(1000) != 2 {
		t.Fatalf("avail after two takes at 100: %d %d %d %d", b.avail(100), b.avail(103), b.avail(104), b.avail(108))
	}
	if b.at(1) != 104 || b.at(2) != 108 {
		t.Fatalf("at(1) = %d, at(2) = %d; want 104, 108", b.at(1), b.at(2))
	}
}

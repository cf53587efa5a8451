package crew_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gocrew/crew"
)

// A call to a flaky service is made again after a short delay, during
// which the task holds no worker; an error marked Permanent is not
// retried.
func ExampleNewRetrying() {
	p := crew.New(4)
	defer p.Stop()
	r := crew.NewRetrying(p, crew.Retry{Attempts: 3, Delay: time.Millisecond, Timeout: time.Second})
	var calls atomic.Int64
	flaky := r.Submit(func(ctx context.Context) error {
		if calls.Add(1) < 3 {
			return errors.New("unavailable")
		}
		return nil
	})
	bad := r.Submit(func(ctx context.Context) error {
		return crew.Permanent(errors.New("bad request"))
	})
	fmt.Println(flaky.Wait(), calls.Load())
	fmt.Println(bad.Wait())
	fmt.Println(r.Stats().Retried)
	// Output:
	// <nil> 3
	// bad request
	// 2
}

package crew_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/gocrew/crew"
	"github.com/gocrew/crew/internal/leak"
)

// A task of the pool that feeds a stream with GoContext while the window
// is full must not hold the only worker while it waits: the tasks that
// would open the window need one.
func TestStreamGoContextInsideSaturatedPool(t *testing.T) {
	leak.Check(t)
	synctest.Test(t, func(t *testing.T) {
		p := crew.New(1)
		defer p.Stop()
		s := crew.NewStream(context.Background(), p) // a window of 1
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ran := 0
		task := func(context.Context) func() { return func() { ran++ } }
		result := make(chan error, 1)
		p.Go(func() {
			if err := s.GoContext(ctx, task); err != nil {
				result <- err
				return
			}
			result <- s.GoContext(ctx, task) // waits for the first task, which needs the worker
		})
		synctest.Wait()
		select {
		case err := <-result:
			if err != nil {
				t.Errorf("GoContext: %v", err)
			}
		default:
			t.Error("GoContext inside the pool's only worker waits for ever for a window that needs that worker")
			cancel()
			<-result
		}
		if err := s.Wait(); err != nil {
			t.Error(err)
		}
	})
}

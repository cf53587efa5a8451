package subjects

import (
	"sync/atomic"
	"testing"
)

// TestEverySubjectRunsEveryTask checks that Run returns only after each
// subject ran every submitted task, for a few shapes of users and limits.
func TestEverySubjectRunsEveryTask(t *testing.T) {
	shapes := []struct{ users, tasks, limit int }{{1, 500, 4}, {20, 30, 1}, {50, 1, 1000}}
	for _, s := range All() {
		for _, sh := range shapes {
			var n atomic.Int64
			s.Run(sh.users, sh.tasks, sh.limit, func() { n.Add(1) })
			if got, want := n.Load(), int64(sh.users*sh.tasks); got != want {
				t.Errorf("%s %+v: ran %d tasks, want %d", s.Name, sh, got, want)
			}
		}
	}
}

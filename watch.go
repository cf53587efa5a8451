package crew

import (
	"context"
	"slices"
	"sync"
)

// watchers are the groups that the end of a pool's context cancels. A group
// joins as it is made and leaves as its Wait returns: a slot in a slice
// under a mutex, where a context.AfterFunc per group would cost two
// allocations and an entry in the context's map of children. One AfterFunc
// on the pool's context, made with the first group, cancels them all.
type watchers struct {
	mu    sync.Mutex
	list  []watcher
	first [2]watcher // list's first backing array: a pool with a group or two allocates none
	ended bool       // the pool's context ended: list is empty for good
	armed bool       // the AfterFunc on the pool's context is made
}

// A watcher is a group in a pool's watchers.
type watcher interface {
	// poolEnded cancels the group; it is called without the watchers' lock.
	poolEnded()
	// watchSlot returns where the watcher keeps its index in the list, -1
	// when not in it; read and written under the watchers' lock.
	watchSlot() *int
	// poolStopping submits the group's steps for all its queued tasks
	// before the pool stops taking steps; it is called without the
	// watchers' lock.
	poolStopping()
}

// add puts g in the list, to be cancelled when ctx, the pool's context,
// ends. It reports false, and leaves g out, if ctx has ended already.
func (ws *watchers) add(ctx context.Context, g watcher) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.ended {
		return false
	}
	if !ws.armed {
		ws.armed = true
		ws.list = ws.first[:0]
		context.AfterFunc(ctx, ws.end)
	}
	*g.watchSlot() = len(ws.list)
	ws.list = append(ws.list, g)
	return true
}

// remove takes g out of the list, if it is in it.
func (ws *watchers) remove(g watcher) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	slot := g.watchSlot()
	i := *slot
	if i < 0 {
		return
	}
	*slot = -1
	last := len(ws.list) - 1
	if i != last {
		moved := ws.list[last]
		ws.list[i] = moved
		*moved.watchSlot() = i
	}
	ws.list[last] = nil
	ws.list = ws.list[:last]
}

// stopping tells every group in the list that the pool is about to stop
// taking steps (see core.poolStopping).
func (ws *watchers) stopping() {
	ws.mu.Lock()
	list := slices.Clone(ws.list)
	ws.mu.Unlock()
	for _, g := range list {
		g.poolStopping()
	}
}

// end cancels every group in the list, once the pool's context has ended.
func (ws *watchers) end() {
	ws.mu.Lock()
	ws.ended = true
	list := ws.list
	ws.list = nil
	for _, g := range list {
		*g.watchSlot() = -1
	}
	ws.mu.Unlock()
	for _, g := range list {
		g.poolEnded()
	}
}

// Package notify lets goroutines wait, with an optional context, for a
// condition that other goroutines make true.
package notify

import (
	"context"
	"sync"
	"sync/atomic"
)

// A Cond lets goroutines wait for a condition that other goroutines make
// true, with an optional context (which sync.Cond lacks). The zero Cond is
// ready to use. Notifiers call Broadcast after changing the state the
// condition reads; Broadcast costs one atomic load when nobody waits, which
// keeps it off the hot path's books.
//
// A waiter with a context needs a channel to select on, which costs an
// allocation per Broadcast that wakes one; a waiter without one waits on a
// sync.Cond, which costs none (Stop, and a Go that waits for room, wait
// without a context). A Cond must not be copied after first use.
type Cond struct {
	waiters atomic.Int32
	mu      sync.Mutex
	plain   sync.Cond     // waiters without a context; plain.L is &mu
	ch      chan struct{} // closed by Broadcast; nil until a waiter with a context needs one
}

// Wait blocks until cond reports true or ctx ends; a nil ctx never ends.
// Without a context, cond is called with s's lock held: it must not call
// s's methods.
func (s *Cond) Wait(ctx context.Context, cond func() bool) error {
	s.waiters.Add(1)
	defer s.waiters.Add(-1)
	if ctx == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.plain.L == nil {
			s.plain.L = &s.mu // once: a woken waiter reads it without the lock
		}
		for !cond() {
			s.plain.Wait()
		}
		return nil
	}
	for {
		// Take the channel before testing cond: a broadcast that follows a
		// state change we missed then closes this very channel.
		s.mu.Lock()
		if s.ch == nil {
			s.ch = make(chan struct{})
		}
		ch := s.ch
		s.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// BroadcastIf is Broadcast for a condition that the notifier can test
// itself: it wakes the waiters only if someone waits and cond reports true,
// which spares the waiters a wake-up (and a new channel) for each change
// that leaves their condition false.
func (s *Cond) BroadcastIf(cond func() bool) {
	if s.waiters.Load() == 0 || !cond() {
		return
	}
	s.Broadcast()
}

// Broadcast wakes every current waiter so that it re-tests its condition.
// Call it after changing the state the conditions read.
func (s *Cond) Broadcast() {
	if s.waiters.Load() == 0 {
		return
	}
	s.mu.Lock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	s.plain.Broadcast()
	s.mu.Unlock()
}

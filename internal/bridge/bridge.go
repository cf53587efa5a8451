// Package bridge hands package batch what package crew keeps unexported:
// the sign that a pool has given up on its queued tasks. Package crew sets
// its funcs when it is initialised, so neither package exports them.
package bridge

import "context"

// PoolEnded returns a context cancelled once pool, a *crew.Pool, will start
// nothing more of what it had queued: Stop has run everything and returns,
// or Shutdown's deadline has passed and its queue was dropped (a task a
// worker took just before may still start). The end of a parent given
// WithContext, which cancels the pool's own context while it runs on, does
// not cancel it.
var PoolEnded func(pool any) context.Context

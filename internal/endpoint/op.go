package endpoint

import (
	"sync"
	"sync/atomic"
)

// Op is what one operation keeps of its Endpoints: the addresses it
// tried, the origin its next attempt starts at, and what served it. A
// nil *Op keeps nothing. It is safe for concurrent use (a hedge's copies
// share it).
type Op struct {
	// Next is the index, in the origin's list of alternates, that the
	// next attempt starts at.
	Next  atomic.Int32
	mu    sync.Mutex
	tried []*Pool // the addresses the operation's attempts went to
	// origin and addr are the origin and address of its latest response.
	origin, addr string
}

// Tried returns the addresses op tried so far; a nil op has none.
func (op *Op) Tried() []*Pool {
	if op == nil {
		return nil
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.tried[:len(op.tried):len(op.tried)]
}

// AddTried adds p to the addresses op tried.
func (op *Op) AddTried(p *Pool) {
	if op == nil {
		return
	}
	op.mu.Lock()
	op.tried = append(op.tried, p)
	op.mu.Unlock()
}

// Served records the origin and the address (each when not empty) that
// served the operation's latest response.
func (op *Op) Served(origin, addr string) {
	if op == nil {
		return
	}
	op.mu.Lock()
	if origin != "" {
		op.origin = origin
	}
	if addr != "" {
		op.addr = addr
	}
	op.mu.Unlock()
}

// ServedBy returns the origin and address that Served recorded last.
func (op *Op) ServedBy() (origin, addr string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.origin, op.addr
}

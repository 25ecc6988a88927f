// Package verdict keeps one attempt's verdict where every layer of a
// stack finds it, so that the attempt is judged once (by policy.Judge)
// and read by the rest.
package verdict

import (
	"net/http"
	"sync/atomic"

	"github.com/sturdyhttp/sturdy/policy"
)

// Kept is one attempt's verdict and the outcome it judged. It is
// written once: by the caller of Keep that wins it from empty; the
// outcome (resp, err) is kept beside the verdict, so that a layer whose
// outcome differs (one that a layer between changed) judges its own.
// Its zero value is empty and ready to use; it is safe for concurrent
// use.
type Kept struct {
	state atomic.Uint32 // empty, writing, done
	resp  *http.Response
	err   error
	v     policy.Verdict
}

const (
	empty = iota
	writing
	done
)

// Load returns the verdict kept for the outcome (resp, err); false when
// none is, or the one kept is another outcome's. A nil k keeps nothing.
func (k *Kept) Load(resp *http.Response, err error) (policy.Verdict, bool) {
	if k == nil || k.state.Load() != done || k.resp != resp || !sameError(k.err, err) {
		return policy.Verdict{}, false
	}
	return k.v, true
}

// Keep keeps v as the verdict of the outcome (resp, err), unless a
// verdict is kept already. A nil k keeps nothing.
func (k *Kept) Keep(resp *http.Response, err error, v policy.Verdict) {
	if k != nil && k.state.CompareAndSwap(empty, writing) {
		k.resp, k.err, k.v = resp, err, v
		k.state.Store(done)
	}
}

// sameError reports whether a and b are the same error value. Errors
// that cannot be compared (== panics on them) are never the same.
func sameError(a, b error) (same bool) {
	if a == nil || b == nil {
		return a == b
	}
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

package idempotency

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Store keeps, per key, either an in-flight lock or a completed response.
// [Handler] makes one call to Begin for every keyed request, and for the
// request that acquired the key one more call, Complete or Release, once
// the inner handler has returned.
//
// The methods are shaped so that a store shared by many servers can do
// each in one round trip. With Redis, for example:
//
//   - Begin: a Lua script that does SET key {fingerprint, token} NX PX
//     lockTTL and, when the key exists, returns its value.
//   - Complete: a Lua script that replaces the value with {fingerprint,
//     response} and sets PX ttl, only if the key still holds token.
//   - Release: a Lua script that deletes the key only if it still holds
//     token.
//
// An in-flight lock expires after the lockTTL given to Begin, so a server
// that crashes while it holds a key does not hold it forever: once the
// lock has expired, the next request with the key acquires it and runs.
// Choose a lockTTL longer than the slowest handler, or a slow first
// request and its retry may both run.
//
// Keys given to a Store are opaque strings made by [Handler] from the
// scope and the client's key. Implementations must be safe for concurrent
// use by multiple goroutines.
type Store interface {
	// Begin looks key up and, when it is absent (or has expired), marks
	// it in flight for lockTTL on behalf of a request whose fingerprint
	// is fingerprint, all in one atomic step. The result says which of
	// the three cases held; see [BeginResult].
	Begin(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (BeginResult, error)

	// Complete stores resp under key for ttl, in place of the in-flight
	// lock identified by token (from [BeginResult.Token]), together with
	// the fingerprint given to Begin. A nil resp marks the key completed
	// without a response: Begin then answers Completed with a nil
	// Response, and the key is not run again until ttl passes. When the key
	// no longer holds that lock (it expired and another request took the
	// key), Complete stores nothing and returns an error that wraps
	// [ErrLockLost]. A store that will not keep resp (too large, full)
	// leaves the lock in place and returns an error, wrapping [ErrTooLarge]
	// when resp is too large; [Handler] then completes the key with a nil
	// resp, which a store must accept. Complete must not modify resp and
	// may keep it.
	Complete(ctx context.Context, key, token string, resp *StoredResponse, ttl time.Duration) error

	// Release removes the in-flight lock identified by token, so that the
	// next request with key runs. When the key no longer holds that lock,
	// Release changes nothing and returns an error that wraps
	// [ErrLockLost].
	Release(ctx context.Context, key, token string) error
}

// State is what [Store.Begin] found under a key.
type State int

const (
	// Acquired means the key was free and is now locked for the caller,
	// who must run the request and then call Complete or Release.
	Acquired State = iota + 1
	// InFlight means another request holds the key and has not finished.
	InFlight
	// Completed means a response is stored under the key.
	Completed
)

// String returns the state's name: "acquired", "in flight" or "completed".
func (s State) String() string {
	switch s {
	case Acquired:
		return "acquired"
	case InFlight:
		return "in flight"
	case Completed:
		return "completed"
	}
	return "invalid"
}

// BeginResult is the result of [Store.Begin].
type BeginResult struct {
	// State says whether the key was acquired, is in flight or is
	// completed.
	State State
	// Token identifies the caller's lock when State is Acquired; it is
	// passed to Complete or Release. Empty otherwise.
	Token string
	// Fingerprint is the fingerprint of the request that holds the key,
	// when State is InFlight or Completed.
	Fingerprint string
	// Response is the stored response when State is Completed; nil when
	// the key was completed without one (see [Store.Complete]). It is
	// shared: callers must not modify it.
	Response *StoredResponse
}

// StoredResponse is a response kept for replay.
type StoredResponse struct {
	// Status is the response's status code.
	Status int
	// Header holds the response headers, without hop-by-hop headers,
	// Date and trailers.
	Header http.Header
	// Body is the whole response body.
	Body []byte
}

// Size estimates the heap memory resp holds, in bytes: its body's
// capacity, the lengths of header names and values, and the fixed costs of
// the struct, the header map and its slices, as measured with
// runtime.ReadMemStats for Go 1.26. Stores count it against their limits.
func (resp *StoredResponse) Size() int64 {
	if resp == nil {
		return 0
	}
	n := int64(48 + cap(resp.Body))
	switch k := len(resp.Header); {
	case resp.Header == nil:
	case k <= 8: // one group of slots
		n += 400
	default:
		n += 90 * int64(k)
	}
	for k, vs := range resp.Header {
		n += int64(len(k) + 16*cap(vs))
		for _, v := range vs {
			n += int64(len(v))
		}
	}
	return n
}

var (
	// ErrLockLost is returned by [Store.Complete] and [Store.Release]
	// when the key no longer holds the caller's in-flight lock.
	ErrLockLost = errors.New("idempotency: in-flight lock lost")

	// ErrTooLarge is returned by [Store.Complete] when a response is too
	// large to be stored. The lock stays in place.
	ErrTooLarge = errors.New("idempotency: response too large to store")

	// ErrStoreFull is returned by [MemoryStore] when no room can be made
	// for a new entry because the rest are in-flight locks, which are
	// never evicted.
	ErrStoreFull = errors.New("idempotency: store full")
)

package idempotency

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// Defaults of [MemoryStoreOptions], used where a field is zero.
const (
	DefaultMaxEntries = 100_000  // keys held, in flight or completed
	DefaultMaxBytes   = 64 << 20 // 64 MiB, as counted by MemoryStats.Bytes
)

// entryOverhead is what [MemoryStore] counts for one entry on top of its
// key, fingerprint, token and response ([StoredResponse.Size]): the entry
// struct (112 bytes), its map slot (about 48) and the token's allocation
// (16). TestMemoryStoreHeap checks the sum against the heap.
const entryOverhead = 176

// MemoryStoreOptions configures a [MemoryStore]. The zero value is ready to
// use.
type MemoryStoreOptions struct {
	// MaxEntries bounds the number of keys kept, in flight or completed.
	// Zero or negative means [DefaultMaxEntries] (100 000).
	MaxEntries int
	// MaxBytes bounds the bytes kept, as counted by [MemoryStats.Bytes].
	// Zero or negative means [DefaultMaxBytes] (64 MiB).
	MaxBytes int64
}

// MemoryStore is a [Store] that keeps everything in the memory of one
// process. It is the default store of [Handler], right for a single
// server; servers behind a load balancer need a shared store.
//
// Its memory is bounded by a number of entries and a number of bytes
// (keys, fingerprints, response headers and bodies, and a fixed overhead
// per entry, see [MemoryStats]). It never forgets a key before its TTL:
// that would let [Handler] run the key again. To make room it drops
// expired entries first. When bytes run short it then drops the kept
// responses, oldest first, keeping each key as a small tombstone that
// answers Begin as completed without a response (Handler then answers a
// retry 422 of type [TypeNotKept], never a second run). When every entry
// is live (MaxEntries keys within their TTL, or bytes full of locks and
// tombstones), Begin refuses a new key with [ErrStoreFull]: Handler
// answers it 503 Service Unavailable with Retry-After, without running
// the request. Size MaxEntries for the keys one TTL brings. A response
// larger than MaxBytes is never stored ([ErrTooLarge]).
//
// Expired entries are removed as they are met and when room is needed;
// no goroutine is started. The context arguments of its methods are not
// used: nothing in it blocks but a mutex. A MemoryStore is safe for concurrent use by
// multiple goroutines. Create one with [NewMemoryStore].
type MemoryStore struct {
	maxEntries int
	maxBytes   int64

	mu        sync.Mutex
	entries   map[string]*memEntry
	pending   memList // in-flight locks, oldest first
	done      memList // completed responses, oldest first
	tombs     memList // completed keys whose response was dropped for room (or never kept)
	bytes     int64
	seq       uint64
	evictions uint64
}

// MemoryStats is a snapshot of a [MemoryStore]'s accounting.
type MemoryStats struct {
	// Entries is the number of keys held, in flight or completed,
	// expired ones not yet removed included.
	Entries int
	// InFlight is the number of in-flight locks among them.
	InFlight int
	// Bytes is the memory the entries are counted as using: for each,
	// the lengths of its key, fingerprint and token, the size of its
	// response ([StoredResponse.Size]), and a fixed overhead for the
	// bookkeeping (176 bytes per entry). It is an estimate of the heap the
	// entries hold, checked to be within 25% of it in the tests.
	Bytes int64
	// Evictions counts completed responses dropped before they expired
	// to make room for new entries. Their keys stay, as tombstones.
	Evictions uint64
}

type memEntry struct {
	key, fingerprint, token string
	resp                    *StoredResponse // nil while in flight
	expires                 time.Time
	size                    int64
	prev, next              *memEntry
	list                    *memList
}

// NewMemoryStore returns an empty store bounded by o.
func NewMemoryStore(o MemoryStoreOptions) *MemoryStore {
	s := &MemoryStore{
		maxEntries: o.MaxEntries,
		maxBytes:   o.MaxBytes,
		entries:    make(map[string]*memEntry),
	}
	if s.maxEntries <= 0 {
		s.maxEntries = DefaultMaxEntries
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxBytes
	}
	return s
}

// Begin implements [Store]. It fails with [ErrStoreFull] when no room can
// be made for a new lock, and with [ErrTooLarge] when the key and
// fingerprint alone exceed MaxBytes.
func (s *MemoryStore) Begin(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (BeginResult, error) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[key]; e != nil {
		if now.Before(e.expires) {
			switch e.resp {
			case nil:
				return BeginResult{State: InFlight, Fingerprint: e.fingerprint}, nil
			case notKept:
				return BeginResult{State: Completed, Fingerprint: e.fingerprint}, nil
			}
			return BeginResult{State: Completed, Fingerprint: e.fingerprint, Response: e.resp}, nil
		}
		s.remove(e)
	}
	s.seq++
	token := strconv.FormatUint(s.seq, 36)
	size := int64(entryOverhead + len(key) + len(fingerprint) + len(token))
	if size > s.maxBytes {
		return BeginResult{}, ErrTooLarge
	}
	if !s.makeRoom(now, 1, size) {
		return BeginResult{}, ErrStoreFull
	}
	e := &memEntry{key: key, fingerprint: fingerprint, token: token, expires: now.Add(lockTTL), size: size}
	s.entries[key] = e
	s.bytes += size
	s.pending.pushBack(e)
	return BeginResult{State: Acquired, Token: token}, nil
}

// Complete implements [Store]. A nil resp marks the key completed without
// a response. A response that does not fit in MaxBytes, even after evicting
// every completed response, is not stored: the lock stays, and the error
// is [ErrTooLarge] or [ErrStoreFull]. A nil resp always fits, since it
// takes no more room than the lock.
func (s *MemoryStore) Complete(ctx context.Context, key, token string, resp *StoredResponse, ttl time.Duration) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil || e.resp != nil || e.token != token {
		return ErrLockLost
	}
	size := int64(entryOverhead+len(key)+len(e.fingerprint)+len(token)) + resp.Size()
	if size > s.maxBytes {
		return ErrTooLarge
	}
	// The lock's own bytes are e's already; make room for the rest.
	if !s.makeRoom(now, 0, size-e.size) {
		return ErrStoreFull
	}
	if s.entries[key] != e { // the lock expired, and making room removed it
		return ErrLockLost
	}
	s.remove(e)
	if resp == nil {
		resp = notKept
	}
	e.resp, e.expires, e.size = resp, now.Add(ttl), size
	s.entries[key] = e
	s.bytes += size
	if resp == notKept {
		s.tombs.pushBack(e)
	} else {
		s.done.pushBack(e)
	}
	return nil
}

// notKept is the response of an entry completed without one.
var notKept = &StoredResponse{}

// Release implements [Store].
func (s *MemoryStore) Release(ctx context.Context, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil || e.resp != nil || e.token != token {
		return ErrLockLost
	}
	s.remove(e)
	return nil
}

// Stats returns a snapshot of the store's accounting.
func (s *MemoryStore) Stats() MemoryStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return MemoryStats{
		Entries:   len(s.entries),
		InFlight:  s.pending.len,
		Bytes:     s.bytes,
		Evictions: s.evictions,
	}
}

// makeRoom makes room for n more entries of size more bytes, and
// reports whether they fit: it removes expired entries, then, while
// bytes are short, drops the responses of completed entries, oldest
// first, keeping their keys as tombstones. No entry is removed before it
// expires: a key forgotten within its TTL could run twice.
func (s *MemoryStore) makeRoom(now time.Time, n int, size int64) bool {
	fits := func() bool {
		return len(s.entries)+n <= s.maxEntries && s.bytes+size <= s.maxBytes
	}
	if fits() {
		return true
	}
	// Each list is in the order of its entries' start, which is expiry
	// order when every entry has the same TTL; stop at the first live one.
	for _, l := range []*memList{&s.pending, &s.done, &s.tombs} {
		for e := l.head; e != nil && !now.Before(e.expires); e = l.head {
			s.remove(e)
		}
	}
	if len(s.entries)+n > s.maxEntries {
		return false // a tombstone is an entry too
	}
	for e := s.done.head; e != nil && !fits(); e = s.done.head {
		s.evictions++
		s.tombstone(e)
	}
	return fits()
}

// tombstone drops a completed entry's response and keeps its key, which
// Begin then reports completed without a response.
func (s *MemoryStore) tombstone(e *memEntry) {
	s.remove(e)
	e.resp = notKept
	e.size = int64(entryOverhead + len(e.key) + len(e.fingerprint) + len(e.token))
	s.entries[e.key] = e
	s.bytes += e.size
	s.tombs.pushBack(e)
}

func (s *MemoryStore) remove(e *memEntry) {
	if s.entries[e.key] == e {
		delete(s.entries, e.key)
	}
	if e.list != nil {
		e.list.unlink(e)
		s.bytes -= e.size
	}
}

// memList is an intrusive doubly linked list of entries, oldest first.
type memList struct {
	head, tail *memEntry
	len        int
}

func (l *memList) pushBack(e *memEntry) {
	e.list, e.prev, e.next = l, l.tail, nil
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
	l.len++
}

func (l *memList) unlink(e *memEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next, e.list = nil, nil, nil
	l.len--
}

package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var testCtx = context.Background()

func resp(body string) *StoredResponse {
	return &StoredResponse{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}
}

// check verifies the store's accounting against its contents.
func check(t *testing.T, s *MemoryStore) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var bytes int64
	n := 0
	for _, l := range []*memList{&s.pending, &s.done, &s.tombs} {
		for e := l.head; e != nil; e = e.next {
			if (l == &s.tombs) != (e.resp == notKept) {
				t.Errorf("entry %q with response %v listed in the wrong list", e.key, e.resp)
			}
			n++
			bytes += e.size
			if s.entries[e.key] != e {
				t.Errorf("listed entry %q is not in the map", e.key)
			}
			r := e.resp
			if r == notKept { // shared, so counted for none
				r = nil
			}
			want := int64(entryOverhead+len(e.key)+len(e.fingerprint)+len(e.token)) + r.Size()
			if e.size != want {
				t.Errorf("entry %q size = %d, want %d", e.key, e.size, want)
			}
		}
	}
	if n != len(s.entries) {
		t.Errorf("listed entries = %d, want %d in the map", n, len(s.entries))
	}
	if bytes != s.bytes {
		t.Errorf("bytes = %d, want %d summed over entries", s.bytes, bytes)
	}
	if len(s.entries) > s.maxEntries || s.bytes > s.maxBytes {
		t.Errorf("store holds %d entries, %d bytes; limits %d, %d", len(s.entries), s.bytes, s.maxEntries, s.maxBytes)
	}
}

func TestMemoryStoreLifecycle(t *testing.T) {
	s := NewMemoryStore(MemoryStoreOptions{})
	r, err := s.Begin(testCtx, "k", "fp1", time.Minute)
	if err != nil || r.State != Acquired || r.Token == "" {
		t.Fatalf("first Begin = %+v, %v; want Acquired with a token", r, err)
	}
	tok := r.Token

	r, err = s.Begin(testCtx, "k", "fp2", time.Minute)
	if err != nil || r.State != InFlight || r.Fingerprint != "fp1" || r.Token != "" {
		t.Errorf("Begin while in flight = %+v, %v; want InFlight, fingerprint fp1, no token", r, err)
	}
	if err := s.Complete(testCtx, "k", tok+"x", resp("no"), time.Hour); !errors.Is(err, ErrLockLost) {
		t.Errorf("Complete with a wrong token = %v, want ErrLockLost", err)
	}
	if err := s.Release(testCtx, "k", tok+"x"); !errors.Is(err, ErrLockLost) {
		t.Errorf("Release with a wrong token = %v, want ErrLockLost", err)
	}
	want := resp(`{"id":1}`)
	if err := s.Complete(testCtx, "k", tok, want, time.Hour); err != nil {
		t.Fatalf("Complete = %v, want nil", err)
	}
	r, err = s.Begin(testCtx, "k", "fp1", time.Minute)
	if err != nil || r.State != Completed || r.Fingerprint != "fp1" || r.Response != want {
		t.Errorf("Begin after Complete = %+v, %v; want Completed, fp1, the stored response", r, err)
	}
	if err := s.Complete(testCtx, "k", tok, resp("again"), time.Hour); !errors.Is(err, ErrLockLost) {
		t.Errorf("second Complete = %v, want ErrLockLost", err)
	}
	if err := s.Release(testCtx, "k", tok); !errors.Is(err, ErrLockLost) {
		t.Errorf("Release after Complete = %v, want ErrLockLost", err)
	}
	if got := s.Stats(); got.Entries != 1 || got.InFlight != 0 {
		t.Errorf("Stats = %+v, want 1 entry, 0 in flight", got)
	}
	check(t, s)
}

func TestMemoryStoreRelease(t *testing.T) {
	s := NewMemoryStore(MemoryStoreOptions{})
	r, _ := s.Begin(testCtx, "k", "fp", time.Minute)
	if err := s.Release(testCtx, "k", r.Token); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if got := s.Stats(); got != (MemoryStats{}) {
		t.Errorf("Stats after Release = %+v, want zero", got)
	}
	r2, err := s.Begin(testCtx, "k", "other", time.Minute)
	if err != nil || r2.State != Acquired || r2.Token == r.Token {
		t.Errorf("Begin after Release = %+v, %v; want Acquired with a new token", r2, err)
	}
	check(t, s)
}

func TestMemoryStoreExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewMemoryStore(MemoryStoreOptions{})
		r, _ := s.Begin(testCtx, "k", "fp", time.Minute)
		if err := s.Complete(testCtx, "k", r.Token, resp("x"), 24*time.Hour); err != nil {
			t.Fatal(err)
		}
		time.Sleep(24*time.Hour - time.Nanosecond)
		if r, _ := s.Begin(testCtx, "k", "fp", time.Minute); r.State != Completed {
			t.Errorf("state 1ns before the TTL = %v, want completed", r.State)
		}
		time.Sleep(time.Nanosecond)
		if r, _ := s.Begin(testCtx, "k", "fp", time.Minute); r.State != Acquired {
			t.Errorf("state at the TTL = %v, want acquired", r.State)
		}
		check(t, s)
	})
}

func TestMemoryStoreLockExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewMemoryStore(MemoryStoreOptions{})
		first, _ := s.Begin(testCtx, "k", "fp", 5*time.Minute)
		time.Sleep(5*time.Minute - time.Nanosecond)
		if r, _ := s.Begin(testCtx, "k", "fp", 5*time.Minute); r.State != InFlight {
			t.Errorf("state 1ns before the lock TTL = %v, want in flight", r.State)
		}
		time.Sleep(time.Nanosecond)
		second, _ := s.Begin(testCtx, "k", "fp", 5*time.Minute)
		if second.State != Acquired {
			t.Fatalf("state at the lock TTL = %v, want acquired", second.State)
		}
		// The crashed (or slow) first holder can no longer write.
		if err := s.Complete(testCtx, "k", first.Token, resp("stale"), time.Hour); !errors.Is(err, ErrLockLost) {
			t.Errorf("Complete by the expired holder = %v, want ErrLockLost", err)
		}
		if err := s.Complete(testCtx, "k", second.Token, resp("fresh"), time.Hour); err != nil {
			t.Errorf("Complete by the new holder = %v, want nil", err)
		}
		r, _ := s.Begin(testCtx, "k", "fp", time.Minute)
		if got, want := string(r.Response.Body), "fresh"; got != want {
			t.Errorf("stored body = %q, want %q", got, want)
		}
		check(t, s)
	})
}

func complete(t *testing.T, s *MemoryStore, key, body string) {
	t.Helper()
	r, err := s.Begin(testCtx, key, "fp", time.Minute)
	if err != nil || r.State != Acquired {
		t.Fatalf("Begin(%q) = %+v, %v; want Acquired", key, r, err)
	}
	if err := s.Complete(testCtx, key, r.Token, resp(body), time.Hour); err != nil {
		t.Fatalf("Complete(%q) = %v", key, err)
	}
}

// A store with MaxEntries keys within their TTL refuses a new key rather
// than forget one: a forgotten key would let Handler run it twice.
func TestMemoryStoreFullRefusesNewKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewMemoryStore(MemoryStoreOptions{MaxEntries: 3})
		complete(t, s, "a", "1")
		complete(t, s, "b", "2")
		complete(t, s, "c", "3")
		if r, err := s.Begin(testCtx, "d", "fp", time.Minute); !errors.Is(err, ErrStoreFull) {
			t.Errorf("Begin(d) on a full store = %v, %v; want ErrStoreFull", r.State, err)
		}
		for _, k := range []string{"a", "b", "c"} {
			if r, err := s.Begin(testCtx, k, "fp", time.Minute); err != nil || r.State != Completed || r.Response == nil {
				t.Errorf("Begin(%q) = %v, %v, %v; want completed with its response", k, r.State, r.Response, err)
			}
		}
		if got := s.Stats(); got.Entries != 3 || got.Evictions != 0 {
			t.Errorf("Stats = %+v, want 3 entries, 0 evictions", got)
		}
		// Once the keys expire (complete keeps them an hour), room is made.
		time.Sleep(time.Hour)
		if r, err := s.Begin(testCtx, "d", "fp", time.Minute); err != nil || r.State != Acquired {
			t.Errorf("Begin(d) after the TTL = %v, %v; want Acquired", r.State, err)
		}
		check(t, s)
	})
}

// When bytes run short, the oldest responses are dropped first, and their
// keys stay as tombstones: completed, without a response.
func TestMemoryStoreTombstonesOldestFirst(t *testing.T) {
	body := string(make([]byte, 1000))
	// Each response is counted 1,672 bytes, each tombstone or lock 180:
	// three responses, a lock and two tombstones fit.
	s := NewMemoryStore(MemoryStoreOptions{MaxBytes: 5600})
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		complete(t, s, k, body)
	}
	for _, tt := range []struct {
		key      string
		response bool
	}{{"a", false}, {"b", false}, {"c", true}, {"d", true}, {"e", true}} {
		r, err := s.Begin(testCtx, tt.key, "fp", time.Minute)
		if err != nil || r.State != Completed || (r.Response != nil) != tt.response {
			t.Errorf("Begin(%q) = %v, response %v, %v; want completed, response %v", tt.key, r.State, r.Response != nil, err, tt.response)
		}
	}
	if got := s.Stats(); got.Entries != 5 || got.Evictions != 2 {
		t.Errorf("Stats = %+v, want 5 entries, 2 evictions", got)
	}
	check(t, s)
}

func TestMemoryStoreExpiredGoBeforeLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewMemoryStore(MemoryStoreOptions{MaxEntries: 2})
		r, _ := s.Begin(testCtx, "old", "fp", time.Minute)
		s.Complete(testCtx, "old", r.Token, resp("x"), time.Minute)
		r, _ = s.Begin(testCtx, "new", "fp", time.Minute)
		s.Complete(testCtx, "new", r.Token, resp("y"), time.Hour)
		time.Sleep(time.Minute)
		complete(t, s, "newer", "z")
		if got := s.Stats(); got.Entries != 2 || got.Evictions != 0 {
			t.Errorf("Stats = %+v, want 2 entries, 0 evictions (the expired one went)", got)
		}
		if r, _ := s.Begin(testCtx, "new", "fp", time.Minute); r.State != Completed {
			t.Errorf("live entry state = %v, want completed", r.State)
		}
	})
}

// A response that finds the store full of locks is not stored, and its
// lock stays; completing the key without a response takes no more room
// than the lock, so it always fits.
func TestMemoryStoreFullKeepsLock(t *testing.T) {
	s := NewMemoryStore(MemoryStoreOptions{MaxBytes: 2048})
	var tokens []string
	for i := 0; ; i++ {
		r, err := s.Begin(testCtx, strconv.Itoa(i), "fp", time.Minute)
		if err != nil {
			break
		}
		tokens = append(tokens, r.Token)
	}
	err := s.Complete(testCtx, "0", tokens[0], resp("a response that does not fit"), time.Hour)
	if !errors.Is(err, ErrStoreFull) {
		t.Fatalf("Complete on a store full of locks = %v, want ErrStoreFull", err)
	}
	if r, _ := s.Begin(testCtx, "0", "fp", time.Minute); r.State != InFlight {
		t.Errorf("key after ErrStoreFull: state %v, want in flight (the lock stays)", r.State)
	}
	if err := s.Complete(testCtx, "0", tokens[0], nil, time.Hour); err != nil {
		t.Errorf("Complete without a response = %v, want nil", err)
	}
	if r, _ := s.Begin(testCtx, "0", "fp", time.Minute); r.State != Completed || r.Response != nil {
		t.Errorf("Begin = %v, %v; want completed, no response", r.State, r.Response)
	}
	check(t, s)
}

func TestMemoryStoreNeverEvictsLocks(t *testing.T) {
	s := NewMemoryStore(MemoryStoreOptions{MaxEntries: 2})
	s.Begin(testCtx, "a", "fp", time.Minute)
	s.Begin(testCtx, "b", "fp", time.Minute)
	if _, err := s.Begin(testCtx, "c", "fp", time.Minute); !errors.Is(err, ErrStoreFull) {
		t.Errorf("Begin on a store full of locks = %v, want ErrStoreFull", err)
	}
	for _, k := range []string{"a", "b"} {
		if r, _ := s.Begin(testCtx, k, "fp", time.Minute); r.State != InFlight {
			t.Errorf("lock %q state = %v, want in flight", k, r.State)
		}
	}
	check(t, s)
}

func TestMemoryStoreTooLarge(t *testing.T) {
	s := NewMemoryStore(MemoryStoreOptions{MaxBytes: 4096})
	complete(t, s, "small", "ok")
	before := s.Stats()
	r, _ := s.Begin(testCtx, "big", "fp", time.Minute)
	err := s.Complete(testCtx, "big", r.Token, resp(string(make([]byte, 4096))), time.Hour)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Complete of a response over MaxBytes = %v, want ErrTooLarge", err)
	}
	if r, _ := s.Begin(testCtx, "big", "fp", time.Minute); r.State != InFlight {
		t.Errorf("key after ErrTooLarge: state %v, want in flight (the lock stays)", r.State)
	}
	// The Handler then marks the key completed without its response.
	if err := s.Complete(testCtx, "big", r.Token, nil, time.Hour); err != nil {
		t.Fatalf("Complete without a response = %v, want nil", err)
	}
	if r, _ := s.Begin(testCtx, "big", "fp", time.Minute); r.State != Completed || r.Response != nil {
		t.Errorf("key completed without a response: Begin = %v, %v; want completed, no response", r.State, r.Response)
	}
	if r, _ := s.Begin(testCtx, "small", "fp", time.Minute); r.State != Completed {
		t.Errorf("other entry state = %v, want completed (not evicted for a response that cannot fit)", r.State)
	}
	if got := s.Stats(); got.Evictions != before.Evictions {
		t.Errorf("evictions = %d, want %d", got.Evictions, before.Evictions)
	}
	check(t, s)
}

// TestMemoryStoreBounds stores 100 000 distinct keys with responses of
// varied size into a store bounded well below that, checking its limits
// after every step and its accounting against its contents at the end.
func TestMemoryStoreBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys = 100_000
		o := MemoryStoreOptions{MaxEntries: 5_000, MaxBytes: 1 << 20}
		s := NewMemoryStore(o)
		body := make([]byte, 2000)
		for i := range keys {
			// A key a 20 ms for a TTL of a minute: 3,000 keys live, whose
			// responses do not all fit.
			time.Sleep(20 * time.Millisecond)
			key := "key-" + strconv.Itoa(i)
			r, err := s.Begin(testCtx, key, "fp-"+key, time.Minute)
			if err != nil || r.State != Acquired {
				t.Fatalf("Begin(%q) = %+v, %v; want Acquired", key, r, err)
			}
			switch i % 10 {
			case 0:
				s.Release(testCtx, key, r.Token)
			default:
				n := (i * 7919) % len(body)
				if err := s.Complete(testCtx, key, r.Token, &StoredResponse{Status: 200, Body: body[:n]}, time.Minute); err != nil {
					t.Fatalf("Complete(%q) = %v", key, err)
				}
			}
			if st := s.Stats(); st.Entries > o.MaxEntries || st.Bytes > o.MaxBytes {
				t.Fatalf("after %d keys: %d entries, %d bytes; limits %d, %d", i+1, st.Entries, st.Bytes, o.MaxEntries, o.MaxBytes)
			}
			// No key is forgotten within its TTL: the one completed 59 s ago is there.
			if j := i - 59_000/20; j >= 0 && j%10 != 0 {
				old := "key-" + strconv.Itoa(j)
				if r, _ := s.Begin(testCtx, old, "fp-"+old, time.Minute); r.State != Completed {
					t.Fatalf("after %d keys, key %q: state %v, want completed", i+1, old, r.State)
				}
			}
		}
		check(t, s)
		st := s.Stats()
		t.Logf("after %d keys: %+v", keys, st)
		if st.Evictions < keys/2 {
			t.Errorf("evictions = %d, want most of the %d responses dropped", st.Evictions, keys)
		}
		// The newest responses are still there.
		last := "key-" + strconv.Itoa(keys-1)
		if r, _ := s.Begin(testCtx, last, "fp-"+last, time.Minute); r.State != Completed || r.Response == nil {
			t.Errorf("newest key state = %v, response %v; want completed with its response", r.State, r.Response != nil)
		}
	})
}

// TestMemoryStoreHeap checks that the store's byte accounting is honest:
// the heap it really holds for 100 000 entries is within 25% of what it
// counts.
func TestMemoryStoreHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 100 000 entries")
	}
	const n = 100_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewMemoryStore(MemoryStoreOptions{MaxEntries: n, MaxBytes: 1 << 30})
	for i := range n {
		key := fmt.Sprintf("scope-%06d\x00%08x-1234-4abc-8def-0123456789ab", i%1000, i)
		fp := fmt.Sprintf("%064x", i)
		r, _ := s.Begin(testCtx, key, fp, time.Minute)
		s.Complete(testCtx, key, r.Token, &StoredResponse{
			Status: 201,
			Header: http.Header{"Content-Type": {"application/json"}},
			Body:   fmt.Appendf(nil, `{"id":"ch_%08d","amount":1000,"currency":"eur"}`, i),
		}, time.Hour)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	counted := s.Stats().Bytes
	t.Logf("%d entries: heap %d bytes (%d per entry), counted %d (%d per entry)", n, heap, heap/n, counted, counted/n)
	if ratio := float64(heap) / float64(counted); ratio < 0.75 || ratio > 1.25 {
		t.Errorf("heap/counted = %.2f, want within 0.75..1.25", ratio)
	}
	runtime.KeepAlive(s)
}

// TestMemoryStoreConcurrent races many goroutines on few keys: each key
// is acquired exactly once.
func TestMemoryStoreConcurrent(t *testing.T) {
	s := NewMemoryStore(MemoryStoreOptions{MaxEntries: 100})
	const workers, keys = 8, 50
	var mu sync.Mutex
	acquired := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range keys {
				key := strconv.Itoa((i + w) % keys)
				r, err := s.Begin(testCtx, key, "fp", time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				if r.State == Acquired {
					mu.Lock()
					acquired[key]++
					mu.Unlock()
					s.Complete(testCtx, key, r.Token, resp(key), time.Hour)
				}
				s.Stats()
			}
		})
	}
	wg.Wait()
	for i := range keys {
		if got := acquired[strconv.Itoa(i)]; got != 1 {
			t.Errorf("key %d acquired %d times, want 1", i, got)
		}
	}
	check(t, s)
}

package fleet_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
	"github.com/sturdyhttp/sturdy/idempotency"
)

// warmUp makes a first Begin of key succeed, trying again: the first call
// dials and loads the script, and on a loaded machine (-race, other
// builds) that may take longer than a test's short store Timeout.
func warmUp(t *testing.T, s *fleet.IdempotencyStore, key string) {
	t.Helper()
	var err error
	for range 50 {
		if _, err = s.Begin(context.Background(), key, "fp", time.Minute); err == nil {
			return
		}
	}
	t.Fatal(err)
}

func storedResp(body string) *idempotency.StoredResponse {
	return &idempotency.StoredResponse{
		Status: 201,
		Header: map[string][]string{"Content-Type": {"application/json"}, "X-Two": {"a", ""}},
		Body:   []byte(body),
	}
}

func TestIdempotencyStoreLifecycle(t *testing.T) {
	srv := redisproc.StartT(t)
	s := fleet.NewIdempotencyStore(newClient(t, srv), fleet.IdempotencyOptions{})
	ctx := context.Background()

	r, err := s.Begin(ctx, "k", "fp1", time.Minute)
	if err != nil || r.State != idempotency.Acquired || r.Token == "" {
		t.Fatalf("first Begin = %+v, %v; want Acquired with a token", r, err)
	}
	tok := r.Token
	r, err = s.Begin(ctx, "k", "fp2", time.Minute)
	if err != nil || r.State != idempotency.InFlight || r.Fingerprint != "fp1" || r.Token != "" {
		t.Errorf("Begin while in flight = %+v, %v; want InFlight, fingerprint fp1, no token", r, err)
	}
	if err := s.Complete(ctx, "k", tok+"x", storedResp("no"), time.Hour); !errors.Is(err, idempotency.ErrLockLost) {
		t.Errorf("Complete with a wrong token = %v, want ErrLockLost", err)
	}
	if err := s.Release(ctx, "k", tok+"x"); !errors.Is(err, idempotency.ErrLockLost) {
		t.Errorf("Release with a wrong token = %v, want ErrLockLost", err)
	}
	want := storedResp(`{"id":1}`)
	if err := s.Complete(ctx, "k", tok, want, time.Hour); err != nil {
		t.Fatalf("Complete = %v, want nil", err)
	}
	r, err = s.Begin(ctx, "k", "fp1", time.Minute)
	if err != nil || r.State != idempotency.Completed || r.Fingerprint != "fp1" || !reflect.DeepEqual(r.Response, want) {
		t.Errorf("Begin after Complete = %+v, %v; want Completed, fp1, %+v", r, err, want)
	}
	if err := s.Complete(ctx, "k", tok, storedResp("again"), time.Hour); !errors.Is(err, idempotency.ErrLockLost) {
		t.Errorf("second Complete = %v, want ErrLockLost", err)
	}
	if err := s.Release(ctx, "k", tok); !errors.Is(err, idempotency.ErrLockLost) {
		t.Errorf("Release after Complete = %v, want ErrLockLost", err)
	}

	// Release frees the key for the next request.
	r, _ = s.Begin(ctx, "k2", "fp", time.Minute)
	if err := s.Release(ctx, "k2", r.Token); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if r, err := s.Begin(ctx, "k2", "fp", time.Minute); err != nil || r.State != idempotency.Acquired {
		t.Errorf("Begin after Release = %+v, %v; want Acquired", r, err)
	}
}

// A handler slower than the lock TTL loses its key to the next request and
// cannot overwrite what that request stores.
func TestIdempotencyStoreLockExpiry(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	s := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{})
	ctx := context.Background()

	slow, err := s.Begin(ctx, "k", "fp", 20*time.Millisecond)
	if err != nil || slow.State != idempotency.Acquired {
		t.Fatalf("Begin = %+v, %v; want Acquired", slow, err)
	}
	for n, _ := redisDo(t, c, "EXISTS", "sturdy:idem:{k}").AsInt64(); n != 0; n, _ = redisDo(t, c, "EXISTS", "sturdy:idem:{k}").AsInt64() {
		time.Sleep(5 * time.Millisecond) // until Redis has expired the lock
	}
	next, err := s.Begin(ctx, "k", "fp", time.Minute)
	if err != nil || next.State != idempotency.Acquired {
		t.Fatalf("Begin after the lock expired = %+v, %v; want Acquired", next, err)
	}
	if err := s.Complete(ctx, "k", slow.Token, storedResp("slow"), time.Hour); !errors.Is(err, idempotency.ErrLockLost) {
		t.Errorf("Complete by the slow handler = %v, want ErrLockLost", err)
	}
	if err := s.Release(ctx, "k", slow.Token); !errors.Is(err, idempotency.ErrLockLost) {
		t.Errorf("Release by the slow handler = %v, want ErrLockLost", err)
	}
	if err := s.Complete(ctx, "k", next.Token, storedResp("next"), time.Hour); err != nil {
		t.Fatalf("Complete by the next request = %v, want nil", err)
	}
	r, _ := s.Begin(ctx, "k", "fp", time.Minute)
	if r.State != idempotency.Completed || string(r.Response.Body) != "next" {
		t.Errorf("stored = %v %q, want completed %q", r.State, r.Response.Body, "next")
	}
}

func TestIdempotencyStoreTTL(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	s := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{Prefix: "p"})
	ctx := context.Background()
	r, _ := s.Begin(ctx, "k", "fp", 5*time.Minute)
	if ttl, _ := redisDo(t, c, "PTTL", "p:idem:{k}").AsInt64(); ttl <= 4*60*1000 || ttl > 5*60*1000 {
		t.Errorf("lock PTTL = %d ms, want within (240000, 300000]", ttl)
	}
	if err := s.Complete(ctx, "k", r.Token, storedResp("x"), 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl, _ := redisDo(t, c, "PTTL", "p:idem:{k}").AsInt64(); ttl <= 23*3600*1000 || ttl > 24*3600*1000 {
		t.Errorf("response PTTL = %d ms, want within (23h, 24h]", ttl)
	}
	if f, _ := redisDo(t, c, "HEXISTS", "p:idem:{k}", "tok").AsInt64(); f != 0 {
		t.Errorf("completed record still holds a token")
	}
}

func TestIdempotencyStoreTooLarge(t *testing.T) {
	srv := redisproc.StartT(t)
	s := fleet.NewIdempotencyStore(newClient(t, srv), fleet.IdempotencyOptions{MaxStoredBytes: 1000})
	ctx := context.Background()
	tests := []struct {
		body    int
		wantErr error
	}{
		{body: 900, wantErr: nil},
		{body: 1000, wantErr: idempotency.ErrTooLarge},
	}
	for i, tt := range tests {
		key := fmt.Sprint("k", i)
		r, _ := s.Begin(ctx, key, "fp", time.Minute)
		err := s.Complete(ctx, key, r.Token, storedResp(strings.Repeat("x", tt.body)), time.Hour)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("Complete with a %d-byte body = %v, want %v", tt.body, err, tt.wantErr)
		}
		if tt.wantErr == nil {
			if r, _ := s.Begin(ctx, key, "fp", time.Minute); r.State != idempotency.Completed || r.Response == nil {
				t.Errorf("after a %d-byte body, Begin = %v with %v, want completed with the response", tt.body, r.State, r.Response)
			}
			continue
		}
		// The lock stays, and the handler completes the key without
		// the response: a retry is not run again.
		if r, _ := s.Begin(ctx, key, "fp", time.Minute); r.State != idempotency.InFlight {
			t.Errorf("after a %d-byte body, Begin = %v, want in flight (the lock stays)", tt.body, r.State)
		}
		if err := s.Complete(ctx, key, r.Token, nil, time.Hour); err != nil {
			t.Fatalf("Complete without a response = %v, want nil", err)
		}
		if r, err := s.Begin(ctx, key, "fp", time.Minute); err != nil || r.State != idempotency.Completed || r.Response != nil || r.Fingerprint != "fp" {
			t.Errorf("Begin after Complete without a response = %+v, %v; want completed, fingerprint fp, no response", r, err)
		}
		if err := s.Release(ctx, key, r.Token); !errors.Is(err, idempotency.ErrLockLost) {
			t.Errorf("Release of a completed key = %v, want ErrLockLost", err)
		}
	}
}

// Keys fleet did not write give an error that names them, never a panic.
func TestIdempotencyStoreMalformed(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	s := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{})
	tests := []struct {
		name  string
		setup []string
		want  error // nil: any error
	}{
		{"string", []string{"SET", "sturdy:idem:{k}", "hello"}, nil},
		{"list", []string{"RPUSH", "sturdy:idem:{k}", "a"}, nil},
		{"hash without fields of ours", []string{"HSET", "sturdy:idem:{k}", "other", "1"}, fleet.ErrMalformed},
		{"fingerprint alone", []string{"HSET", "sturdy:idem:{k}", "fp", "1"}, fleet.ErrMalformed},
		{"response garbage", []string{"HSET", "sturdy:idem:{k}", "fp", "1", "resp", "\x01\xff"}, fleet.ErrMalformed},
		{"response bad version", []string{"HSET", "sturdy:idem:{k}", "fp", "1", "resp", "\x07\xc8\x01\x00"}, fleet.ErrMalformed},
		{"header past the end", []string{"HSET", "sturdy:idem:{k}", "fp", "1", "resp", "\x01\xc8\x01\x01\x09ab"}, fleet.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			redisDo(t, c, "DEL", "sturdy:idem:{k}")
			redisDo(t, c, tt.setup...)
			r, err := s.Begin(context.Background(), "k", "1", time.Minute)
			if err == nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Begin = %+v, %v; want an error matching %v", r, err, tt.want)
			}
			if !strings.Contains(err.Error(), "sturdy:idem:{k}") {
				t.Errorf("error %q does not name the key", err)
			}
			if err := s.Release(context.Background(), "k", "tok"); err == nil {
				t.Errorf("Release on a malformed key = nil, want an error")
			}
		})
	}
}

// With Redis paused (it accepts but never answers) or gone, every call
// returns an error within the store's timeout.
func TestIdempotencyStoreRedisDown(t *testing.T) {
	srv := redisproc.StartT(t)
	s := fleet.NewIdempotencyStore(newClient(t, srv), fleet.IdempotencyOptions{Timeout: 50 * time.Millisecond})
	ctx := context.Background()
	warmUp(t, s, "warm")
	for _, step := range []struct {
		name string
		do   func()
	}{{"paused", srv.Pause}, {"killed", srv.Kill}} {
		step.do()
		start := time.Now()
		_, err := s.Begin(ctx, "k", "fp", time.Minute)
		if err == nil {
			t.Errorf("%s: Begin = nil error, want one", step.name)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: Begin took %v, want about the 50ms timeout", step.name, d)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var err error
	for range 100 { // the client reconnects on its own
		if _, err = s.Begin(ctx, "k", "fp", time.Minute); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("Begin after Redis came back = %v, want nil", err)
	}
}

// Two idempotency.Handlers, on two servers, share one Redis: 50 concurrent
// identical POSTs split between them run the side effect once; every other
// request is told it is in flight (409) or gets the first response back,
// byte for byte.
func TestIdempotencyTwoHandlers(t *testing.T) {
	srv := redisproc.StartT(t)
	var runs atomic.Int32
	release := make(chan struct{})
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		<-release // hold the first request until all 50 have arrived
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	})
	var servers [2]*httptest.Server
	for i := range servers {
		// Each server has its own client, as separate processes would.
		store := fleet.NewIdempotencyStore(newClient(t, srv), fleet.IdempotencyOptions{})
		servers[i] = httptest.NewServer(idempotency.Handler(charge, idempotency.HandlerOptions{Store: store}))
		defer servers[i].Close()
	}
	post := func(i int) (int, string, http.Header) {
		req, _ := http.NewRequest("POST", servers[i%2].URL+"/charges", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", "order-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, "", nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}

	const n = 50
	type result struct {
		status int
		body   string
	}
	results := make(chan result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			status, body, _ := post(i)
			results <- result{status, body}
		})
	}
	// All but the one holding the key are answered 409 while it runs.
	conflicts := 0
	for conflicts < n-1 {
		r := <-results
		if r.status != http.StatusConflict {
			t.Fatalf("while the first runs: status %d %q, want 409", r.status, r.body)
		}
		conflicts++
	}
	close(release)
	wg.Wait()
	close(results)
	first := <-results
	if first.status != http.StatusCreated || first.body != `{"charge":1}` {
		t.Errorf("first = %d %q, want 201 {\"charge\":1}", first.status, first.body)
	}
	// Later retries, on either server, replay it.
	for i := range 4 {
		status, body, h := post(i)
		if status != http.StatusCreated || body != first.body || h.Get(idempotency.ReplayedHeader) != "true" {
			t.Errorf("retry %d on server %d = %d %q (replayed %q), want 201 %q replayed", i, i%2, status, body, h.Get(idempotency.ReplayedHeader), first.body)
		}
	}
	if got := runs.Load(); got != 1 {
		t.Errorf("side effect ran %d times, want 1", got)
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte("\x01\xc8\x01\x00body"))
	f.Add([]byte("\x01\xc8\x01\x01\x01a\x02\x01b\x00"))
	f.Add(bytes.Repeat([]byte{0xff}, 12))
	f.Fuzz(func(t *testing.T, b []byte) {
		fleet.DecodeResponseForTest(string(b)) // must not panic
	})
}

// A Begin that times out on a slow Redis (the handler answers 503 and
// asks the client to come back in 1 s) leaves no lock behind: its script
// may run on Redis after the client gave up, and the lock it takes, whose
// token only the failed Begin knew, would refuse every retry with 409
// "still being processed" for the whole LockTTL (5 min by default),
// though nothing runs. Begin releases it. (Whether rueidis wrote the
// command before the timeout varies, so the test tries a few keys.)
func TestIdempotencyBeginTimeoutLeavesNoLock(t *testing.T) {
	redis := redisproc.StartT(t)
	store := fleet.NewIdempotencyStore(newClient(t, redis), fleet.IdempotencyOptions{Timeout: 100 * time.Millisecond})
	warmUp(t, store, "warm")
	c := newClient(t, redis)
	var runs atomic.Int32
	h := idempotency.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}), idempotency.HandlerOptions{Store: store, OnStoreError: func(*http.Request, error) {}})
	post := func(key string) int {
		req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	for i := range 5 {
		key := fmt.Sprintf("order-%d", i)
		redis.Pause()
		first := post(key)
		redis.Resume()
		if first != http.StatusServiceUnavailable {
			t.Fatalf("with Redis paused: %d, want 503", first)
		}
		// The client comes back after the Retry-After the 503 asked for
		// (1s): the lock, if the Begin took one, is gone by then. (Undone
		// every Timeout until Redis answers: on a loaded machine, that
		// may take a few hundred ms after Redis resumes.)
		time.Sleep(200 * time.Millisecond)
		lockedAfterResume, _ := redisDo(t, c, "HEXISTS", "sturdy:idem:{"+key+"}", "tok").AsInt64()
		time.Sleep(800 * time.Millisecond)
		before := runs.Load()
		if code := post(key); code != http.StatusCreated || runs.Load() != before+1 {
			pttl, _ := redisDo(t, c, "PTTL", "sturdy:idem:{"+key+"}").AsInt64()
			t.Fatalf("a Begin that failed (503) on %s: the retry 1s later got %d and ran the handler %d times (locked 200ms after Redis resumed: %v; PTTL now %dms); want it to run once (201)",
				key, code, runs.Load()-before, lockedAfterResume == 1, pttl)
		}
		if lockedAfterResume == 1 {
			t.Logf("%s: the failed Begin's lock was still there 200ms after Redis resumed, and gone 1s after", key)
		}
	}
}

// A Redis that stalls for longer than the store's timeout, twice over
// (SIGSTOP here; a fork, a slow script or a partition in production), must
// not leave behind the lock of a Begin that failed with 503. The Release
// sent once to undo it never got through: rueidis closed the Begin's
// connection at the timeout (or sent the Release on another of its
// connections), and the Release was an EVALSHA of a script Redis did not
// have, whose NOSCRIPT came back after its caller had given up. The Begin,
// already in Redis's socket buffer, ran when Redis resumed and held the key
// for the whole LockTTL (5 min): every retry got 409 "still being
// processed", though nothing ran.
func TestIdempotencyBeginTimeoutLongPauseLeavesNoLock(t *testing.T) {
	redis := redisproc.StartT(t)
	store := fleet.NewIdempotencyStore(newClient(t, redis), fleet.IdempotencyOptions{Timeout: 100 * time.Millisecond})
	for i := range 64 { // open each of rueidis's pipelines, so that the Begin is sent
		warmUp(t, store, fmt.Sprint("warm-", i))
	}
	c := newClient(t, redis)
	var runs atomic.Int32
	h := idempotency.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}), idempotency.HandlerOptions{Store: store, OnStoreError: func(*http.Request, error) {}})
	post := func() int {
		req := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", "order-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	redis.Pause()
	first := post()
	time.Sleep(500 * time.Millisecond) // the Begin and its Release both time out
	redis.Resume()
	if first != http.StatusServiceUnavailable {
		t.Fatalf("with Redis paused: %d, want 503", first)
	}
	time.Sleep(200 * time.Millisecond) // Redis runs what it was sent
	pttl, _ := redisDo(t, c, "PTTL", "sturdy:idem:{order-1}").AsInt64()
	if got, want := post(), http.StatusCreated; got != want {
		t.Errorf("retry after Redis resumed: %d, want %d (handler ran %d times; the failed Begin left the key locked, PTTL %dms)", got, want, runs.Load(), pttl)
	}
}

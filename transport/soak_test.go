package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"go.uber.org/goleak"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// The chaos soak: many concurrent clients send PUTs, POSTs, payments and
// streamed GETs through New to a server that, at random per request,
// answers well, fails, rate-limits, hangs, resets, truncates or dribbles.
// At the end it checks what sturdy promises, whatever the interleaving:
//
//   - every request body that reached the server is byte-identical to
//     what the caller sent (or, when the client went away mid-body, a
//     prefix of it);
//   - every response the caller read to its end is the one the server
//     meant for that caller;
//   - behind idempotency.Handler, in front of the payments emulator (its
//     host is listed in Idempotency.Hosts, so every charge is vouched for
//     and carries a key) the emulator ran at most once per key, every
//     logical charge happened at most once, and every success the caller
//     saw happened exactly once, under the charge id the caller was given;
//   - the echo server does not deduplicate, and nobody vouched for its
//     POSTs: none of them carries a key, and none was acted on twice
//     (a POST nobody vouched for is sent again only after an outcome
//     that proves the server did not act: a 429, a problem with
//     is_retriable: true, a connection never made);
//   - every attempt of an operation carried the same idempotency key;
//   - no operation, its response body included, outlived its deadline
//     (margin 0 on virtual time);
//   - every operation ended; open connections return to 0 on both sides;
//     no goroutine is left (synctest, goleak).
//
// Fault choices are a function of (seed, operation, arrival), so a seed
// reproduces them; the interleaving of operations is not reproducible
// (breakers, quotas and budgets are shared), which is the point: the
// properties must hold for any of them.
//
// Run longer with -soak.long (or STURDY_SOAK=long); change the seed with
// -soak.seed=N (or STURDY_SOAK_SEED=N).
var (
	soakLongFlag = flag.Bool("soak.long", false, "run the long chaos soak")
	soakSeedFlag = flag.Uint64("soak.seed", 0, "seed of the chaos soak (0: STURDY_SOAK_SEED or 1)")
)

func soakLong() bool { return *soakLongFlag || os.Getenv("STURDY_SOAK") == "long" }

func soakSeed() uint64 {
	if *soakSeedFlag != 0 {
		return *soakSeedFlag
	}
	if n, err := strconv.ParseUint(os.Getenv("STURDY_SOAK_SEED"), 10, 64); err == nil && n != 0 {
		return n
	}
	return 1
}

// soakKind is what an operation does.
type soakKind int

const (
	kindPut    soakKind = iota // PUT /objects/{id}: idempotent, random body
	kindPost                   // POST /echo/{id}: nobody vouches for it, random body; the server does not deduplicate
	kindCharge                 // POST /charges?op={id}: the payments emulator
	kindGet                    // GET /stream/{id}: random response body
)

var soakKindNames = [...]string{"PUT", "POST", "charge", "GET"}

// How a request body is handed to the client.
const (
	readerBytes    = iota // *bytes.Reader: NewRequest sets GetBody and the length
	readerStrings         // *strings.Reader: likewise
	readerBuffer          // *bytes.Buffer: likewise
	readerOnly            // a bare io.Reader: no GetBody, unknown length (chunked), buffered to replay
	readerGetBody         // a bare io.Reader with the caller's own GetBody and ContentLength
	readerNopClose        // io.NopCloser with ContentLength but no GetBody
	nReaders
)

var soakReaderNames = [...]string{"bytes.Reader", "strings.Reader", "bytes.Buffer", "bare reader", "own GetBody", "NopCloser+length"}

var soakContentTypes = [...]string{"application/octet-stream", "application/json", "text/plain; charset=iso-8859-1", "application/x-www-form-urlencoded"}

// soakFault is the server's answer to one request.
type soakFault int

const (
	faultOK             soakFault = iota
	fault5xx                      // 500, 502 or 503
	faultBurst                    // 503: the server is in one of its outage windows
	fault429                      // 429 with Retry-After
	faultProblem                  // 503 problem+json, is_retriable true or false
	faultHang                     // no answer until the client goes away
	faultReset                    // connection dropped before the body is read
	faultResetAfterRead           // body read, connection dropped, nothing done
	faultCutAfter                 // request acted on, then the connection dropped
	faultTruncated                // acted on, the response body cut short
	faultSlow                     // acted on, the response body sent in slow chunks
	faultSlowRead                 // the request body read slowly, then acted on
	nFaults
)

var soakFaultNames = [...]string{"ok", "5xx", "burst 503", "429+Retry-After", "problem 503", "hang", "reset before body", "reset after body", "acted then reset", "truncated body", "slow body", "slow upload"}

// soakFaultWeights are the odds of each fault outside outage windows;
// soakConfig.okWeight replaces the first.
var soakFaultWeights = [nFaults]int{
	faultOK: 100, fault5xx: 10, fault429: 7, faultProblem: 4, faultHang: 5, faultReset: 7,
	faultResetAfterRead: 7, faultCutAfter: 6, faultTruncated: 7, faultSlow: 7, faultSlowRead: 4,
}

// soakConfig is what the clients and the server of one soak agree on.
type soakConfig struct {
	seed    uint64
	unit    time.Duration // server waits, think times and caller deadlines are multiples of it
	maxBody int           // largest request body
	msRA    bool          // send retry-after-ms instead of Retry-After seconds
	ok      int           // odds of faultOK against the other faults' 64; 0 means 100
}

// soakSpec is one operation, derived from (seed, id) alone so that the
// server can tell what the client sent.
type soakSpec struct {
	id            int
	kind          soakKind
	size          int    // request body size (PUT, POST), response body size (GET)
	reader        int    // how the request body is given
	ctype         string // request Content-Type
	keyed         bool   // charge: the caller sets the key and repeats the operation itself
	think         int    // units to wait before the operation
	callerTimeout int    // units of the caller's own deadline; 0 for none
	cancelAfter   int    // units after which the caller cancels; 0 for never
}

func (c *soakConfig) spec(id int) soakSpec {
	rng := rand.New(rand.NewPCG(c.seed, uint64(id)))
	sp := soakSpec{id: id, reader: rng.IntN(nReaders), ctype: soakContentTypes[rng.IntN(len(soakContentTypes))], think: rng.IntN(4)}
	switch k := rng.IntN(100); {
	case k < 35:
		sp.kind = kindPut
	case k < 60:
		sp.kind = kindPost
	case k < 85:
		sp.kind = kindCharge
		sp.keyed = rng.IntN(2) == 0
		sp.ctype = "application/json"
	default:
		sp.kind = kindGet
	}
	switch k := rng.IntN(100); {
	case k < 10:
		sp.size = 0
	case k < 60:
		sp.size = 1 + rng.IntN(1<<10)
	case k < 90:
		sp.size = 1<<10 + rng.IntN(min(64<<10, c.maxBody)-1<<10)
	default:
		sp.size = min(64<<10, c.maxBody) + rng.IntN(c.maxBody-min(64<<10, c.maxBody)+1)
	}
	if rng.IntN(5) == 0 {
		sp.callerTimeout = 1 + rng.IntN(30)
	}
	if rng.IntN(20) == 0 {
		sp.cancelAfter = 1 + rng.IntN(10)
	}
	return sp
}

// body is the request body of sp (or the response body of a GET):
// random bytes, mostly not UTF-8, or a charge.
func (c *soakConfig) body(sp soakSpec) []byte {
	if sp.kind == kindCharge {
		return fmt.Appendf(nil, `{"amount":%d,"currency":"eur","op":%d}`, 100+sp.id, sp.id)
	}
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], c.seed)
	binary.LittleEndian.PutUint64(key[8:], uint64(sp.id))
	b := make([]byte, sp.size)
	rand.NewChaCha8(key).Read(b)
	return b
}

func (c *soakConfig) key(sp soakSpec) string { return fmt.Sprintf("soak-%d-%d", c.seed, sp.id) }

func (c *soakConfig) url(base string, sp soakSpec) string {
	switch sp.kind {
	case kindPut:
		return base + "/objects/" + strconv.Itoa(sp.id)
	case kindPost:
		return base + "/echo/" + strconv.Itoa(sp.id)
	case kindCharge:
		return base + "/charges?op=" + strconv.Itoa(sp.id)
	}
	return base + "/stream/" + strconv.Itoa(sp.id)
}

// soakWindow is an outage of the server: every request in it gets 503.
type soakWindow struct{ from, to time.Duration }

// soakServer is the chaos server. Its accounting is read at the end.
type soakServer struct {
	cfg     *soakConfig
	start   time.Time
	windows []soakWindow
	pay     *httptestutil.Payments
	idem    http.Handler // idempotency.Handler in front of pay

	mu         sync.Mutex
	payRuns    map[string]int              // runs of pay per idempotency key, behind idem
	replays    int                         // answers of idem that replayed a charge
	conflicts  int                         // answers of idem that said the key was in flight
	arrivals   map[int]int                 // requests per operation
	keys       map[int]map[string]struct{} // idempotency keys seen per operation
	charges    map[int][]string            // charge ids made per operation
	acts       map[int]int                 // times an unvouched POST was acted on, per operation
	violations []string

	faults        [nFaults]atomic.Int64
	requests      atomic.Int64
	bodies        atomic.Int64 // request bodies compared whole
	partial       atomic.Int64 // request bodies cut short by the client, compared as prefixes
	bytesCompared atomic.Int64
	mismatches    atomic.Int64 // request bodies that differ from what was sent
}

func newSoakServer(cfg *soakConfig, pay *httptestutil.Payments, span time.Duration) *soakServer {
	s := &soakServer{
		cfg: cfg, start: time.Now(), pay: pay,
		arrivals: map[int]int{}, keys: map[int]map[string]struct{}{}, charges: map[int][]string{}, acts: map[int]int{},
		payRuns: map[string]int{},
	}
	s.idem = idempotency.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.payRuns[r.Header.Get(idempotency.DefaultHeader)]++
		s.mu.Unlock()
		pay.ServeHTTP(w, r)
	}), idempotency.HandlerOptions{})
	rng := rand.New(rand.NewPCG(cfg.seed, 0xb0257))
	for at := time.Duration(0); at < span; {
		at += time.Duration(60+rng.IntN(120)) * cfg.unit
		d := time.Duration(2+rng.IntN(7)) * cfg.unit
		s.windows = append(s.windows, soakWindow{at, at + d})
		at += d
	}
	return s
}

func (s *soakServer) violate(format string, args ...any) {
	s.mu.Lock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

// choose picks the fault for the n-th arrival (from 0) of operation id.
func (s *soakServer) choose(id, n int) soakFault {
	since := time.Since(s.start)
	for _, w := range s.windows {
		if since >= w.from && since < w.to {
			return faultBurst
		}
	}
	rng := rand.New(rand.NewPCG(s.cfg.seed^0xfa017, uint64(id)<<16|uint64(n)))
	weights := soakFaultWeights
	if s.cfg.ok > 0 {
		weights[faultOK] = s.cfg.ok
	}
	total := 0
	for _, w := range weights {
		total += w
	}
	k := rng.IntN(total)
	for f, w := range weights {
		if k < w {
			return soakFault(f)
		}
		k -= w
	}
	return faultOK
}

func (s *soakServer) route(r *http.Request) (soakKind, int, bool) {
	var kind soakKind
	var rest string
	switch {
	case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/objects/"):
		kind, rest = kindPut, strings.TrimPrefix(r.URL.Path, "/objects/")
	case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/echo/"):
		kind, rest = kindPost, strings.TrimPrefix(r.URL.Path, "/echo/")
	case r.Method == "POST" && r.URL.Path == "/charges":
		kind, rest = kindCharge, r.URL.Query().Get("op")
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/stream/"):
		kind, rest = kindGet, strings.TrimPrefix(r.URL.Path, "/stream/")
	default:
		return 0, 0, false
	}
	id, err := strconv.Atoi(rest)
	return kind, id, err == nil
}

func (s *soakServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	kind, id, ok := s.route(r)
	if !ok {
		s.violate("server: unexpected request %s %s", r.Method, r.URL)
		http.Error(w, "soak: no such route", http.StatusNotFound)
		return
	}
	sp := s.cfg.spec(id)
	if sp.kind != kind {
		s.violate("op %d: server got a %s request, want %s", id, soakKindNames[kind], soakKindNames[sp.kind])
	}
	if kind == kindPost {
		for _, h := range [...]string{"Idempotency-Key", "X-Idempotency-Key"} {
			if _, ok := r.Header[h]; ok {
				s.violate("op %d: a POST nobody vouched for carried %s %q, want no key", id, h, r.Header.Get(h))
			}
		}
	}
	s.mu.Lock()
	n := s.arrivals[id]
	s.arrivals[id] = n + 1
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		if s.keys[id] == nil {
			s.keys[id] = map[string]struct{}{}
		}
		s.keys[id][k] = struct{}{}
	}
	s.mu.Unlock()
	f := s.choose(id, n)
	s.faults[f].Add(1)

	if f == faultReset {
		httptestutil.Reset().ServeHTTP(w, r)
		return
	}
	if kind != kindGet {
		if f == faultSlowRead {
			r.Body = io.NopCloser(&slowReader{r: r.Body, ctx: r.Context(), every: s.cfg.unit / 4})
		}
		got, whole := s.checkBody(sp, r)
		if !whole {
			return // the client went away mid-body
		}
		r.Body = io.NopCloser(bytes.NewReader(got))
	}
	unit := s.cfg.unit
	rng := rand.New(rand.NewPCG(s.cfg.seed^0x5eed, uint64(id)<<16|uint64(n)))
	switch f {
	case fault5xx:
		httptestutil.Status([]int{500, 502, 503}[rng.IntN(3)], "soak: fault").ServeHTTP(w, r)
		return
	case faultBurst:
		httptestutil.Status(503, "soak: outage").ServeHTTP(w, r)
		return
	case fault429:
		secs := 1 + rng.IntN(4)
		if rng.IntN(20) == 0 {
			secs = 30 // longer than some stacks' MaxRetryAfter
		}
		if s.cfg.msRA {
			httptestutil.RetryAfterMS(429, int64(secs)*unit.Milliseconds()).ServeHTTP(w, r)
		} else {
			httptestutil.RetryAfterSeconds(429, secs*int(unit/time.Second)).ServeHTTP(w, r)
		}
		return
	case faultProblem:
		httptestutil.Problem(503, httptestutil.ProblemBody{
			Title:      "soak: overloaded",
			Extensions: map[string]any{"is_retriable": rng.IntN(2) == 0},
		}).ServeHTTP(w, r)
		return
	case faultHang:
		httptestutil.Hang().ServeHTTP(w, r)
		return
	case faultResetAfterRead:
		httptestutil.Reset().ServeHTTP(w, r)
		return
	}

	// The request is acted on; the response may then be lost, cut or slow.
	status, header, body := s.act(sp, r)
	switch f {
	case faultCutAfter:
		httptestutil.Reset().ServeHTTP(w, r)
		return
	case faultTruncated:
		copyHeader(w.Header(), header)
		httptestutil.Truncated(status, len(body)+1+rng.IntN(100), string(body[:len(body)/2])).ServeHTTP(w, r)
		return
	case faultSlow:
		copyHeader(w.Header(), header)
		chunk := len(body)/8 + 1
		every := unit/2 + time.Duration(rng.IntN(3))*unit/2
		httptestutil.SlowBody(status, string(body), chunk, every).ServeHTTP(w, r)
		return
	}
	copyHeader(w.Header(), header)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// slowReader reads at most 4 KiB at a time, waiting every between reads,
// as a slow or congested server does.
type slowReader struct {
	r     io.Reader
	ctx   context.Context
	every time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	t := time.NewTimer(s.every)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.ctx.Done():
		return 0, s.ctx.Err()
	}
	return s.r.Read(p[:min(len(p), 4<<10)])
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

// checkBody reads the request body and compares it with what the client
// of sp sends. It reports the body and whether it arrived whole.
func (s *soakServer) checkBody(sp soakSpec, r *http.Request) ([]byte, bool) {
	want := s.cfg.body(sp)
	got, err := io.ReadAll(io.LimitReader(r.Body, int64(len(want))+1))
	if err == nil {
		// The whole body, and nothing after it.
		if extra, _ := io.Copy(io.Discard, r.Body); extra > 0 {
			got = append(got, make([]byte, extra)...)
		}
	}
	s.bytesCompared.Add(int64(len(got)))
	if err != nil {
		s.partial.Add(1)
		if !bytes.HasPrefix(want, got) {
			s.mismatches.Add(1)
			s.violate("op %d: server got a partial body of %d bytes that is not a prefix of the %d sent", sp.id, len(got), len(want))
		}
		return got, false
	}
	s.bodies.Add(1)
	if !bytes.Equal(got, want) {
		s.mismatches.Add(1)
		s.violate("op %d (%s, %s): server got a %d-byte body, want the %d bytes sent (first difference at %d)",
			sp.id, soakKindNames[sp.kind], soakReaderNames[sp.reader], len(got), len(want), firstDiff(got, want))
	}
	return got, true
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// act performs sp: a PUT or POST echoes what it got, a GET streams its
// bytes, a charge goes to the payments emulator, whose new charges are
// counted per operation.
func (s *soakServer) act(sp soakSpec, r *http.Request) (int, http.Header, []byte) {
	switch sp.kind {
	case kindGet:
		return 200, http.Header{"Content-Type": {"application/octet-stream"}}, s.cfg.body(sp)
	case kindPut, kindPost:
		if sp.kind == kindPost {
			s.mu.Lock()
			s.acts[sp.id]++
			s.mu.Unlock()
		}
		b, _ := io.ReadAll(r.Body)
		sum := sha256.Sum256(b)
		out := fmt.Appendf(nil, `{"op":%d,"len":%d,"sha256":%q}`, sp.id, len(b), hex.EncodeToString(sum[:]))
		return 200, http.Header{"Content-Type": {"application/json"}}, out
	}
	rec := httptest.NewRecorder()
	s.idem.ServeHTTP(rec, r)
	s.mu.Lock()
	switch {
	case rec.Header().Get(idempotency.ReplayedHeader) == "true":
		s.replays++
	case rec.Code == http.StatusConflict:
		s.conflicts++
	}
	s.mu.Unlock()
	if rec.Code == http.StatusCreated && rec.Header().Get(idempotency.ReplayedHeader) == "" {
		var c struct{ ID string }
		json.Unmarshal(rec.Body.Bytes(), &c)
		s.mu.Lock()
		s.charges[sp.id] = append(s.charges[sp.id], c.ID)
		s.mu.Unlock()
	}
	return rec.Code, rec.Header(), rec.Body.Bytes()
}

// soakTally is the clients' side of the accounting.
type soakTally struct {
	mu         sync.Mutex
	ops        int
	tries      int
	outcomes   map[string]int
	byReader   [nReaders]int
	byKind     [len(soakKindNames)]int
	seen       map[int]string // charge operations the caller saw succeed, with the id it was given
	sent       int64          // request body bytes handed to the client
	overruns   int
	maxOver    time.Duration
	violations []string
	attempts   atomic.Int64 // attempts made by Retry (OnAttempt)
}

func (t *soakTally) violate(format string, args ...any) {
	t.mu.Lock()
	t.violations = append(t.violations, fmt.Sprintf(format, args...))
	t.mu.Unlock()
}

func (t *soakTally) outcome(o string) {
	t.mu.Lock()
	t.outcomes[o]++
	t.mu.Unlock()
}

// soakClient runs operations through one stack.
type soakClient struct {
	cfg     *soakConfig
	client  *http.Client
	base    string
	payBase string        // the payments emulator's URL: a host listed in Idempotency.Hosts
	timeout time.Duration // the stack's whole-operation budget
	margin  time.Duration // how far past its deadline an operation may end
	tally   *soakTally
}

// run performs sp, repeating a failed keyed charge with the same key as
// a careful caller does.
func (c *soakClient) run(sp soakSpec) {
	time.Sleep(time.Duration(sp.think) * c.cfg.unit)
	c.tally.mu.Lock()
	c.tally.ops++
	c.tally.byKind[sp.kind]++
	if sp.kind != kindGet {
		c.tally.byReader[sp.reader]++
	}
	c.tally.mu.Unlock()
	tries := 1
	if sp.keyed {
		tries = 3
	}
	for try := 1; try <= tries; try++ {
		if c.try(sp) {
			return
		}
		time.Sleep(c.cfg.unit)
	}
}

// try makes one call of sp and checks it; it reports whether the
// operation is done (success, or a failure that repeating cannot mend).
func (c *soakClient) try(sp soakSpec) bool {
	c.tally.mu.Lock()
	c.tally.tries++
	c.tally.mu.Unlock()

	start := time.Now()
	ctx := context.Background()
	deadline := start.Add(c.timeout)
	if sp.callerTimeout > 0 {
		d := time.Duration(sp.callerTimeout) * c.cfg.unit
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
		if dl := start.Add(d); dl.Before(deadline) {
			deadline = dl
		}
	}
	if sp.cancelAfter > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := time.AfterFunc(time.Duration(sp.cancelAfter)*c.cfg.unit, cancel)
		defer stop.Stop()
	}
	if sp.keyed {
		ctx = idempotency.WithKey(ctx, c.cfg.key(sp))
	}
	req, want := c.request(ctx, sp)

	resp, err := c.client.Do(req)
	c.checkDeadline(sp, "RoundTrip", start, deadline)
	if err != nil {
		c.tally.outcome("error: " + soakErrKind(err))
		return !sp.keyed || errors.Is(err, context.Canceled)
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.checkDeadline(sp, "body", start, deadline)
	if rerr != nil {
		c.tally.outcome("body error: " + soakErrKind(rerr))
		return !sp.keyed
	}
	return c.check(sp, resp, body, want)
}

func (c *soakClient) request(ctx context.Context, sp soakSpec) (*http.Request, []byte) {
	method := map[soakKind]string{kindPut: "PUT", kindPost: "POST", kindCharge: "POST", kindGet: "GET"}[sp.kind]
	base := c.base
	if sp.kind == kindCharge {
		base = c.payBase
	}
	if sp.kind == kindGet {
		req, _ := http.NewRequestWithContext(ctx, method, c.cfg.url(base, sp), nil)
		return req, c.cfg.body(sp)
	}
	b := c.cfg.body(sp)
	c.tally.mu.Lock()
	c.tally.sent += int64(len(b))
	c.tally.mu.Unlock()
	var body io.Reader
	switch sp.reader {
	case readerBytes:
		body = bytes.NewReader(b)
	case readerStrings:
		body = strings.NewReader(string(b))
	case readerBuffer:
		body = bytes.NewBuffer(slices.Clone(b))
	case readerOnly, readerGetBody:
		body = onlyReader{bytes.NewReader(b)}
	case readerNopClose:
		body = io.NopCloser(bytes.NewReader(b))
	}
	req, _ := http.NewRequestWithContext(ctx, method, c.cfg.url(base, sp), body)
	switch sp.reader {
	case readerGetBody:
		req.ContentLength = int64(len(b))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	case readerNopClose:
		req.ContentLength = int64(len(b))
	}
	if req.ContentLength == 0 && sp.reader != readerOnly {
		req.Body, req.GetBody = http.NoBody, nil
	}
	req.Header.Set("Content-Type", sp.ctype)
	return req, b
}

// check verifies a response read to its end.
func (c *soakClient) check(sp soakSpec, resp *http.Response, body, sent []byte) bool {
	ok := resp.StatusCode == 200
	if sp.kind == kindCharge {
		ok = resp.StatusCode == 201
	}
	if !ok {
		c.tally.outcome("status " + strconv.Itoa(resp.StatusCode))
		// Repeat a keyed charge after an answer that may change; 4xx
		// other than 409 and 429 will not.
		return !sp.keyed || resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != 409 && resp.StatusCode != 429
	}
	c.tally.outcome("ok")
	switch sp.kind {
	case kindGet:
		if !bytes.Equal(body, sent) {
			c.tally.violate("op %d: GET read %d bytes, want the %d the server sent (first difference at %d)", sp.id, len(body), len(sent), firstDiff(body, sent))
		}
	case kindPut, kindPost:
		var echo struct {
			Op     int
			Len    int
			SHA256 string
		}
		sum := sha256.Sum256(sent)
		if err := json.Unmarshal(body, &echo); err != nil || echo.Op != sp.id || echo.Len != len(sent) || echo.SHA256 != hex.EncodeToString(sum[:]) {
			c.tally.violate("op %d: %s answered %q, want op %d, len %d, sha256 %x", sp.id, soakKindNames[sp.kind], body, sp.id, len(sent), sum)
		}
	case kindCharge:
		var ch struct{ ID string }
		if err := json.Unmarshal(body, &ch); err != nil || ch.ID == "" {
			c.tally.violate("op %d: charge answered %q, want a charge id", sp.id, body)
		}
		c.tally.mu.Lock()
		if prev, ok := c.tally.seen[sp.id]; ok && prev != ch.ID {
			c.tally.violations = append(c.tally.violations, fmt.Sprintf("op %d: caller saw charges %s and %s", sp.id, prev, ch.ID))
		}
		c.tally.seen[sp.id] = ch.ID
		c.tally.mu.Unlock()
	}
	return true
}

func (c *soakClient) checkDeadline(sp soakSpec, what string, start, deadline time.Time) {
	over := time.Since(deadline)
	if over <= c.margin {
		return
	}
	c.tally.mu.Lock()
	defer c.tally.mu.Unlock()
	c.tally.overruns++
	c.tally.maxOver = max(c.tally.maxOver, over)
	if c.tally.overruns <= 10 {
		c.tally.violations = append(c.tally.violations, fmt.Sprintf("op %d (%s): %s ended %v after it began, %v past its deadline", sp.id, soakKindNames[sp.kind], what, time.Since(start), over))
	}
}

func soakErrKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, ErrCircuitOpen):
		return "circuit open"
	case errors.Is(err, ratelimit.ErrQuotaExhausted):
		return "quota wait too long"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, io.ErrClosedPipe):
		return "closed pipe"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case strings.Contains(err.Error(), "connection reset"):
		return "connection reset"
	}
	return "other (" + err.Error() + ")"
}

// connGauge counts open connections: the server's through ConnState
// (StateNew minus StateClosed and StateHijacked), the client's through its
// dialer.
type connGauge struct {
	server, client atomic.Int64
	accepted       atomic.Int64
}

func (g *connGauge) connState(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		g.server.Add(1)
		g.accepted.Add(1)
	case http.StateClosed, http.StateHijacked:
		g.server.Add(-1)
	}
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (g *connGauge) dial(d dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		g.client.Add(1)
		return &gaugedConn{Conn: c, g: g}, nil
	}
}

type gaugedConn struct {
	net.Conn
	g    *connGauge
	once sync.Once
}

func (c *gaugedConn) Close() error {
	c.once.Do(func() { c.g.client.Add(-1) })
	return c.Conn.Close()
}

// soakRun is one soak: its server, its stack and its clients.
type soakRun struct {
	name    string
	cfg     soakConfig
	opts    Options
	clients int
	ops     int           // per client; 0 means until span has passed
	span    time.Duration // how long the server's outage schedule runs
	margin  time.Duration
	delay   time.Duration // the payments emulator's processing time
	virtual bool          // inside a synctest bubble
}

type soakReport struct {
	srv   *soakServer
	tally *soakTally
	took  time.Duration
}

// drive runs the clients against base through New and waits for them:
// charges go to payURL, whose host is listed in Idempotency.Hosts, the
// rest to url.
func (r *soakRun) drive(url, payURL string, base http.RoundTripper, srv *soakServer) *soakReport {
	tally := &soakTally{outcomes: map[string]int{}, seen: map[int]string{}}
	o := r.opts
	o.Base = base
	pu, err := neturl.Parse(payURL)
	if err != nil {
		panic(err)
	}
	o.Idempotency.Hosts = append(o.Idempotency.Hosts, pu.Hostname())
	o.Hooks.OnAttempt = func(policy.AttemptEvent) { tally.attempts.Add(1) }
	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	c := &soakClient{cfg: &r.cfg, client: &http.Client{Transport: New(o)}, base: url, payBase: payURL, timeout: timeout, margin: r.margin, tally: tally}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range r.clients {
		wg.Go(func() {
			for j := 0; r.ops == 0 || j < r.ops; j++ {
				if r.ops == 0 && time.Since(start) >= r.span {
					return
				}
				c.run(r.cfg.spec(i<<20 | j))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	c.client.CloseIdleConnections()
	return &soakReport{srv: srv, tally: tally, took: took}
}

// account checks the accounting: it returns every broken promise, and a
// report of what happened.
func (r *soakRun) account(rep *soakReport, g *connGauge) (problems []string, report string) {
	s, tally := rep.srv, rep.tally
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	s.mu.Lock()
	defer s.mu.Unlock()
	tally.mu.Lock()
	defer tally.mu.Unlock()
	problems = append(problems, s.violations...)
	problems = append(problems, tally.violations...)

	// Payments: at most once, and exactly once for every success seen.
	var made, duplicates, lost int
	for id, ids := range s.charges {
		made += len(ids)
		if len(ids) > 1 {
			duplicates += len(ids) - 1
			fail("op %d: charged %d times (%v), want at most once", id, len(ids), ids)
		}
	}
	for id, seen := range tally.seen {
		if ids := s.charges[id]; len(ids) != 1 || ids[0] != seen {
			lost++
			fail("op %d: caller saw charge %s, server made %v, want exactly that one", id, seen, ids)
		}
	}
	// One run of the payments emulator per key behind idempotency.Handler.
	for key, n := range s.payRuns {
		if n != 1 {
			fail("key %s: the payments emulator ran %d times behind idempotency.Handler, want once", key, n)
		}
	}
	st := s.pay.Stats()
	if st.Charges != int64(made) {
		fail("payments emulator made %d charges, the soak counted %d", st.Charges, made)
	}
	if st.Mismatches != 0 || st.MissingKeys != 0 {
		fail("payments emulator: %d key reuses with another payload, %d requests without a key, want 0 and 0", st.Mismatches, st.MissingKeys)
	}
	// A POST nobody vouched for, to a server that does not deduplicate:
	// acted on at most once.
	var posts, acted, twice int
	for id, n := range s.acts {
		acted++
		if n > 1 {
			twice++
			fail("op %d (POST nobody vouched for): acted on %d times, want at most once", id, n)
		}
	}
	posts = tally.byKind[kindPost]
	// One key per operation, the caller's when it set one.
	var rekeyed int
	for id, keys := range s.keys {
		sp := r.cfg.spec(id)
		if len(keys) != 1 {
			rekeyed++
			fail("op %d (%s): attempts carried %d different idempotency keys, want 1", id, soakKindNames[sp.kind], len(keys))
		}
		if _, ok := keys[r.cfg.key(sp)]; sp.keyed && !ok {
			fail("op %d: attempts carried keys %v, want the caller's %q", id, keys, r.cfg.key(sp))
		}
	}
	// Every call ended.
	var ended int
	for _, n := range tally.outcomes {
		ended += n
	}
	if ended != tally.tries {
		fail("%d calls ended of %d made", ended, tally.tries)
	}
	if n := g.server.Load(); n != 0 {
		fail("server has %d open connections at the end, want 0", n)
	}
	if n := g.client.Load(); n != 0 {
		fail("client has %d open connections at the end, want 0", n)
	}

	var b strings.Builder
	clock := "real"
	if r.virtual {
		clock = "virtual"
	}
	fmt.Fprintf(&b, "soak %s: seed %d, %d clients, %v of %s time\n", r.name, r.cfg.seed, r.clients, rep.took.Round(time.Millisecond), clock)
	fmt.Fprintf(&b, "  operations: %d (%d calls); attempts: %d by Retry, %d requests reached the server; connections: %d accepted\n",
		tally.ops, tally.tries, tally.attempts.Load(), s.requests.Load(), g.accepted.Load())
	fmt.Fprintf(&b, "  operations by kind: %s\n", soakCounts(soakKindNames[:], tally.byKind[:]))
	fmt.Fprintf(&b, "  request bodies given as: %s\n", soakCounts(soakReaderNames[:], tally.byReader[:]))
	fmt.Fprintf(&b, "  outcomes: %s\n", soakMap(tally.outcomes))
	var faults [nFaults]int
	for i := range faults {
		faults[i] = int(s.faults[i].Load())
	}
	fmt.Fprintf(&b, "  faults injected: %s\n", soakCounts(soakFaultNames[:], faults[:]))
	fmt.Fprintf(&b, "  request body bytes: %d sent by callers, %d compared at the server in %d whole bodies and %d cut short; mismatched bodies: %d\n",
		tally.sent, s.bytesCompared.Load(), s.bodies.Load(), s.partial.Load(), s.mismatches.Load())
	fmt.Fprintf(&b, "  charges: %d operations, %d made, %d confirmed to the caller (%d replays, %d conflicts); duplicates found: %d; confirmed but not made exactly once: %d\n",
		tally.byKind[kindCharge], made, len(tally.seen), s.replays, s.conflicts, duplicates, lost)
	fmt.Fprintf(&b, "  keys run behind idempotency.Handler: %d\n", len(s.payRuns))
	fmt.Fprintf(&b, "  POSTs nobody vouched for (no deduplication): %d operations, %d acted on, %d acted on more than once\n", posts, acted, twice)
	fmt.Fprintf(&b, "  operations with an idempotency key: %d; with more than one key across attempts: %d\n", len(s.keys), rekeyed)
	fmt.Fprintf(&b, "  deadline overruns (margin %v): %d, worst %v; open connections at the end: server %d, client %d; problems: %d",
		r.margin, tally.overruns, tally.maxOver, g.server.Load(), g.client.Load(), len(problems))
	return problems, b.String()
}

// report fails t with every problem (the first 20) and logs the report.
func soakCheck(t *testing.T, problems []string, report string) {
	t.Helper()
	for i, p := range problems {
		if i == 20 {
			t.Errorf("... and %d more", len(problems)-i)
			break
		}
		t.Error(p)
	}
	t.Log(report)
}

func soakCounts(names []string, n []int) string {
	var parts []string
	for i, c := range n {
		parts = append(parts, fmt.Sprintf("%s %d", names[i], c))
	}
	return strings.Join(parts, ", ")
}

func soakMap(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// TestSoakVirtual is the chaos soak over the in-memory network, on
// virtual time: minutes of traffic in a few seconds.
func TestSoakVirtual(t *testing.T) {
	clients, ops := 24, 25
	if soakLong() {
		clients, ops = 64, 200
	}
	if testing.Short() {
		clients, ops = 8, 10
	}
	runs := []soakRun{
		{
			name: "defaults",
			cfg:  soakConfig{maxBody: 2 << 20}, // bodies up to twice the 1 MiB buffer limit
		},
		{
			name: "tight",
			cfg:  soakConfig{maxBody: 64 << 10},
			opts: Options{
				Timeout:        20 * time.Second,
				AttemptTimeout: 3 * time.Second,
				Retry:          policy.Retry{MaxAttempts: 6, MaxBufferedBody: 16 << 10, MaxRetryAfter: 10 * time.Second},
				Breaker:        BreakerSettings{ConsecutiveFailures: 8, Cooldown: 5 * time.Second, HalfOpenRequests: 3},
			},
		},
		{
			name: "retries under heavy faults",
			cfg:  soakConfig{maxBody: 256 << 10, ok: 40},
			opts: Options{
				AttemptTimeout: 10 * time.Second,
				Retry:          policy.Retry{MaxAttempts: 8, MaxBufferedBody: 64 << 10},
				Disable:        LayerBreaker | LayerRetryBudget,
			},
		},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r.clients, r.ops = clients, ops
				problems, report := r.virtualSoak(soakSeed(), nil)
				soakCheck(t, problems, report)
			})
		})
	}
}

// virtualSoak runs r over an in-memory network; it must be called in a
// synctest bubble. wrap, when set, wraps the base transport (to inject a
// bug the soak must catch).
func (r soakRun) virtualSoak(seed uint64, wrap func(http.RoundTripper) http.RoundTripper) ([]string, string) {
	r.cfg.seed, r.cfg.unit, r.virtual = seed, time.Second, true
	r.span, r.delay = 4*time.Hour, 500*time.Millisecond
	pay := httptestutil.NewPayments(httptestutil.PaymentsConfig{ProcessingDelay: r.delay})
	srv := newSoakServer(&r.cfg, pay, r.span)
	g := &connGauge{}
	n := httptestutil.NewNetwork()
	hs := n.Start("api.test", &http.Server{Handler: srv, ConnState: g.connState})
	defer hs.Close()
	ps := n.Start("pay.test", &http.Server{Handler: srv, ConnState: g.connState})
	defer ps.Close()
	tr := n.Transport()
	tr.DialContext = g.dial(tr.DialContext)
	defer tr.CloseIdleConnections()
	var base http.RoundTripper = tr
	if wrap != nil {
		base = wrap(tr)
	}

	rep := r.drive(hs.URL, ps.URL, base, srv)
	time.Sleep(r.delay) // let charges whose caller left finish
	tr.CloseIdleConnections()
	synctest.Wait()
	return r.account(rep, g)
}

// The soak must catch a stack that breaks its promises: each case wraps
// the base transport with a bug and expects the accounting to report it.
func TestSoakCatchesBrokenStacks(t *testing.T) {
	tests := []struct {
		name string
		wrap func(http.RoundTripper) http.RoundTripper
		want string // in one of the problems
	}{
		{"body changed on a retry", func(next http.RoundTripper) http.RoundTripper {
			return Func(func(r *http.Request) (*http.Response, error) {
				if AttemptFromContext(r.Context()) > 1 && r.Body != nil && r.Body != http.NoBody {
					r = r.Clone(r.Context())
					r.Body = io.NopCloser(io.MultiReader(strings.NewReader("!"), r.Body))
					r.ContentLength = -1
				}
				return next.RoundTrip(r)
			})
		}, "server got a"},
		{"new idempotency key per attempt", func(next http.RoundTripper) http.RoundTripper {
			return Func(func(r *http.Request) (*http.Response, error) {
				if n := AttemptFromContext(r.Context()); n > 1 && r.Header.Get("Idempotency-Key") != "" {
					r = r.Clone(r.Context())
					r.Header.Set("Idempotency-Key", idempotency.NewKey())
				}
				return next.RoundTrip(r)
			})
		}, "different idempotency keys"},
		{"POST nobody vouched for sent twice", func(next http.RoundTripper) http.RoundTripper {
			return Func(func(r *http.Request) (*http.Response, error) {
				// The stack hands an attempt of such a POST no GetBody: the
				// body is read here, whole, to send it twice.
				if r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/echo/") && r.Body != nil {
					b, err := io.ReadAll(r.Body)
					r.Body.Close()
					if err != nil {
						return nil, err
					}
					first := r.Clone(r.Context())
					first.Body = io.NopCloser(bytes.NewReader(b))
					if resp, err := next.RoundTrip(first); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					r = r.Clone(r.Context())
					r.Body = io.NopCloser(bytes.NewReader(b))
				}
				return next.RoundTrip(r)
			})
		}, "acted on 2 times"},
		{"returns late after a timeout", func(next http.RoundTripper) http.RoundTripper {
			return Func(func(r *http.Request) (*http.Response, error) {
				resp, err := next.RoundTrip(r)
				if err != nil && r.Context().Err() != nil {
					time.Sleep(time.Second)
				}
				return resp, err
			})
		}, "past its deadline"},
		{"response of another operation", func(next http.RoundTripper) http.RoundTripper {
			var mu sync.Mutex
			var last []byte
			return Func(func(r *http.Request) (*http.Response, error) {
				resp, err := next.RoundTrip(r)
				if err != nil || resp.StatusCode != 200 || r.Method != "PUT" {
					return resp, err
				}
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				prev := last
				last = b
				mu.Unlock()
				if rerr != nil || prev == nil {
					prev = b
				}
				resp.Body = io.NopCloser(bytes.NewReader(prev))
				resp.ContentLength = int64(len(prev))
				return resp, nil
			})
		}, "answered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := soakRun{
					name: tt.name, clients: 8, ops: 25,
					cfg:  soakConfig{maxBody: 64 << 10, ok: 40},
					opts: Options{Timeout: 15 * time.Second, Disable: LayerBreaker | LayerRetryBudget},
				}
				problems, report := r.virtualSoak(soakSeed(), tt.wrap)
				for _, p := range problems {
					if strings.Contains(p, tt.want) {
						return
					}
				}
				t.Errorf("the soak found %d problems, none containing %q, want at least one:\n%s\n%s", len(problems), tt.want, strings.Join(problems, "\n"), report)
			})
		})
	}
}

// TestSoakLoopback is a short soak over real sockets, where resets are
// TCP RSTs and time is the machine's.
func TestSoakLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time soak")
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := soakRun{
		name:    "loopback",
		cfg:     soakConfig{seed: soakSeed(), unit: 10 * time.Millisecond, maxBody: 256 << 10, msRA: true},
		clients: 16,
		span:    5 * time.Second,
		margin:  2 * time.Second, // scheduling on a loaded machine, not sturdy
		delay:   20 * time.Millisecond,
		opts: Options{
			Timeout:        2 * time.Second,
			AttemptTimeout: 500 * time.Millisecond,
			Retry:          policy.Retry{Backoff: policy.FullJitter(10*time.Millisecond, 200*time.Millisecond), MaxBufferedBody: 64 << 10, MaxRetryAfter: time.Second},
			Breaker:        BreakerSettings{Cooldown: 300 * time.Millisecond},
		},
	}
	if soakLong() {
		r.clients, r.span = 32, time.Minute
	}
	pay := httptestutil.NewPayments(httptestutil.PaymentsConfig{ProcessingDelay: r.delay})
	srv := newSoakServer(&r.cfg, pay, r.span)
	g := &connGauge{}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ConnState = g.connState
	hs.Start()
	base := cleanhttp.DefaultPooledTransport()
	base.DialContext = g.dial(base.DialContext)

	// The same server under two names: charges go to localhost, the
	// host listed in Idempotency.Hosts; the rest to 127.0.0.1.
	payURL := strings.Replace(hs.URL, "127.0.0.1", "localhost", 1)
	rep := r.drive(hs.URL, payURL, base, srv)
	// Connections close asynchronously: give both ends a moment.
	for i := 0; i < 200 && (g.server.Load() != 0 || g.client.Load() != 0); i++ {
		time.Sleep(10 * time.Millisecond)
		base.CloseIdleConnections()
	}
	problems, report := r.account(rep, g)
	soakCheck(t, problems, report)
	hs.Close()
}

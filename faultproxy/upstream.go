package faultproxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/idempotency"
)

// Headers the suite's clients send with each request, for the upstream's
// records only: which operation it belongs to, and when its caller gives
// up on it.
const (
	OpHeader       = "X-Faultproxy-Op"
	DeadlineHeader = "X-Faultproxy-Deadline" // Unix nanoseconds
)

// WarmupPath is the path of the requests that warm a client up
// (Settings.Warmup): the upstream answers them 204 at once, with no side
// effect and no record.
const WarmupPath = "/warmup"

// Transit is the upstream's allowance for a request head's transit
// (idempotency.DeadlineOptions.Transit): the slow uplink holds it up to
// 100 ms, since toxiproxy's bandwidth toxic releases data in 100 ms
// slices, and the latency phase up to 20 ms; the rest is slack for a
// dial and a loaded machine (with 150 ms, one request in 400 of a long
// run on a busy 2-core machine was performed after its caller gave up).
const Transit = 250 * time.Millisecond

// maxBody bounds the request bodies the upstream reads.
const maxBody = 1 << 20

// responsePad is the padding of each response, so that responses are a
// few KiB and a cut (limit_data, a reset) can fall inside a body.
var responsePad = strings.Repeat("0123456789abcdef", 256) // 4 KiB

// Arrival is one request that reached the upstream.
type Arrival struct {
	Op       string    // the operation (OpHeader)
	Method   string    // the request's method
	Key      string    // its Idempotency-Key, if any
	BodySHA  string    // SHA-256 of the body, hex, when it arrived whole
	Complete bool      // the body arrived whole
	At       time.Time // when the body ended (or failed)
	Deadline time.Time // when the operation's caller gives up (DeadlineHeader)
	Status   int       // the status answered; 0 when nothing was
	// Performed reports that this request had the side effect.
	Performed bool
	// PerformedAt is when it had it.
	PerformedAt time.Time
}

// UpstreamOptions configures [NewUpstream].
type UpstreamOptions struct {
	// Dedup puts the side effect behind idempotency.Handler (keys
	// optional): a request with a key that was already performed gets the
	// stored answer again. False performs every request that arrives:
	// the upstream for requests nobody vouched for.
	Dedup bool

	// RequestsPerConn, when positive, is how many requests the upstream
	// serves on one connection: the last is answered with "Connection:
	// close", as servers and load balancers cap keep-alive requests
	// (nginx's keepalive_requests, Envoy's max_requests_per_connection).
	// toxiproxy deals its toxics per connection, so without it a pool
	// that keeps its healthy connections would meet a fault only on its
	// first few. Zero means no limit.
	RequestsPerConn int
}

// Upstream is a real HTTP server on loopback that records each request
// (method, key, body hash, arrival time against its caller's deadline)
// and performs a side effect for it: a charge, counted per operation. It
// runs behind idempotency.DeadlineHandler, so a client that sends its
// deadline (Request-Timeout) is held to it; one that does not is served
// as before. The side effect is done only if the request's context is
// still live, as a handler that passes its context to its database does.
type Upstream struct {
	URL  string // http://127.0.0.1:port
	Addr string // 127.0.0.1:port

	srv      *httptest.Server
	conns    atomic.Int64
	inflight atomic.Int64
	lastSeen atomic.Int64 // Unix nanoseconds of the last request's start or end

	mu       sync.Mutex
	arrivals []Arrival
	effects  map[string]int // side effects per operation
	byKey    map[string]int // side effects per Idempotency-Key, for requests with one
	charges  map[string]string
	next     int
}

// NewUpstream starts an upstream on a loopback port.
func NewUpstream(o UpstreamOptions) *Upstream {
	u := &Upstream{effects: make(map[string]int), byKey: make(map[string]int), charges: make(map[string]string)}
	var h http.Handler = http.HandlerFunc(u.perform)
	if o.Dedup {
		h = idempotency.Handler(h, idempotency.HandlerOptions{Optional: true, MaxRequestBody: maxBody})
	}
	h = idempotency.DeadlineHandler(h, idempotency.DeadlineOptions{Transit: Transit})
	u.srv = httptest.NewUnstartedServer(u.record(h, o.RequestsPerConn))
	u.srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, new(atomic.Int64))
	}
	u.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.srv.Start()
	u.URL = u.srv.URL
	u.Addr = u.srv.Listener.Addr().String()
	return u
}

// Close stops the upstream and closes its connections.
func (u *Upstream) Close() { u.srv.Close() }

// Conns returns how many connections the upstream accepted: through the
// proxy, one per connection a client opened.
func (u *Upstream) Conns() int64 { return u.conns.Load() }

// Arrivals returns the requests that reached the upstream, in the order
// their handling ended.
func (u *Upstream) Arrivals() []Arrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Arrival(nil), u.arrivals...)
}

// Effects returns the side effects performed for op.
func (u *Upstream) Effects(op string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.effects[op]
}

// KeyEffects returns the side effects performed per Idempotency-Key, for
// the requests that carried one.
func (u *Upstream) KeyEffects() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.byKey)
}

// Charge returns the charge that op's first side effect made, if any.
func (u *Upstream) Charge(op string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.charges[op]
}

// WaitIdle waits until no request has been in the upstream for quiet,
// or until max has passed: requests a proxy still delivers after their
// clients gave up must be counted too.
func (u *Upstream) WaitIdle(quiet, max time.Duration) {
	for end := time.Now().Add(max); time.Now().Before(end); time.Sleep(quiet / 4) {
		if u.inflight.Load() == 0 && time.Since(time.Unix(0, u.lastSeen.Load())) >= quiet {
			return
		}
	}
}

// recordKey carries a request's record in its context, to the handler
// that performs; connKey the count of requests on its connection.
type (
	recordKey struct{}
	connKey   struct{}
)

// record wraps next: it hashes the body as next reads it and records the
// arrival when next returns. It closes the connection after perConn
// requests, when perConn is positive.
func (u *Upstream) record(next http.Handler, perConn int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, ok := r.Context().Value(connKey{}).(*atomic.Int64); ok && perConn > 0 && n.Add(1) >= int64(perConn) {
			w.Header().Set("Connection", "close")
		}
		if r.URL.Path == WarmupPath {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		u.inflight.Add(1)
		u.lastSeen.Store(time.Now().UnixNano())
		defer func() {
			u.lastSeen.Store(time.Now().UnixNano())
			u.inflight.Add(-1)
		}()
		a := &Arrival{
			Op:     r.Header.Get(OpHeader),
			Method: r.Method,
			Key:    r.Header.Get(idempotency.DefaultHeader),
		}
		if ns, err := strconv.ParseInt(r.Header.Get(DeadlineHeader), 10, 64); err == nil {
			a.Deadline = time.Unix(0, ns)
		}
		hb := &hashBody{r: r.Body, h: sha256.New(), a: a}
		r.Body = hb
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), recordKey{}, a)))
		if a.At.IsZero() {
			a.At = time.Now()
		}
		a.Status = sw.status
		u.mu.Lock()
		u.arrivals = append(u.arrivals, *a)
		u.mu.Unlock()
	})
}

// perform is the upstream's handler: it reads the body whole, and, if
// the request's context is still live, performs the side effect and
// answers 201 with the charge and the body's hash.
func (u *Upstream) perform(w http.ResponseWriter, r *http.Request) {
	a := r.Context().Value(recordKey{}).(*Arrival)
	if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, maxBody)); err != nil || !a.Complete {
		if errors.Is(err, idempotency.ErrCallerDeadline) {
			idempotency.WriteDeadlineProblem(w, "upstream: reading the body: "+err.Error())
			return
		}
		idempotency.NothingDone(r.Context()) // a retry may bring the body whole
		http.Error(w, "upstream: reading the body: the body did not arrive whole", http.StatusBadRequest)
		return
	}
	if r.Context().Err() != nil {
		// Nobody waits for this answer any more: do not act on it.
		idempotency.WriteDeadlineProblem(w, "upstream: "+context.Cause(r.Context()).Error())
		return
	}
	u.mu.Lock()
	u.effects[a.Op]++
	if a.Key != "" {
		u.byKey[a.Key]++
	}
	u.next++
	charge := "ch_" + strconv.Itoa(u.next)
	if _, ok := u.charges[a.Op]; !ok {
		u.charges[a.Op] = charge
	}
	u.mu.Unlock()
	a.Performed, a.PerformedAt = true, time.Now()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(Receipt{Op: a.Op, Charge: charge, BodySHA: a.BodySHA, Pad: responsePad})
}

// Receipt is the upstream's answer to a performed request.
type Receipt struct {
	Op      string `json:"op"`          // the operation's id
	Charge  string `json:"charge"`      // the charge the side effect made
	BodySHA string `json:"body_sha256"` // the SHA-256, hex, of the body received
	Pad     string `json:"pad"`         // padding, so that a cut can fall inside the body (responsePad)
}

// hashBody hashes a request body as it is read, and marks the arrival
// complete at its end.
type hashBody struct {
	r io.ReadCloser
	h hash.Hash
	a *Arrival
}

func (b *hashBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	if err != nil && b.a.At.IsZero() {
		b.a.At = time.Now()
		if err == io.EOF {
			b.a.Complete = true
			b.a.BodySHA = hex.EncodeToString(b.h.Sum(nil))
		}
	}
	return n, err
}

func (b *hashBody) Close() error { return b.r.Close() }

// statusWriter remembers the status written through it; Unwrap lets
// http.ResponseController reach the connection (DeadlineHandler sets its
// read deadline through it).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Defaults of [HandlerOptions], used where a field is zero.
const (
	DefaultTTL              = 24 * time.Hour  // how long a response is replayed
	DefaultLockTTL          = 5 * time.Minute // how long a key stays in flight at most
	DefaultMaxRequestBody   = 1 << 20         // 1 MiB: largest request body fingerprinted
	DefaultMaxResponseBytes = 1 << 20         // 1 MiB: largest response body stored
	DefaultRetryAfter       = time.Second     // Retry-After of a 409 or 503
)

// ReplayedHeader is the response header set to "true" on a replayed
// response, as Stripe names it.
const ReplayedHeader = "Idempotent-Replayed"

// HandlerOptions configures [Handler]. The zero value is ready to use:
// POST and PATCH must carry an Idempotency-Key, keys are global, and
// responses are kept 24 hours in a [MemoryStore] of the handler's own.
type HandlerOptions struct {
	// Header is the request header that carries the key.
	// Empty means [DefaultHeader], "Idempotency-Key".
	Header string

	// Methods are the methods that are deduplicated; requests with other
	// methods pass through untouched. Nil means POST and PATCH.
	Methods []string

	// Optional lets requests without a key through, undeduplicated.
	// False (the default) means such a request gets 400.
	Optional bool

	// MaxKeyLength is the longest key accepted, in bytes; a longer one
	// gets 400. Zero means [DefaultMaxKeyLength] (255).
	MaxKeyLength int

	// Scope returns the namespace a request's key lives in, typically
	// the authenticated principal (account, API key ID, tenant), so that
	// two clients that send the same key neither collide nor read each
	// other's responses. Place Handler after the authentication
	// middleware so Scope can see the principal. Nil, or an empty
	// result, means one global namespace.
	Scope func(*http.Request) string

	// FingerprintHeaders names request headers whose values are part of
	// the request's fingerprint, besides the method, the path and query,
	// and a SHA-256 of the body. Nil means none.
	FingerprintHeaders []string

	// Store keeps locks and responses. Nil means a new [MemoryStore]
	// with [MemoryStoreOptions]{} for this handler alone.
	Store Store

	// TTL is how long a response is kept for replay.
	// Zero means [DefaultTTL] (24 hours).
	TTL time.Duration

	// LockTTL is how long a key stays locked while its first request
	// runs, should the server die without releasing it. It must be
	// longer than the slowest handler: past it, a retry runs again.
	// Zero means [DefaultLockTTL] (5 minutes).
	LockTTL time.Duration

	// MaxRequestBody is the largest request body that is read, in bytes,
	// to fingerprint a keyed request. A keyed request with a longer body
	// gets 413, since it could not be told from another with the same
	// key. Zero means [DefaultMaxRequestBody] (1 MiB).
	MaxRequestBody int64

	// MaxResponseBytes is the largest response body stored, in bytes. A
	// longer response is sent to the client as usual but not stored; the
	// key stays spent, and a retry gets 422 of type [TypeNotKept] instead
	// of a second run. Zero means [DefaultMaxResponseBytes] (1 MiB).
	MaxResponseBytes int64

	// Cacheable reports whether an outcome with this status is kept and
	// replayed. When it reports false the key is released, as [NothingDone]
	// does, and a retry runs the handler again. Nil means
	// [DefaultCacheable]: every status but 429 Too Many Requests.
	Cacheable func(status int) bool

	// RetryAfter is the wait advised, in the Retry-After header, to a
	// request that arrives while another with its key is in flight, or
	// when the store fails. Zero means [DefaultRetryAfter] (1 second).
	RetryAfter time.Duration

	// OnStoreError is called with the errors of Store calls. The request
	// is answered 503 when Begin fails. When Complete fails the key stays
	// locked until LockTTL, and a retry after that runs the handler again.
	// Nil means the errors go to Logger.
	OnStoreError func(r *http.Request, err error)

	// Logger, when OnStoreError is nil, logs the errors of Store calls at
	// Error level, with the request's method and path. Nil means they are
	// not logged: the handler writes to no logger the application did not
	// give it.
	Logger *slog.Logger
}

// DefaultCacheable is the default of [HandlerOptions.Cacheable]. It keeps
// every outcome but 429 Too Many Requests, 5xx included: a handler may
// fail after its side effect, and a second run would repeat it. A 429
// proves that the server did not act, so its key is released for a
// retry after the wait it asks; keeping it would refuse the operation
// for the whole TTL. A 503, even with Retry-After, is kept: it may come
// after the side effect, and a handler that knows it did nothing says so
// with [NothingDone].
func DefaultCacheable(status int) bool {
	return status != http.StatusTooManyRequests
}

// Handler returns a handler that makes next idempotent per key, after the
// IETF Idempotency-Key HTTP header draft and Stripe's practice.
//
// A request whose method is in o.Methods (POST and PATCH by default) must
// carry a key in the Idempotency-Key header, as a plain token or a quoted
// Structured Field string (see [ParseKey]); one without a key gets 400
// unless o.Optional is set, one with an invalid key or with the header
// twice gets 400. Then, under the key in the request's scope (o.Scope):
//
//   - The first request runs next. Its response is sent as next writes it
//     and stored, with a fingerprint of the request (method, path and
//     query, SHA-256 of the body, and o.FingerprintHeaders).
//   - A request with the same key and fingerprint, once the first is
//     done, gets the stored response, status, headers and body byte for
//     byte, with "Idempotent-Replayed: true"; next does not run.
//   - A request with the same key while the first still runs gets 409
//     Conflict with a Retry-After header.
//   - A request with the same key and another fingerprint gets 422
//     Unprocessable Content.
//
// Errors are RFC 9457 problem details (application/problem+json).
//
// A key runs next at most once. Every outcome of a run is kept, 5xx
// included, except in three cases. The handler called [NothingDone] (or
// [WriteDeadlineProblem]); or it answered an error with
// "Stripe-Should-Retry: true" or "X-Should-Retry: true", which claims the
// same; or o.Cacheable refused the status (by default only 429). Then the
// key is released and a retry runs next again.
// A kept error response (4xx or 5xx) gets "Stripe-Should-Retry: false",
// live and replayed, unless next set either header: a retry with the key
// would only get it again, and clients that read the header (sturdy's,
// Stripe's) stop. A response is stored even when the client went away
// before it arrived: that is the case the client's retry is for.
//
// A run whose response cannot be kept leaves the key spent: a body over
// o.MaxResponseBytes or over the store's limit, a hijacked connection, a
// 101, a panic. A retry then gets 422 Unprocessable Content of type
// [TypeNotKept], never a second run. The one exception is a server that
// dies while next runs: its lock expires after o.LockTTL, and a retry
// after that runs next again.
//
// Stored headers leave out hop-by-hop headers (Connection and those it
// names, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding, Upgrade),
// Date, which the replay gets fresh, and trailers, which are not stored.
// When next sets no Content-Type, the type net/http sniffs from the body
// is stored, so the replay carries the same. A replay carries a
// Content-Length.
//
// When the store fails at Begin, the request gets 503 with Retry-After
// rather than run without protection. So does a new key that finds a
// [MemoryStore] full of keys within their TTL: a store never forgets a
// key early, which would run it twice (see [MemoryStore]).
func Handler(next http.Handler, o HandlerOptions) http.Handler {
	h := &handler{
		next:        next,
		header:      o.Header,
		methods:     Options{Methods: o.Methods},
		optional:    o.Optional,
		maxKey:      o.MaxKeyLength,
		scope:       o.Scope,
		store:       o.Store,
		ttl:         o.TTL,
		lockTTL:     o.LockTTL,
		maxReq:      o.MaxRequestBody,
		maxResp:     o.MaxResponseBytes,
		cacheable:   o.Cacheable,
		retryAfter:  o.RetryAfter,
		onStoreErr:  o.OnStoreError,
		fingerprint: make([]string, len(o.FingerprintHeaders)),
	}
	for i, name := range o.FingerprintHeaders {
		h.fingerprint[i] = http.CanonicalHeaderKey(name)
	}
	if h.header == "" {
		h.header = DefaultHeader
	}
	h.header = http.CanonicalHeaderKey(h.header)
	if h.maxKey <= 0 {
		h.maxKey = DefaultMaxKeyLength
	}
	if h.store == nil {
		h.store = NewMemoryStore(MemoryStoreOptions{})
	}
	if h.ttl <= 0 {
		h.ttl = DefaultTTL
	}
	if h.lockTTL <= 0 {
		h.lockTTL = DefaultLockTTL
	}
	if h.maxReq <= 0 {
		h.maxReq = DefaultMaxRequestBody
	}
	if h.maxResp <= 0 {
		h.maxResp = DefaultMaxResponseBytes
	}
	if h.cacheable == nil {
		h.cacheable = DefaultCacheable
	}
	if h.retryAfter <= 0 {
		h.retryAfter = DefaultRetryAfter
	}
	if h.onStoreErr == nil && o.Logger != nil {
		h.onStoreErr = func(r *http.Request, err error) {
			o.Logger.LogAttrs(r.Context(), slog.LevelError, "idempotency: store error",
				slog.String("http.request.method", r.Method), slog.String("url.path", r.URL.Path), slog.String("error", err.Error()))
		}
	}
	if h.onStoreErr == nil {
		h.onStoreErr = func(*http.Request, error) {}
	}
	return h
}

type handler struct {
	next        http.Handler
	header      string
	methods     Options
	optional    bool
	maxKey      int
	scope       func(*http.Request) string
	fingerprint []string
	store       Store
	ttl         time.Duration
	lockTTL     time.Duration
	maxReq      int64
	maxResp     int64
	cacheable   func(int) bool
	retryAfter  time.Duration
	onStoreErr  func(*http.Request, error)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.methods.Applies(r.Method) {
		h.next.ServeHTTP(w, r)
		return
	}
	values := r.Header[h.header]
	switch {
	case len(values) == 0:
		if h.optional {
			h.next.ServeHTTP(w, r)
			return
		}
		writeProblem(w, http.StatusBadRequest, "idempotency: this request requires an "+h.header+" header", 0)
		return
	case len(values) > 1:
		writeProblem(w, http.StatusBadRequest, "idempotency: more than one "+h.header+" header", 0)
		return
	}
	key, err := ParseKey(values[0], h.maxKey)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, err.Error(), 0)
		return
	}

	body, status, err := h.readBody(r)
	if err != nil {
		if status == http.StatusGatewayTimeout {
			WriteDeadlineProblem(w, err.Error())
			return
		}
		writeProblem(w, status, err.Error(), 0)
		return
	}
	fp := h.fingerprintOf(r, body)
	if h.scope != nil {
		if s := h.scope(r); s != "" {
			// Keys hold no control characters, so the last NUL
			// separates scope and key unambiguously.
			key = s + "\x00" + key
		}
	}

	res, err := h.store.Begin(r.Context(), key, fp, h.lockTTL)
	if err != nil {
		h.onStoreErr(r, err)
		writeProblem(w, http.StatusServiceUnavailable, "idempotency: the idempotency store is unavailable", h.retryAfter)
		return
	}
	switch res.State {
	case Completed:
		if res.Fingerprint != fp {
			writeProblem(w, http.StatusUnprocessableEntity, "idempotency: this "+h.header+" was already used for a different request", 0)
			return
		}
		if res.Response == nil {
			writeNotKept(w, "idempotency: the request with this "+h.header+" was processed once, and its response was not kept; it is not run again")
			return
		}
		replay(w, res.Response)
		return
	case InFlight:
		if res.Fingerprint != fp {
			writeProblem(w, http.StatusUnprocessableEntity, "idempotency: this "+h.header+" is in use by a different request", 0)
			return
		}
		writeProblem(w, http.StatusConflict, "idempotency: a request with this "+h.header+" is still being processed", h.retryAfter)
		return
	case Acquired:
	default:
		h.onStoreErr(r, errors.New("idempotency: store returned invalid state "+strconv.Itoa(int(res.State))))
		writeProblem(w, http.StatusServiceUnavailable, "idempotency: the idempotency store is unavailable", h.retryAfter)
		return
	}

	st := &runState{}
	r2 := r.WithContext(context.WithValue(r.Context(), runStateKey{}, st))
	if body != nil {
		r2.Body = io.NopCloser(bytes.NewReader(body))
	} else {
		r2.Body = http.NoBody
	}
	rec := &recorder{w: w, limit: h.maxResp, sniffLen: -1, run: st, cacheable: h.cacheable}
	ctx := context.WithoutCancel(r.Context())
	finished := false
	defer func() {
		if finished {
			return
		}
		// next panicked or called runtime.Goexit: it may have acted, and
		// left no response to keep.
		if st.nothingDone.Load() {
			h.release(ctx, r, key, res.Token)
		} else {
			h.complete(ctx, r, key, res.Token, nil)
		}
	}()
	h.next.ServeHTTP(rec, r2)
	finished = true

	resp, ok := rec.result()
	switch {
	case st.nothingDone.Load(), rec.released():
		h.release(ctx, r, key, res.Token)
	case ok:
		h.complete(ctx, r, key, res.Token, resp)
	default: // a response that cannot be kept: the key is spent
		h.complete(ctx, r, key, res.Token, nil)
	}
}

// complete stores resp under key, or marks the key spent without a
// response when resp is nil or the store will not keep resp. The lock is
// never released here: a key whose Complete fails stays locked until
// LockTTL, as if the server had died.
func (h *handler) complete(ctx context.Context, r *http.Request, key, token string, resp *StoredResponse) {
	err := h.store.Complete(ctx, key, token, resp, h.ttl)
	if err != nil && resp != nil && !errors.Is(err, ErrLockLost) {
		// Too large for the store, or the store is full: keep the key
		// spent at least.
		h.onStoreErr(r, err)
		err = h.store.Complete(ctx, key, token, nil, h.ttl)
	}
	if err != nil {
		h.onStoreErr(r, err)
	}
}

// NothingDone tells the [Handler] running ctx's request that the request
// had no side effect, so its key is released when the handler returns. A
// retry with the key then runs the handler again. Call it when nothing was
// done: validation failed, a dependency refused before acting, the
// request was shed. Call it before writing the response, so that an error
// response does not get "Stripe-Should-Retry: false". It reports whether a
// Handler holds a key for the request; without one it does nothing.
// It is safe to call from any goroutine, more than once.
func NothingDone(ctx context.Context) bool {
	st, _ := ctx.Value(runStateKey{}).(*runState)
	if st == nil {
		return false
	}
	st.nothingDone.Store(true)
	return true
}

// runState is what next tells the Handler about its run, through the
// request's context.
type runState struct {
	nothingDone atomic.Bool
}

type runStateKey struct{}

func (h *handler) release(ctx context.Context, r *http.Request, key, token string) {
	if err := h.store.Release(ctx, key, token); err != nil {
		h.onStoreErr(r, err)
	}
}

// bodyError is a request body that cannot be fingerprinted.
type bodyError string

func (e bodyError) Error() string { return string(e) }

// errBodyLonger is readBody's error for a body longer than its
// Content-Length.
var errBodyLonger = errors.New("body longer than its Content-Length")

// readBody reads r's body whole, up to h.maxReq bytes. It returns nil for
// a request without a body, and the status to answer with on an error.
// Memory follows the bytes that arrive: no more than
// [DefaultMaxRequestBody] is reserved on a declared Content-Length.
func (h *handler) readBody(r *http.Request) ([]byte, int, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0, nil
	}
	var (
		body []byte
		err  error
	)
	switch n := r.ContentLength; {
	case n >= 0 && n <= min(h.maxReq, DefaultMaxRequestBody):
		// The common case: read exactly the declared length, then
		// make sure nothing follows.
		body = make([]byte, n)
		if _, err = io.ReadFull(r.Body, body); err == nil {
			var one [1]byte
			var m int
			m, err = io.ReadFull(r.Body, one[:])
			switch {
			case m > 0:
				err = errBodyLonger
			case err == io.EOF:
				err = nil
			}
		}
	case n <= h.maxReq:
		// An unknown length, or one too large to reserve on the
		// client's word: read the bytes as they come, up to one past
		// what may be read (without overflow at math.MaxInt64).
		limit := h.maxReq
		if n >= 0 {
			limit = n
		}
		body, err = io.ReadAll(&io.LimitedReader{R: r.Body, N: limit + min(1, math.MaxInt64-limit)})
		switch {
		case err != nil || n < 0:
		case int64(len(body)) > n:
			err = errBodyLonger
		case int64(len(body)) < n:
			err = io.ErrUnexpectedEOF
		}
	}
	switch {
	case errors.Is(err, ErrCallerDeadline):
		return nil, http.StatusGatewayTimeout, err // see DeadlineHandler
	case err != nil:
		return nil, http.StatusBadRequest, bodyError("idempotency: reading request body: " + err.Error())
	case r.ContentLength > h.maxReq || int64(len(body)) > h.maxReq:
		return nil, http.StatusRequestEntityTooLarge, bodyError("idempotency: a request body over " +
			strconv.FormatInt(h.maxReq, 10) + " bytes cannot be deduplicated")
	}
	return body, 0, nil
}

// fingerprintOf hashes what makes two requests with one key the same
// request: method, path and query, the chosen headers, and the body. Each
// part is length-prefixed, so that no two requests hash the same input.
// The result is 64 hexadecimal digits.
func (h *handler) fingerprintOf(r *http.Request, body []byte) string {
	var scratch [512]byte
	b := field(scratch[:0], r.Method)
	b = field(b, r.URL.EscapedPath())
	b = field(b, r.URL.RawQuery)
	for _, name := range h.fingerprint {
		vs := r.Header[name]
		b = binary.BigEndian.AppendUint64(b, uint64(len(vs)))
		for _, v := range vs {
			b = field(b, v)
		}
	}
	bodySum := sha256.Sum256(body)
	b = append(b, bodySum[:]...)
	sum := sha256.Sum256(b)
	var hx [2 * sha256.Size]byte
	hex.Encode(hx[:], sum[:])
	return string(hx[:])
}

func field(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// replay writes a stored response. The header values are copied, in one
// allocation, so that nothing downstream can change the stored ones.
func replay(w http.ResponseWriter, resp *StoredResponse) {
	h := w.Header()
	n := 1
	for _, vs := range resp.Header {
		n += len(vs)
	}
	values := make([]string, 0, n)
	for k, vs := range resp.Header {
		i := len(values)
		values = append(values, vs...)
		h[k] = values[i:len(values):len(values)]
	}
	h[ReplayedHeader] = append(values, "true")[n-1:]
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}

// TypeNotKept is the RFC 9457 problem type of the 422 answered to a retry
// whose key was spent by a run whose response was not kept.
const TypeNotKept = "https://github.com/sturdyhttp/sturdy/blob/main/docs/idempotency.md#response-not-kept"

// writeNotKept answers a retry whose key is spent without a stored
// response: 422, which no client retries, and "Stripe-Should-Retry: false".
func writeNotKept(w http.ResponseWriter, detail string) {
	w.Header().Set(stripeShouldRetry, "false")
	writeTypedProblem(w, http.StatusUnprocessableEntity, TypeNotKept, "Response not kept", detail, 0)
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// writeProblem answers with an RFC 9457 problem of type about:blank, whose
// title is therefore the status text, and a Retry-After header when
// retryAfter is positive.
func writeProblem(w http.ResponseWriter, status int, detail string, retryAfter time.Duration) {
	writeTypedProblem(w, status, "about:blank", http.StatusText(status), detail, retryAfter)
}

func writeTypedProblem(w http.ResponseWriter, status int, typ, title, detail string, retryAfter time.Duration) {
	b, _ := json.Marshal(problem{Type: typ, Title: title, Status: status, Detail: detail})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		secs := retryAfter / time.Second // rounded up below, without overflow
		if retryAfter%time.Second != 0 {
			secs++
		}
		h.Set("Retry-After", strconv.FormatInt(int64(secs), 10))
	}
	w.WriteHeader(status)
	w.Write(b)
}

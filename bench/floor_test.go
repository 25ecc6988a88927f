package bench

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/internal/window"
	"github.com/sturdyhttp/sturdy/transport"
)

// floorRT is a measuring stick, not a client: one RoundTripper that does,
// as cheaply as it can be written, the work that the layers of
// transport.New must do on a request that succeeds at once, fused into
// one, with nothing else:
//
//   - the Timeout: a context of the operation's own that carries a
//     deadline (a clock read), on a copy of the request, and a wrapper of
//     the response body that ends the context when the body is read;
//   - the retry budget, the breaker and the quotas: one host lookup,
//     the operation counted in the budget's window, the breaker's state
//     read before the request and the success counted in its window
//     after it (a second clock read), and the response's headers scanned
//     for quota families.
//
// It keeps no idempotency key (a GET carries none), retries nothing,
// never waits and never trips: what it costs on success is a floor under
// what any stack with those layers costs, whatever its design. See
// BENCHMARKS.md, "Instructions, counted with callgrind" and "The same work, side by side".
type floorRT struct {
	next    http.RoundTripper
	slot    *hosts.Slot[floorHost]
	epoch   time.Time
	timeout time.Duration
	skip    floorPart // parts left out, to see what each costs
}

// floorPart names a part of the floor's work.
type floorPart uint8

const (
	floorClock    floorPart = 1 << iota // the two clock reads
	floorDeadline                       // the context, the request copy and the body wrapper
	floorCounts                         // the budget's and the breaker's counts
	floorScan                           // the quota headers scan
)

type floorHost struct {
	budget  window.Counter // operations
	breaker window.Counter // successes, failures
	open    atomic.Bool    // the breaker's state: never set here
	quotas  atomic.Bool    // a response carried quota headers
}

func newFloor(next http.RoundTripper, skip floorPart) *floorRT {
	reg := hosts.New(hosts.Options{})
	slot := hosts.NewSlot(reg, func(hosts.Key) *floorHost {
		h := new(floorHost)
		h.budget.Init(int64(time.Second))
		h.breaker.Init(int64(time.Second))
		return h
	}, nil)
	return &floorRT{next: next, slot: slot, epoch: time.Now(), timeout: 10 * time.Minute, skip: skip}
}

// floorOp is what the floor allocates per operation, in one piece.
type floorOp struct {
	ctx  floorCtx
	req  http.Request
	body floorBody
}

func (f *floorRT) RoundTrip(req *http.Request) (*http.Response, error) {
	var now time.Duration
	if f.skip&floorClock == 0 {
		now = time.Since(f.epoch)
	}
	h := f.slot.GetURL(req.URL)
	if h == nil || h.open.Load() {
		return f.next.RoundTrip(req) // never taken here
	}
	if f.skip&floorCounts == 0 {
		h.budget.Add(int64(now), 1, 0)
	}
	if f.skip&floorDeadline != 0 {
		return f.withoutDeadline(req, h)
	}
	op := &floorOp{}
	op.ctx.parent, op.ctx.deadline = req.Context(), f.epoch.Add(now+f.timeout)
	op.req = *req.WithContext(&op.ctx)
	resp, err := f.next.RoundTrip(&op.req)
	if err != nil || !f.settle(resp, h) {
		op.ctx.release()
		return resp, err
	}
	_ = resp.Header["Content-Type"] // is the body a stream?
	op.body = floorBody{rc: resp.Body, c: &op.ctx}
	resp.Body = &op.body
	return resp, nil
}

// withoutDeadline is the floor without its deadline: the request as it
// came, the response as it went.
func (f *floorRT) withoutDeadline(req *http.Request, h *floorHost) (*http.Response, error) {
	resp, err := f.next.RoundTrip(req)
	if err == nil {
		f.settle(resp, h)
	}
	return resp, err
}

// settle counts resp's outcome and scans it for quotas; it reports
// whether resp succeeded.
func (f *floorRT) settle(resp *http.Response, h *floorHost) bool {
	var end time.Duration
	if f.skip&floorClock == 0 {
		end = time.Since(f.epoch)
	}
	ok := resp.StatusCode < 500
	if f.skip&floorCounts == 0 {
		if ok {
			h.breaker.Add(int64(end), 1, 0)
		} else {
			h.breaker.Add(int64(end), 0, 1)
		}
	}
	if f.skip&floorScan == 0 && quotaHeaders(resp.Header) {
		h.quotas.Store(true) // where they would be parsed and learnt
	}
	return ok
}

// quotaHeaders reports whether h may carry a quota: the scan that any
// stack that learns quotas from every response makes.
func quotaHeaders(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, "Ratelimit") || strings.HasPrefix(k, "X-Ratelimit-") || strings.HasPrefix(k, "Anthropic-Ratelimit-") {
			return true
		}
	}
	return false
}

// floorCtx is the least a deadline context can be: its channel and
// timer are made only when something waits, and released ends it.
type floorCtx struct {
	parent   context.Context
	deadline time.Time
	ended    atomic.Bool
	mu       sync.Mutex
	done     chan struct{}
	timer    *time.Timer
	err      error
}

func (c *floorCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *floorCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		} else {
			c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
		}
	}
	return c.done
}

func (c *floorCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *floorCtx) Value(k any) any { return c.parent.Value(k) }

func (c *floorCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	c.ended.Store(true)
	if c.done != nil {
		close(c.done)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
}

func (c *floorCtx) release() {
	if !c.ended.Load() {
		c.end(context.Canceled)
	}
}

// floorBody ends the context at the body's end.
type floorBody struct {
	rc io.ReadCloser
	c  *floorCtx
}

func (b *floorBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.c.release()
	}
	return n, err
}

func (b *floorBody) WriteTo(w io.Writer) (int64, error) {
	n, err := io.Copy(w, b.rc)
	b.c.release()
	return n, err
}

func (b *floorBody) Close() error {
	err := b.rc.Close()
	b.c.release()
	return err
}

// BenchmarkFloor sets the floor beside the clients it is a floor for, on
// the in-memory base: the bare client, go-retryablehttp's RoundTripper
// and transport.New with every layer.
func BenchmarkFloor(b *testing.B) {
	kinds := []clientKind{kindBare, kindBareTimeout, kindRetryablehttpRT, kindRetryablehttpRTTimeout, kindFailsafe, kindSturdy, floorKind("floor", 0),
		floorKind("floor-clock", floorClock), floorKind("floor-deadline", floorDeadline),
		floorKind("floor-counts", floorCounts), floorKind("floor-scan", floorScan)}
	for _, o := range successOps("http://api.test/v1/things")[:2] {
		b.Run("op="+o.name, func(b *testing.B) {
			for _, k := range kinds {
				b.Run("client="+k.name, func(b *testing.B) {
					runOps(b, k.new(clientConfig{base: memTransport{}}), o.op)
				})
			}
		})
	}
}

// kindBareTimeout is the bare client with net/http's own bound on the
// operation, http.Client.Timeout, set to sturdy's default Timeout: what a
// deadline costs when net/http places it.
var kindBareTimeout = clientKind{"bare-timeout", func(c clientConfig) client {
	return httpClient("bare-timeout", &http.Client{Transport: c.base, Timeout: c.opTimeout()})
}}

// floorKind is the floor with the parts in skip left out.
func floorKind(name string, skip floorPart) clientKind {
	return clientKind{name, func(c clientConfig) client {
		return stdClient(name, newFloor(c.base, skip))
	}}
}

// TestFloorDoesTheWork checks that the floor does what it stands for: the
// request that reaches the base carries a deadline Timeout from now, the
// body arrives whole, reading it to the end ends the context, the
// outcome is counted, and a quota header is seen.
func TestFloorDoesTheWork(t *testing.T) {
	var sent *http.Request
	base := transport.Func(func(r *http.Request) (*http.Response, error) {
		sent = r
		resp, err := memTransport{}.RoundTrip(r)
		resp.Header.Set("X-Ratelimit-Remaining", "9")
		return resp, err
	})
	f := newFloor(base, 0)
	before := time.Now()
	resp, err := (&http.Client{Transport: f}).Get("http://api.test/v1/things")
	if err != nil {
		t.Fatal(err)
	}
	dl, ok := sent.Context().Deadline()
	if want := before.Add(f.timeout); !ok || dl.Before(want) || dl.After(time.Now().Add(f.timeout)) {
		t.Errorf("deadline of the request sent: got %v, %t; want %v or a little after", dl, ok, want)
	}
	if err := sent.Context().Err(); err != nil {
		t.Errorf("context before the body is read: got %v, want nil", err)
	}
	body, err := io.ReadAll(resp.Body)
	if string(body) != "ok\n" || err != nil {
		t.Errorf("body: got %q, %v; want %q, nil", body, err, "ok\n")
	}
	if err := sent.Context().Err(); err != context.Canceled {
		t.Errorf("context once the body is read: got %v, want %v", err, context.Canceled)
	}
	h := f.slot.GetURL(sent.URL)
	now := int64(time.Since(f.epoch))
	if ops, _ := h.budget.Sum(now); ops != 1 {
		t.Errorf("operations counted: got %d, want 1", ops)
	}
	if ok, failed := h.breaker.Sum(now); ok != 1 || failed != 0 {
		t.Errorf("outcomes counted: got %d ok, %d failed; want 1, 0", ok, failed)
	}
	if !h.quotas.Load() {
		t.Errorf("quota headers %v not seen", resp.Header)
	}
}

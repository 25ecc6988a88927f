package faultproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/transport"
)

// Client is one way of sending the suite's operations: the default
// sturdy stack, or a bare client with a retry loop.
type Client struct {
	// Name is how the tables call it.
	Name string
	// New returns the client for one run, and a function that releases
	// it (closes its idle connections).
	New func(s Settings) (Doer, func())
	// Bare marks a client the suite only measures: its figures go in the
	// table, its promises are not checked.
	Bare bool
}

// Doer sends one operation's request and returns its response, whose
// body the suite reads and closes.
type Doer func(req *http.Request) (*http.Response, error)

// Settings are a run's sizes and limits.
type Settings struct {
	Workers  int           // goroutines sending operations at once
	Pace     time.Duration // the least time between two operations of one worker: a failure that comes fast does not bring the next operation sooner, as callers do not arrive faster when a request fails
	Ops      int           // operations in all
	Deadline time.Duration // each operation's deadline (its caller's context)
	Attempt  time.Duration // one attempt's limit (AttemptTimeout; the bare client's http.Client.Timeout)
	MinBody  int           // smallest request body, bytes
	MaxBody  int           // largest request body, bytes
	Vouched  bool          // the caller sets an Idempotency-Key on each operation; the upstream deduplicates
	Margin   time.Duration // how far past its deadline an operation may end
	// RequestsPerConn is how many requests the upstream serves on one
	// connection before it closes it (UpstreamOptions.RequestsPerConn).
	RequestsPerConn int
	QuietWait       time.Duration // how long the upstream must be idle before counting
	// Warmup, when positive, is how many requests the client sends
	// through the proxy, Workers at a time, before the phase's toxics are
	// added: it has been busy with a healthy host when the fault begins,
	// as a service is (a breaker judges a client with no history by its
	// first few outcomes). They are not operations of the run: the
	// upstream answers them without a side effect or a record, and their
	// connections are not counted.
	Warmup int
}

// Phase is one fault and how many connections it hits.
type Phase struct {
	Name   string  // the fault, for tables and test names
	Toxics []Toxic // what toxiproxy does to the connections
}

// Op is one operation of a run and what came of it.
type Op struct {
	ID       string    // the operation's id, sent in its body
	Key      string    // the Idempotency-Key the caller set; "" when unvouched
	Body     []byte    // the request body
	BodySHA  string    // the body's SHA-256, hex, as the upstream's receipt gives it
	Start    time.Time // when the caller called
	Deadline time.Time // the caller's deadline
	End      time.Time // when the response's body was read, or the error came
	OK       bool      // a 2xx with a receipt for this body, read whole
	Status   int       // the final response's status; 0 on an error
	Receipt  Receipt   // what the upstream answered, read from the body
	Err      error     // the operation's error
}

// Took returns how long the operation took.
func (o *Op) Took() time.Duration { return o.End.Sub(o.Start) }

// Result is what one run did: the operations, and the upstream's records.
type Result struct {
	Phase    string         // the phase's name
	Client   string         // the client's name
	Bare     bool           // the client has no retries of its own
	Settings Settings       // what the run was given
	Ops      []*Op          // the operations, in the order they started
	Arrivals []Arrival      // every request that reached the upstream
	Effects  map[string]int // side effects per operation
	// KeyEffects counts the side effects per Idempotency-Key, through
	// idempotency.Handler, when the run's requests carry keys.
	KeyEffects map[string]int
	Charges    map[string]string // the charge made for each operation id
	Conns      int64             // connections the upstream accepted
	Elapsed    time.Duration     // from the first operation's start to the quiet end
}

// Run runs s.Ops operations of one client through a fresh proxy with the
// phase's toxics to a fresh upstream, s.Workers at a time, waits until
// the upstream has been idle for s.QuietWait (a proxy may still be
// delivering requests whose callers gave up), and returns everything
// the suite checks and tabulates.
func Run(ctx context.Context, tp *Toxiproxy, ph Phase, c Client, s Settings) (*Result, error) {
	up := NewUpstream(UpstreamOptions{Dedup: s.Vouched, RequestsPerConn: s.RequestsPerConn})
	defer up.Close()
	// toxiproxy puts the name in its API's URLs: letters, digits, '.', '_' and '-' only.
	name := strings.TrimPrefix(keyOf(fmt.Sprintf("%s-%s-%d", ph.Name, c.Name, time.Now().UnixNano())), "key-")
	toxics := ph.Toxics
	if s.Warmup > 0 {
		toxics = nil // added after the warm-up
	}
	px, err := tp.Proxy(name, up.Addr, toxics)
	if err != nil {
		return nil, err
	}
	defer px.Delete()
	url := "http://" + px.Listen + "/charges"

	do, release := c.New(s)
	var warmConns int64
	if s.Warmup > 0 {
		warmUp(ctx, do, "http://"+px.Listen+WarmupPath, s)
		if err := addToxics(px, ph.Toxics); err != nil {
			release()
			return nil, err
		}
		warmConns = up.Conns()
	}
	ops := makeOps(ph.Name+"/"+c.Name, s)
	start := time.Now()
	work := make(chan *Op)
	var wg sync.WaitGroup
	for i := range s.Workers {
		wg.Go(func() {
			// Workers start spread over one Pace, as callers do not
			// arrive in step.
			time.Sleep(s.Pace * time.Duration(i) / time.Duration(s.Workers))
			for op := range work {
				next := time.Now().Add(s.Pace)
				runOp(ctx, do, url, op, s)
				time.Sleep(time.Until(next))
			}
		})
	}
	for _, op := range ops {
		work <- op
	}
	close(work)
	wg.Wait()
	release()
	up.WaitIdle(s.QuietWait, 5*s.Deadline)

	res := &Result{
		Phase: ph.Name, Client: c.Name, Bare: c.Bare, Settings: s, Ops: ops,
		Arrivals: up.Arrivals(), Effects: make(map[string]int), KeyEffects: up.KeyEffects(), Charges: make(map[string]string),
		Conns: up.Conns() - warmConns, Elapsed: time.Since(start),
	}
	for _, op := range ops {
		res.Effects[op.ID] = up.Effects(op.ID)
		res.Charges[op.ID] = up.Charge(op.ID)
	}
	return res, nil
}

// warmUp sends s.Warmup GETs of url, s.Workers at a time, each inside
// s.Deadline; what comes of them does not matter.
func warmUp(ctx context.Context, do Doer, url string, s Settings) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(s.Workers, s.Warmup) {
		wg.Go(func() {
			for next.Add(1) <= int64(s.Warmup) {
				ctx, cancel := context.WithTimeout(ctx, s.Deadline)
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err == nil {
					if resp, err := do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
				cancel()
			}
		})
	}
	wg.Wait()
}

// makeOps makes a run's operations: bodies of random sizes and bytes,
// from a seed fixed per run name, so runs repeat.
func makeOps(run string, s Settings) []*Op {
	h := sha256.Sum256([]byte(run))
	rng := rand.New(rand.NewChaCha8(h))
	ops := make([]*Op, s.Ops)
	for i := range ops {
		n := s.MinBody + rng.IntN(s.MaxBody-s.MinBody+1)
		body := make([]byte, n)
		for j := range body {
			body[j] = 'a' + byte(rng.IntN(26))
		}
		sum := sha256.Sum256(body)
		op := &Op{ID: run + "/" + strconv.Itoa(i), Body: body, BodySHA: hex.EncodeToString(sum[:])}
		if s.Vouched {
			op.Key = keyOf(op.ID)
		}
		ops[i] = op
	}
	return ops
}

// keyOf returns the Idempotency-Key of an operation: its ID as a token
// (letters, digits, '-', '.', '_').
func keyOf(id string) string {
	return "key-" + strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' {
			return r
		}
		return '-'
	}, id)
}

// runOp sends one operation and reads its answer, all inside its
// deadline.
func runOp(parent context.Context, do Doer, url string, op *Op, s Settings) {
	op.Start = time.Now()
	op.Deadline = op.Start.Add(s.Deadline)
	ctx, cancel := context.WithDeadline(parent, op.Deadline)
	defer cancel()
	defer func() { op.End = time.Now() }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(op.Body))
	if err != nil {
		op.Err = err
		return
	}
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set(OpHeader, op.ID)
	req.Header.Set(DeadlineHeader, strconv.FormatInt(op.Deadline.UnixNano(), 10))
	if op.Key != "" {
		req.Header.Set(idempotency.DefaultHeader, op.Key)
	}
	resp, err := do(req)
	if err != nil {
		op.Err = err
		return
	}
	defer resp.Body.Close()
	op.Status = resp.StatusCode
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		op.Err = fmt.Errorf("reading the answer: %w", err)
		return
	}
	if resp.StatusCode/100 != 2 {
		op.Err = fmt.Errorf("status %d", resp.StatusCode)
		return
	}
	if err := json.Unmarshal(data, &op.Receipt); err != nil {
		op.Err = fmt.Errorf("a 2xx whose body is not a receipt (%d bytes): %w", len(data), err)
		return
	}
	op.OK = true
}

// Summary is one row of the suite's table.
type Summary struct {
	Phase, Client string // the run's
	Ops, OK       int    // operations, and those that succeeded
	// Duplicates counts side effects beyond the first, over all
	// operations.
	Duplicates int
	// Missing counts operations the client saw succeed without exactly
	// one side effect.
	Missing int
	// Mismatches counts arrivals whose body differs from what the
	// operation sent, and receipts that are not the operation's.
	Mismatches int
	// Late counts side effects performed after their operation had
	// ended, failed or timed out: work its caller no longer waited for
	// (and, for a failed operation, a side effect the caller believes
	// did not happen).
	Late int
	// Failures counts the failed operations by why they failed.
	Failures map[string]int
	// Longest is the longest operation; Overshoot how far the latest one
	// ended past its deadline (0 when none did).
	Longest, Overshoot time.Duration
	Conns              int64 // connections the upstream accepted
	Arrivals           int   // requests that reached the upstream
}

// Summarize counts what the suite checks, for the table.
func (r *Result) Summarize() Summary {
	sm := Summary{Phase: r.Phase, Client: r.Client, Ops: len(r.Ops), Conns: r.Conns, Arrivals: len(r.Arrivals)}
	byID := make(map[string]*Op, len(r.Ops))
	for _, op := range r.Ops {
		byID[op.ID] = op
		n := r.Effects[op.ID]
		if n > 1 {
			sm.Duplicates += n - 1
		}
		if op.OK {
			sm.OK++
			if n != 1 {
				sm.Missing++
			}
			if op.Receipt.Op != op.ID || op.Receipt.BodySHA != op.BodySHA || op.Receipt.Charge != r.Charges[op.ID] {
				sm.Mismatches++
			}
		}
		if !op.OK {
			if sm.Failures == nil {
				sm.Failures = make(map[string]int)
			}
			sm.Failures[why(op)]++
		}
		sm.Longest = max(sm.Longest, op.Took())
		sm.Overshoot = max(sm.Overshoot, op.End.Sub(op.Deadline))
	}
	for _, a := range r.Arrivals {
		op := byID[a.Op]
		if op == nil || a.Complete && a.BodySHA != op.BodySHA {
			sm.Mismatches++
			continue
		}
		if a.Performed && a.PerformedAt.After(op.End) {
			sm.Late++
		}
	}
	return sm
}

// Check returns the promises a run of sturdy broke, each as an error: at
// most one side effect per operation, and per idempotency key; exactly one for each operation the
// client saw succeed; every body that arrived byte-identical to the one
// sent, and every receipt the operation's own; no operation past its
// deadline by more than the margin.
func (r *Result) Check() error {
	var errs []error
	byID := make(map[string]*Op, len(r.Ops))
	for _, op := range r.Ops {
		byID[op.ID] = op
		n := r.Effects[op.ID]
		switch {
		case n > 1:
			errs = append(errs, fmt.Errorf("%s: %d side effects, want at most 1", op.ID, n))
		case op.OK && n != 1:
			errs = append(errs, fmt.Errorf("%s: succeeded with %d side effects, want 1", op.ID, n))
		}
		if op.OK && (op.Receipt.Op != op.ID || op.Receipt.BodySHA != op.BodySHA || op.Receipt.Charge != r.Charges[op.ID]) {
			errs = append(errs, fmt.Errorf("%s: got receipt %s for %s, body %.12s, want %s for %s, body %.12s",
				op.ID, op.Receipt.Charge, op.Receipt.Op, op.Receipt.BodySHA, r.Charges[op.ID], op.ID, op.BodySHA))
		}
		if over := op.End.Sub(op.Deadline); over > r.Settings.Margin {
			errs = append(errs, fmt.Errorf("%s: ended %v past its deadline, want at most %v (%v)", op.ID, over, r.Settings.Margin, op.Err))
		}
	}
	for key, n := range r.KeyEffects {
		if n > 1 {
			errs = append(errs, fmt.Errorf("key %s: %d side effects through idempotency.Handler, want 1", key, n))
		}
	}
	for _, a := range r.Arrivals {
		op := byID[a.Op]
		switch {
		case op == nil:
			errs = append(errs, fmt.Errorf("upstream got a request for unknown operation %q", a.Op))
		case a.Complete && a.BodySHA != op.BodySHA:
			errs = append(errs, fmt.Errorf("%s: a body arrived with SHA-256 %.12s, want %.12s", a.Op, a.BodySHA, op.BodySHA))
		case op.Key != a.Key:
			errs = append(errs, fmt.Errorf("%s: arrived with key %q, want %q", a.Op, a.Key, op.Key))
		}
	}
	return errors.Join(errs...)
}

// why names the reason an operation failed, for the table.
func why(op *Op) string {
	err := op.Err
	var ne net.Error
	switch {
	case err == nil:
		return "no receipt"
	case op.Status != 0 && op.Status/100 != 2:
		return "status " + strconv.Itoa(op.Status)
	case errors.Is(err, transport.ErrCircuitOpen):
		return "circuit open"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	}
	return "other"
}

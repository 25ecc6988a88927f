package idempotency_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// ledger is a payments service: every run of its handler books a charge.
// It knows nothing about idempotency.
type ledger struct {
	mu      sync.Mutex
	charges map[string][]string // order → charge IDs booked for it
	next    int
	delay   time.Duration // how long booking a charge takes
}

func newLedger() *ledger { return &ledger{charges: map[string][]string{}} }

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Order  string `json:"order"`
		Amount int    `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Order == "" {
		http.Error(w, "bad charge", http.StatusBadRequest)
		return
	}
	if l.delay > 0 {
		time.Sleep(l.delay) // the bank is slow, and does not stop when the client leaves
	}
	l.mu.Lock()
	l.next++
	id := fmt.Sprintf("ch_%04d", l.next)
	l.charges[in.Order] = append(l.charges[in.Order], id)
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%q,"order":%q,"amount":%d}`, id, in.Order, in.Amount)
}

// faulty drops the first cuts[i] connections of the requests for order i
// after the handler ran (the response is lost, the charge is booked), and
// the first resets[i] before it ran.
type faulty struct {
	next         http.Handler
	cut, reset   func(order int) int
	mu           sync.Mutex
	seen         map[string]int // arrivals per idempotency key
	cuts, resets atomic.Int64
}

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var order int
	fmt.Sscanf(r.URL.Path, "/charges/%d", &order)
	key := r.Header.Get(idempotency.DefaultHeader)
	f.mu.Lock()
	f.seen[key]++
	n := f.seen[key]
	f.mu.Unlock()
	switch resets := f.reset(order); {
	case n <= resets:
		f.resets.Add(1)
		httptestutil.ResetAfterRead().ServeHTTP(w, r)
	case n <= resets+f.cut(order):
		f.cuts.Add(1)
		httptestutil.CutAfter(f.next).ServeHTTP(w, r)
	default:
		f.next.ServeHTTP(w, r)
	}
}

// TestEndToEndLostResponses runs sturdy's client stack against a payments
// handler wrapped in idempotency.Handler, over an in-memory network that
// loses responses after the handler ran (and drops some requests before
// it ran). 30 charges are made at once; each must be booked exactly once
// and its client must get the charge that was booked.
func TestEndToEndLostResponses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const orders = 30
		l := newLedger()
		f := &faulty{
			next:  idempotency.Handler(l, idempotency.HandlerOptions{}),
			cut:   func(i int) int { return i % 3 },     // 0, 1 or 2 lost responses
			reset: func(i int) int { return i % 5 / 4 }, // every fifth order loses a request first
			seen:  map[string]int{},
		}
		n := httptestutil.NewNetwork()
		srv := n.Serve("payments.test", f)
		defer srv.Close()
		base := n.Transport()
		defer base.CloseIdleConnections()
		client := &http.Client{Transport: transport.Chain(base,
			transport.IdempotencyKey(idempotency.Options{Hosts: []string{"payments.test"}}),
			transport.Retry(policy.Retry{MaxAttempts: 5, Backoff: policy.Exponential(100*time.Millisecond, time.Second)}),
		)}

		got := make([]string, orders)
		var wg sync.WaitGroup
		for i := range orders {
			wg.Go(func() {
				body := fmt.Sprintf(`{"order":"order-%d","amount":%d}`, i, 100*(i+1))
				resp, err := client.Post(fmt.Sprintf("%s/charges/%d", srv.URL, i), "application/json", strings.NewReader(body))
				if err != nil {
					t.Errorf("order %d: %v", i, err)
					return
				}
				defer resp.Body.Close()
				var out struct{ ID, Order string }
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
					t.Errorf("order %d: status %d, decode %v; want 201 with a charge", i, resp.StatusCode, err)
					return
				}
				wantReplay := f.cut(i) > 0
				if replayed := resp.Header.Get(idempotency.ReplayedHeader) == "true"; replayed != wantReplay {
					t.Errorf("order %d: replayed %v, want %v", i, replayed, wantReplay)
				}
				got[i] = out.ID
			})
		}
		wg.Wait()

		for i := range orders {
			booked := l.charges[fmt.Sprintf("order-%d", i)]
			if len(booked) != 1 {
				t.Errorf("order %d: booked %d charges %v, want exactly 1", i, len(booked), booked)
				continue
			}
			if got[i] != booked[0] {
				t.Errorf("order %d: client got charge %q, want the booked %q", i, got[i], booked[0])
			}
		}
		if l.next != orders {
			t.Errorf("charges booked = %d, want %d", l.next, orders)
		}
		// The faults did happen: 0+1+2 lost responses per three orders, and
		// a lost request for every fifth.
		if got, want := f.cuts.Load(), int64(orders); got != want {
			t.Errorf("responses lost = %d, want %d", got, want)
		}
		if got, want := f.resets.Load(), int64(orders/5); got != want {
			t.Errorf("requests lost = %d, want %d", got, want)
		}
	})
}

// TestEndToEndInFlight has a slow payment and a client whose attempts time
// out before it is done: the first attempt books the charge after the
// client left; the retries that arrive meanwhile get 409 with
// Retry-After, which the client honours, and the one after the charge is
// booked gets it replayed.
func TestEndToEndInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLedger()
		l.delay = 2500 * time.Millisecond
		var statuses []int
		var mu sync.Mutex
		idem := idempotency.Handler(l, idempotency.HandlerOptions{})
		rec := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sw := &statusWriter{ResponseWriter: w}
			idem.ServeHTTP(sw, r)
			mu.Lock()
			statuses = append(statuses, sw.status)
			mu.Unlock()
		})
		n := httptestutil.NewNetwork()
		srv := n.Serve("payments.test", rec)
		defer srv.Close()
		base := n.Transport()
		defer base.CloseIdleConnections()
		client := &http.Client{Transport: transport.Chain(base,
			transport.IdempotencyKey(idempotency.Options{Hosts: []string{"payments.test"}}),
			transport.Retry(policy.Retry{MaxAttempts: 6, Backoff: policy.Exponential(100*time.Millisecond, time.Second)}),
			transport.Deadline(time.Second), // per attempt
		)}
		start := time.Now()
		resp, err := client.Post(srv.URL+"/charges/1", "application/json", strings.NewReader(`{"order":"order-1","amount":500}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 || resp.Header.Get(idempotency.ReplayedHeader) != "true" {
			t.Errorf("final: %d replayed=%q %s; want a replayed 201", resp.StatusCode, resp.Header.Get(idempotency.ReplayedHeader), b)
		}
		if booked := l.charges["order-1"]; len(booked) != 1 || !strings.Contains(string(b), booked[0]) {
			t.Errorf("booked %v, client got %s; want one charge, the one the client got", booked, b)
		}
		// Attempt 1 (0s) times out at 1s; attempt 2 (1.1s) gets 409,
		// Retry-After 1s; attempt 3 (2.1s) gets 409; attempt 4 (3.1s)
		// gets the replay. The first run's 201 is logged last, at 2.5s,
		// when its handler returns, after the client left.
		mu.Lock()
		defer mu.Unlock()
		if got, want := fmt.Sprint(statuses), "[409 409 201 201]"; got != want {
			t.Errorf("server statuses = %s, want %s", got, want)
		}
		if got, want := time.Since(start), 3100*time.Millisecond; got != want {
			t.Errorf("took %v, want %v", got, want)
		}
	})
}

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

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	return w.ResponseWriter.Write(p)
}

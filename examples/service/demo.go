package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
)

// demo runs the scenario twice, with the outbound client as it was and
// with sturdy, and prints what happened.
func demo(out io.Writer) error {
	fmt.Fprintln(out, "An orders service takes POST /orders behind idempotency.Handler and charges each order")
	fmt.Fprintln(out, "through a payments API, with an Idempotency-Key made from the order's own key. The payments")
	fmt.Fprintln(out, "API is flaky: it first answers 503, then makes the charge but drops the connection before")
	fmt.Fprintln(out, "its answer, then works. A caller posts one order, retrying up to 3 times on a 5xx, then")
	fmt.Fprintln(out, "sends it once more, as if its answer had been lost.")
	fmt.Fprintln(out)
	for _, c := range []struct {
		title  string
		client *http.Client
	}{
		{"1. The outbound client as it was: &http.Client{Timeout: 10 * time.Second}", legacyClient()},
		{"2. One line changed: &http.Client{Transport: transport.New(transport.Options{Timeout: 10 * time.Second, PropagateDeadline: true})}", sturdyClient()},
	} {
		fmt.Fprintln(out, c.title)
		o, err := scenario(out, c.client, 3)
		c.client.CloseIdleConnections()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "   => the caller got %s. Orders made: %d, charges made: %d; the order handler ran %d time(s), payments got %d request(s).\n\n",
			joinStatuses(o.statuses), o.orders, o.charges, o.runs, len(o.payments))
	}
	fmt.Fprintln(out, "With sturdy the caller's first try succeeds: the service's client retries the 503 and the dropped")
	fmt.Fprintln(out, "connection itself, after jittered waits, inside one 10 s budget. The POST is sent again only because")
	fmt.Fprintln(out, "the service vouches for it: it carries the service's own Idempotency-Key (sturdy adds none to a")
	fmt.Fprintln(out, "request nobody vouched for), every attempt the same one, and payments replays the charge it made.")
	fmt.Fprintln(out, "Either way, idempotency.Handler answers the repeated order from its store: one order, one charge.")
	return nil
}

// outcome is what one scenario did.
type outcome struct {
	statuses []int    // what the caller got, in order, the final resend included
	replayed bool     // the final resend's answer was a replay
	payments []string // one line per request payments got
	charges  int64    // charges payments made
	orders   int      // orders the service made
	runs     int64    // times the order handler ran
}

// scenario starts a flaky payments API and the service with client as
// its outbound client, on loopback; a caller posts one order with up to
// tries tries, then sends it once more. It prints each hop to out.
func scenario(out io.Writer, client *http.Client, tries int) (outcome, error) {
	pay := httptestutil.NewPayments(httptestutil.PaymentsConfig{})
	log := newPaymentsLog(pay, httptestutil.Script(
		// The 503 closes its connection, so the next request comes on a new
		// one, where net/http does not resend by itself.
		httptestutil.Status(http.StatusServiceUnavailable, "payments: overloaded, try again\n", "Connection", "close"),
		httptestutil.CutAfter(pay),
		httptestutil.Handler(pay).Forever(),
	))
	paySrv := httptest.NewServer(log)
	defer paySrv.Close()

	svc := newOrders(client, paySrv.URL)
	svcSrv := httptest.NewServer(svc.handler())
	defer svcSrv.Close()

	caller := &http.Client{Timeout: 30 * time.Second}
	defer caller.CloseIdleConnections()
	const key = "order-1001"
	body := `{"item":"espresso machine","amount":24900,"currency":"eur"}`

	var o outcome
	send := func(what string) (int, error) {
		fmt.Fprintf(out, "   caller   -> POST /orders (Idempotency-Key: %s)%s\n", key, what)
		req, err := http.NewRequest(http.MethodPost, svcSrv.URL+"/orders", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idempotency.DefaultHeader, key)
		resp, err := caller.Do(req)
		if err != nil {
			return 0, fmt.Errorf("service: demo: calling the service: %w", err)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("service: demo: reading the service's answer: %w", err)
		}
		for _, line := range log.flush() {
			fmt.Fprintf(out, "     %s\n", line)
		}
		o.statuses = append(o.statuses, resp.StatusCode)
		o.replayed = resp.Header.Get(idempotency.ReplayedHeader) == "true"
		note := ""
		if o.replayed {
			note = " (" + idempotency.ReplayedHeader + ": true)"
		}
		fmt.Fprintf(out, "   caller   <- %s%s %s\n", resp.Status, note, compact(data))
		return resp.StatusCode, nil
	}

	for try := 1; try <= tries; try++ {
		what := ""
		if try > 1 {
			what = fmt.Sprintf(", try %d", try)
		}
		status, err := send(what)
		if err != nil {
			return o, err
		}
		if status < 500 {
			break
		}
	}
	if _, err := send(", again: its answer was lost"); err != nil {
		return o, err
	}
	o.payments = log.all()
	o.charges = pay.Charges()
	o.orders = svc.created()
	o.runs = svc.runs.Load()
	return o, nil
}

// paymentsLog describes each request the payments API gets and what came
// of it.
type paymentsLog struct {
	pay  *httptestutil.Payments
	next http.Handler

	mu       sync.Mutex
	done     *sync.Cond // broadcast, with mu held, when a request ends
	inflight int        // requests being served
	n        int
	lines    map[int]string
	flushed  int
}

func newPaymentsLog(pay *httptestutil.Payments, next http.Handler) *paymentsLog {
	l := &paymentsLog{pay: pay, next: next, lines: make(map[int]string)}
	l.done = sync.NewCond(&l.mu)
	return l
}

func (l *paymentsLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.n++
	n := l.n
	l.inflight++
	l.mu.Unlock()

	before := l.pay.Charges()
	sw := &statusWriter{ResponseWriter: w}
	l.next.ServeHTTP(sw, r)
	charged := l.pay.Charges() > before

	var what string
	switch {
	case sw.status == 0 && charged:
		what = "charged, then the connection dropped before the answer"
	case sw.status == 0:
		what = "the connection dropped, no answer"
	case sw.Header().Get(idempotency.ReplayedHeader) == "true":
		what = fmt.Sprintf("%d %s, the stored answer replayed: no new charge", sw.status, http.StatusText(sw.status))
	case charged:
		what = fmt.Sprintf("%d %s, charged", sw.status, http.StatusText(sw.status))
	default:
		what = fmt.Sprintf("%d %s", sw.status, http.StatusText(sw.status))
	}
	line := fmt.Sprintf("payments <- %s %s #%d (Idempotency-Key: %s): %s", r.Method, r.URL.Path, n, r.Header.Get(idempotency.DefaultHeader), what)
	l.mu.Lock()
	l.lines[n] = line
	l.inflight--
	l.done.Broadcast()
	l.mu.Unlock()
}

// wait waits, with l.mu held, until no request is being served.
func (l *paymentsLog) wait() {
	for l.inflight > 0 {
		l.done.Wait()
	}
}

// flush waits for the requests being served and returns the lines not
// returned yet, in arrival order.
func (l *paymentsLog) flush() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wait()
	var out []string
	for ; l.flushed < l.n; l.flushed++ {
		out = append(out, l.lines[l.flushed+1])
	}
	return out
}

// all returns every line, in arrival order.
func (l *paymentsLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wait()
	keys := make([]int, 0, len(l.lines))
	for k := range l.lines {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = l.lines[k]
	}
	return out
}

// statusWriter remembers the status written through it. Unwrap lets
// http.ResponseController reach the connection beneath, to hijack it.
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

// compact returns a JSON body on one line, or the body as it is.
func compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) == nil {
		return buf.String()
	}
	return strings.TrimSpace(string(b))
}

func joinStatuses(s []int) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", then ")
}

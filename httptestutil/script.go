package httptestutil

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
)

// StatusScriptExhausted is the status a [Scripted] server answers once its
// steps have run out. It is outside the registered range on purpose: no
// retry policy treats it as transient, so a client that sends more requests
// than the test planned sees it at once instead of hiding it behind retries.
const StatusScriptExhausted = 599

// Step is one scripted answer of a [Scripted] server. A Step is also an
// [http.Handler], so a single fault can be served on its own:
// n.Serve("api.test", httptestutil.Hang()).
//
// Steps are made by the constructors of this package ([Status], [Problem],
// [RetryAfterSeconds], [Hang], [Reset], [Handler], ...). Each answers one
// request unless [Step.Times] or [Step.Forever] says otherwise. The zero
// Step answers no request: a [Scripted] server skips it.
type Step struct {
	h       http.Handler
	times   int
	forever bool
	name    string
}

func newStep(name string, f http.HandlerFunc) Step {
	return Step{h: f, times: 1, name: name}
}

// Times returns s answering the next n requests instead of one. n < 1
// makes a step that answers none: a [Scripted] server skips it.
func (s Step) Times(n int) Step {
	s.times = max(n, 0)
	s.forever = false
	return s
}

// Forever returns s answering every request from its turn on: the steps
// after it in a script are never reached.
func (s Step) Forever() Step {
	s.forever = true
	return s
}

// String names the step for test messages, as in "Status(503)×2".
func (s Step) String() string {
	name := s.name
	if name == "" {
		name = "Step"
	}
	switch {
	case s.forever:
		return name + "×∞"
	case s.times != 1:
		return fmt.Sprintf("%s×%d", name, s.times)
	}
	return name
}

// ServeHTTP answers r as the step does. The zero Step answers
// [StatusScriptExhausted].
func (s Step) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.h == nil {
		exhausted(w, r, 0)
		return
	}
	s.h.ServeHTTP(w, r)
}

// Scripted is an [http.Handler] that answers each incoming request with
// the next step of its script, in arrival order. Once every step is used
// up it answers [StatusScriptExhausted] with the body
// "httptestutil: script exhausted ..." and counts the request in
// [Scripted.Exhausted], so the test can see that the client sent more
// than planned.
//
// A Scripted server is safe for concurrent use; concurrent requests take
// steps in the order they reach ServeHTTP.
type Scripted struct {
	mu        sync.Mutex
	steps     []Step
	next      int // index of the step to serve next
	used      int // requests steps[next] has answered
	served    int
	exhausted int
}

// Script returns a server that answers requests with steps, in order.
func Script(steps ...Step) *Scripted {
	return &Scripted{steps: append([]Step(nil), steps...)}
}

// ServeHTTP answers r with the current step.
func (s *Scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	for s.next < len(s.steps) && !s.steps[s.next].forever && s.used >= s.steps[s.next].times {
		s.next++
		s.used = 0
	}
	if s.next >= len(s.steps) {
		s.exhausted++
		n := s.served + s.exhausted
		s.mu.Unlock()
		exhausted(w, r, n)
		return
	}
	step := s.steps[s.next]
	s.used++
	s.served++
	s.mu.Unlock()
	step.ServeHTTP(w, r)
}

// Served reports how many requests a step has answered.
func (s *Scripted) Served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// Exhausted reports how many requests arrived after the script ran out.
func (s *Scripted) Exhausted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exhausted
}

// Pending reports how many requests the finite steps left in the script
// still expect. A step marked [Step.Forever] expects none.
func (s *Scripted) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i := s.next; i < len(s.steps); i++ {
		st := s.steps[i]
		if st.forever {
			break
		}
		n += st.times
		if i == s.next {
			n -= min(s.used, st.times)
		}
	}
	return n
}

// WantDone fails t unless every finite step has been used and no request
// arrived after the script ran out.
func (s *Scripted) WantDone(t testing.TB) {
	t.Helper()
	if p := s.Pending(); p != 0 {
		t.Errorf("httptestutil: script has %d request(s) still pending after %d served, want 0", p, s.Served())
	}
	if e := s.Exhausted(); e != 0 {
		t.Errorf("httptestutil: %d request(s) arrived after the script ran out, want 0", e)
	}
}

// WantServed fails t unless exactly n requests were answered by a step.
func (s *Scripted) WantServed(t testing.TB, n int) {
	t.Helper()
	if got := s.Served(); got != n {
		t.Errorf("httptestutil: script served %d request(s), want %d", got, n)
	}
}

func exhausted(w http.ResponseWriter, r *http.Request, n int) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(StatusScriptExhausted)
	fmt.Fprintf(w, "httptestutil: script exhausted (request %d: %s %s)\n", n, r.Method, r.URL.RequestURI())
}

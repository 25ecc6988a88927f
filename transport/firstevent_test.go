package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
)

// events joins SSE event lists.
func events(lists ...[]httptestutil.SSEEvent) []httptestutil.SSEEvent {
	var all []httptestutil.SSEEvent
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

func one(e httptestutil.SSEEvent) []httptestutil.SSEEvent { return []httptestutil.SSEEvent{e} }

// fetchStream sends one request with rt and returns the status, the body
// read whole, and the error of the round trip or of the read.
func fetchStream(t *testing.T, rt http.RoundTripper, method, url string) (int, string, error) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"stream":true}`)
	}
	// A bound, so that a bare client on a stream that never sends an
	// event gives up (after an hour of the bubble's time) instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, body)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), err
}

// ok is a stream that succeeds at once, in Anthropic's shape.
var okStream = events(httptestutil.AnthropicStart(), httptestutil.AnthropicText(0, 0, "hello", " world"))

// Each rule of "streams commit at their first event", through New, with
// the bare net/http client beside it on the same script: the stack never
// fails what the bare client delivers, never sends an unvouched request
// twice unless the event proves the server did not act, and hands back
// the last stream byte for byte when no attempt is left.
func TestFirstEventRules(t *testing.T) {
	overloaded := httptestutil.AnthropicErrorAfterStart("overloaded_error")
	tests := []struct {
		name     string
		method   string
		vouched  bool
		opts     func(*Options)
		steps    []httptestutil.Step
		want     []httptestutil.SSEEvent // the stream the caller reads; nil: the first step's, as the bare client reads it
		wantBody string                  // the body the caller reads, when not SSE
		requests int
		wantErr  string // the error's text has this, when the stack fails
	}{
		{name: "overloaded_error after message_start, vouched POST: retried, invisible",
			method: "POST", vouched: true,
			steps: []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)},
			want:  okStream, requests: 2},
		{name: "OpenAI server_error chunk, GET: retried, invisible",
			method: "GET",
			steps: []httptestutil.Step{
				httptestutil.SSE(httptestutil.OpenAIErrorChunk("server_error", "The server had an error")),
				httptestutil.SSE(httptestutil.OpenAIChunks(0, 0, "hi")...)},
			want: httptestutil.OpenAIChunks(0, 0, "hi"), requests: 2},
		{name: "rate_limit_error, unvouched POST: the server did not act, retried",
			method: "POST",
			steps:  []httptestutil.Step{httptestutil.AnthropicErrorAfterStart("rate_limit_error"), httptestutil.SSE(okStream...)},
			want:   okStream, requests: 2},
		{name: "overloaded_error, unvouched POST: sent once, the stream handed back as it came",
			method: "POST",
			steps:  []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)}, requests: 1},
		{name: "invalid_request_error is final: handed back at once",
			method: "POST", vouched: true,
			steps: []httptestutil.Step{httptestutil.AnthropicErrorAfterStart("invalid_request_error"), httptestutil.SSE(okStream...)}, requests: 1},
		{name: "an error after the first content event is the caller's: sent once",
			method: "POST", vouched: true,
			steps: []httptestutil.Step{
				httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.AnthropicText(0, 0, "partial")[:2], one(httptestutil.AnthropicError("overloaded_error", "Overloaded")))...),
				httptestutil.SSE(okStream...)}, requests: 1},
		{name: "every attempt overloaded: the last stream handed back byte for byte",
			method: "POST", vouched: true,
			opts:  func(o *Options) { o.Retry.MaxAttempts = 3 },
			steps: []httptestutil.Step{overloaded.Times(3)}, requests: 3},
		{name: "a stream that ends before its first event, GET: retried",
			method: "GET",
			steps:  []httptestutil.Step{httptestutil.SSE(httptestutil.AnthropicStart()...), httptestutil.SSE(okStream...)},
			want:   okStream, requests: 2},
		{name: "keepalives only past FirstEventTimeout, GET: cut and retried",
			method: "GET",
			opts:   func(o *Options) { o.FirstEventTimeout = 5 * time.Second },
			steps:  []httptestutil.Step{httptestutil.KeepaliveStall(100 * time.Millisecond), httptestutil.SSE(okStream...)},
			want:   okStream, requests: 2},
		{name: "keepalives only past FirstEventTimeout, unvouched POST: cut, not sent again",
			method:   "POST",
			opts:     func(o *Options) { o.FirstEventTimeout = 5 * time.Second },
			steps:    []httptestutil.Step{httptestutil.KeepaliveStall(100 * time.Millisecond), httptestutil.SSE(okStream...)},
			requests: 1, wantErr: "FirstEventTimeout of 5s exceeded"},
		{name: "a slow first token within FirstEventTimeout is waited for",
			method: "GET",
			opts:   func(o *Options) { o.FirstEventTimeout = 5 * time.Second },
			steps: []httptestutil.Step{httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.Keepalives(40, 100*time.Millisecond),
				httptestutil.AnthropicText(0, 0, "late"))...)}, requests: 1},
		{name: "a first token after 12 minutes of keepalives, past Timeout: waited for",
			method: "GET",
			steps: []httptestutil.Step{httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.Keepalives(48, 15*time.Second),
				httptestutil.AnthropicText(0, 0, "late"))...)}, requests: 1},
		{name: "Timeout comes back when the stream fails: no retry past it, the stream handed back",
			method: "GET",
			opts:   func(o *Options) { o.Timeout = 10 * time.Second },
			steps: []httptestutil.Step{httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.Keepalives(12, time.Second),
				one(httptestutil.AnthropicError("overloaded_error", "Overloaded")))...), httptestutil.SSE(okStream...)}, requests: 1},
		{name: "FirstEventTimeout negative: handed back at the headers, as before",
			method: "POST", vouched: true,
			opts:  func(o *Options) { o.FirstEventTimeout = -1 },
			steps: []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)}, requests: 1},
		{name: "Disable: LayerFirstEvent: handed back at the headers, as a negative FirstEventTimeout",
			method: "POST", vouched: true,
			opts:  func(o *Options) { o.Disable = LayerFirstEvent },
			steps: []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)}, requests: 1},
		{name: "no preambles: message_start commits the stream",
			method: "POST", vouched: true,
			opts:  func(o *Options) { o.Stream.Preambles = []string{} },
			steps: []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)}, requests: 1},
		{name: "NDJSON whose first line is an error, GET: retried",
			method: "GET",
			steps: []httptestutil.Step{
				httptestutil.Status(200, `{"error":{"type":"server_error","message":"boom"}}`+"\n", "Content-Type", "application/x-ndjson"),
				httptestutil.Status(200, `{"response":"hi","done":true}`+"\n", "Content-Type", "application/x-ndjson")},
			wantBody: `{"response":"hi","done":true}` + "\n", requests: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The bare client, on the same script.
				bareRec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
				bare := newFakeEnv(t, bareRec)
				bareStatus, bareBody, bareErr := fetchStream(t, bare.base, tt.method, bare.url)
				bareRec.WantCount(t, 1)

				rec := httptestutil.NewRecorder(httptestutil.Script(tt.steps...))
				env := newFakeEnv(t, rec)
				o := Options{Base: env.base, Retry: policy.Retry{Backoff: constant(time.Second)}}
				if tt.vouched {
					o.Idempotency = idempotency.Options{Hosts: []string{"api.test"}}
				}
				if tt.opts != nil {
					tt.opts(&o)
				}
				status, body, err := fetchStream(t, New(o), tt.method, env.url)
				synctest.Wait()
				rec.WantCount(t, tt.requests)
				if tt.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
						t.Fatalf("got error %v, want one that says %q", err, tt.wantErr)
					}
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false, want true", err)
					}
					// The abandoned stream's connection was closed: the
					// server saw the client go away.
					if r := rec.Requests()[0]; r.Disconnected.IsZero() {
						t.Error("the server did not see the stalled stream's client go away")
					}
					if bareErr == nil {
						t.Errorf("the bare client delivered %d %q where the stack failed", bareStatus, bareBody)
					}
					return
				}
				if err != nil {
					t.Fatalf("stack: %v; the bare client got %d %q, %v", err, bareStatus, bareBody, bareErr)
				}
				want := bareBody
				if tt.want != nil {
					want = render(tt.want)
				} else if tt.wantBody != "" {
					want = tt.wantBody
				} else if bareErr != nil {
					t.Fatalf("bare client: %v", bareErr)
				}
				if status != http.StatusOK || body != want {
					t.Errorf("got %d %q\nwant 200 %q", status, body, want)
				}
			})
		})
	}
}

// render writes events as httptestutil.SSE sends them.
func render(evs []httptestutil.SSEEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Name == "" && ev.Data == "" {
			b.WriteString(": " + ev.Comment + "\n\n")
			continue
		}
		if ev.Name != "" {
			b.WriteString("event: " + ev.Name + "\n")
		}
		b.WriteString("data: " + ev.Data + "\n\n")
	}
	return b.String()
}

// foreign is a RoundTripper sturdy did not write, as otelhttp is: it
// sends a clone of the request with a context of its own, and wraps the
// response body.
type foreign struct{ next http.RoundTripper }

type foreignKey struct{}

type foreignBody struct{ io.ReadCloser }

func (f foreign) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(context.WithValue(req.Context(), foreignKey{}, "span"))
	resp, err := f.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = foreignBody{resp.Body}
	return resp, nil
}

func foreignMW(next http.RoundTripper) http.RoundTripper { return foreign{next} }

// The same rules with the stack built with Chain, and with a foreign
// RoundTripper between the layers: an error event before content is
// retried, and when no attempt is left the last stream is handed back
// byte for byte, through Retry, through Hedge alone, and with one attempt.
func TestFirstEventChain(t *testing.T) {
	overloaded := httptestutil.AnthropicErrorAfterStart("overloaded_error")
	retry := policy.Retry{MaxAttempts: 2, Backoff: constant(time.Second)}
	stacks := []struct {
		name string
		mws  []Middleware
	}{
		{"Retry, FirstEvent", []Middleware{Retry(retry), FirstEvent(0, policy.Stream{})}},
		{"Retry, foreign, FirstEvent", []Middleware{Retry(retry), foreignMW, FirstEvent(0, policy.Stream{})}},
		{"foreign, Retry, foreign, FirstEvent, foreign", []Middleware{foreignMW, Retry(retry), foreignMW, FirstEvent(0, policy.Stream{}), foreignMW}},
		{"Retry, Hedge, FirstEvent", []Middleware{Retry(retry), Hedge(policy.Hedge{Delay: time.Minute}), FirstEvent(0, policy.Stream{})}},
		{"Retry, foreign, Hedge, foreign, FirstEvent", []Middleware{Retry(retry), foreignMW, Hedge(policy.Hedge{Delay: time.Minute}), foreignMW, FirstEvent(0, policy.Stream{})}},
	}
	scripts := []struct {
		name     string
		steps    []httptestutil.Step
		want     string // "" means the first step's stream, as the bare client reads it
		requests int
	}{
		{"overloaded, then a stream", []httptestutil.Step{overloaded, httptestutil.SSE(okStream...)}, render(okStream), 2},
		{"overloaded every time", []httptestutil.Step{overloaded.Times(2)}, "", 2},
	}
	for _, st := range stacks {
		for _, sc := range scripts {
			t.Run(st.name+"/"+sc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					bare := newFakeEnv(t, httptestutil.Script(sc.steps...))
					_, bareBody, err := fetchStream(t, bare.base, "GET", bare.url)
					if err != nil {
						t.Fatalf("bare: %v", err)
					}
					rec := httptestutil.NewRecorder(httptestutil.Script(sc.steps...))
					env := newFakeEnv(t, rec)
					status, body, err := fetchStream(t, Chain(env.base, st.mws...), "GET", env.url)
					if err != nil {
						t.Fatal(err)
					}
					want := sc.want
					if want == "" {
						want = bareBody
					}
					if status != 200 || body != want {
						t.Errorf("got %d %q\nwant 200 %q", status, body, want)
					}
					rec.WantCount(t, sc.requests)
				})
			})
		}
	}
	// With nothing left to try, a judged stream goes back as it came: one
	// attempt, in Chain and in New, and Hedge with no Retry above.
	alone := []struct {
		name string
		rt   func(base http.RoundTripper) http.RoundTripper
	}{
		{"Retry of one attempt", func(b http.RoundTripper) http.RoundTripper {
			return Chain(b, Retry(policy.Retry{MaxAttempts: 1}), FirstEvent(0, policy.Stream{}))
		}},
		{"New with one attempt", func(b http.RoundTripper) http.RoundTripper {
			return New(Options{Base: b, Retry: policy.Retry{MaxAttempts: 1}})
		}},
		{"Hedge alone", func(b http.RoundTripper) http.RoundTripper {
			return Chain(b, Hedge(policy.Hedge{Delay: time.Minute}), foreignMW, FirstEvent(0, policy.Stream{}))
		}},
		{"New, Hedge without Retry", func(b http.RoundTripper) http.RoundTripper {
			return New(Options{Base: b, Disable: LayerRetry, Hedge: &policy.Hedge{Delay: time.Minute}})
		}},
	}
	for _, a := range alone {
		t.Run(a.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bare := newFakeEnv(t, overloaded)
				_, bareBody, _ := fetchStream(t, bare.base, "GET", bare.url)
				rec := httptestutil.NewRecorder(httptestutil.Script(overloaded, httptestutil.SSE(okStream...)))
				env := newFakeEnv(t, rec)
				status, body, err := fetchStream(t, a.rt(env.base), "GET", env.url)
				if err != nil {
					t.Fatal(err)
				}
				if status != 200 || body != bareBody {
					t.Errorf("got %d %q\nwant 200 %q", status, body, bareBody)
				}
				rec.WantCount(t, 1)
			})
		})
	}
}

// A stream whose headers come at once but whose first token is slow is
// hedged at the hedge delay, timed from its first content event; the
// hedge's stream wins and the slow copy is canceled (the server sees it
// go away). With streams handed back at their headers (a negative
// FirstEventTimeout) the slow copy is never hedged. The bare client
// beside waits for the slow token.
func TestFirstEventHedge(t *testing.T) {
	slow := httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.AnthropicText(10*time.Second, 0, "slow"))...)
	fast := httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.AnthropicText(300*time.Millisecond, 0, "fast"))...)
	tests := []struct {
		name     string
		first    time.Duration // FirstEventTimeout
		want     string
		wantTTFT time.Duration
		requests int
		canceled int
	}{
		{"timed to the first event", 0, "fast", time.Second + 300*time.Millisecond, 2, 1},
		{"timed to the headers", -1, "slow", 10 * time.Second, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bare := newFakeEnv(t, httptestutil.Script(slow, fast))
				start := time.Now()
				_, bareBody, err := fetchStream(t, bare.base, "GET", bare.url)
				if err != nil || !strings.Contains(bareBody, "slow") || time.Since(start) != 10*time.Second {
					t.Fatalf("bare client: %v after %v, %q; want the slow stream after 10s", err, time.Since(start), bareBody)
				}

				rec := httptestutil.NewRecorder(httptestutil.Script(slow, fast))
				env := newFakeEnv(t, rec)
				var hooks hedgeCounts
				h := hooks.policy(policy.Hedge{Delay: time.Second})
				rt := New(Options{Base: env.base, FirstEventTimeout: tt.first, Hedge: &h})
				req, _ := http.NewRequest("GET", env.url, nil)
				start = time.Now()
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				body := readAll(t, resp) // the stream ends at once after its token
				ttft := time.Since(start)
				// Every byte of the winner, preamble included, and nothing of the loser.
				if want := render(events(httptestutil.AnthropicStart(), httptestutil.AnthropicText(0, 0, tt.want))); body != want || ttft != tt.wantTTFT {
					t.Errorf("got %q at %v, want the %s stream, %q, at %v", body, ttft, tt.want, want, tt.wantTTFT)
				}
				synctest.Wait()
				rec.WantCount(t, tt.requests)
				hooks.want(t, tt.requests-1, tt.requests-1, tt.canceled)
				if tt.canceled > 0 {
					if d := rec.Requests()[0].Disconnected; d.IsZero() || d.Sub(start) != tt.wantTTFT {
						t.Errorf("the slow copy went away at %v, want at %v", d.Sub(start), tt.wantTTFT)
					}
				}
			})
		})
	}
}

// The adaptive hedge delay learns a stream's time to its first event,
// not to its headers: after streams whose tokens come 300 ms after their
// headers, a stream whose token is 10 s late is hedged within a quantile's
// bucket of 300 ms, where a delay learned from headers (which come at
// once) would hedge every stream at the floor.
func TestFirstEventHedgeLearnsTimeToFirstEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		stream := func(first time.Duration) http.Handler {
			return httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.AnthropicText(first, 0, "x"))...)
		}
		rec := httptestutil.NewRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" && n.Add(1) == 1 {
				stream(10*time.Second).ServeHTTP(w, r)
				return
			}
			stream(300*time.Millisecond).ServeHTTP(w, r)
		}))
		env := newFakeEnv(t, rec)
		var hooks hedgeCounts
		h := hooks.policy(policy.Hedge{})
		rt := New(Options{Base: env.base, Hedge: &h})
		get := func(path string) time.Duration {
			req, _ := http.NewRequest("GET", env.url+path, nil)
			start := time.Now()
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			d := time.Since(start)
			readAll(t, resp)
			return d
		}
		for range policy.DefaultLatencyMinSamples {
			if d := get("/learn"); d != 300*time.Millisecond {
				t.Fatalf("time to first event %v, want 300ms", d)
			}
		}
		d := get("/slow")
		synctest.Wait()
		hooks.want(t, 1, 1, 1)
		// The quantile is the upper edge of a bucket 25% wide.
		if lo, hi := 300*time.Millisecond, 300*time.Millisecond*5/4+300*time.Millisecond; d < lo+300*time.Millisecond || d > hi+300*time.Millisecond {
			t.Errorf("the slow stream's first event came after %v, want a hedge after 300–375ms, then 300ms", d)
		}
	})
}

// The layers between Retry and FirstEvent see the status an error event
// stands for: two overloaded_error streams in a row open a breaker that
// trips after two failures, as two 529s would; two final errors
// (invalid_request_error, handed back as they came) do not.
func TestFirstEventBreakerSeesJudgedStatus(t *testing.T) {
	tests := []struct {
		name     string
		typ      string
		wantOpen bool
	}{
		{"overloaded_error stands for 529: counted", "overloaded_error", true},
		{"invalid_request_error is final, a 200 as it came: not counted", "invalid_request_error", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				env := newFakeEnv(t, httptestutil.AnthropicErrorAfterStart(tt.typ).Forever())
				var opened atomic.Bool
				rt := New(Options{Base: env.base, Retry: policy.Retry{MaxAttempts: 1},
					Breaker: BreakerSettings{ConsecutiveFailures: 2, OnStateChange: func(_ string, _, to BreakerState) {
						if to == BreakerOpen {
							opened.Store(true)
						}
					}}})
				for range 2 {
					status, _, err := fetchStream(t, rt, "GET", env.url)
					if err != nil || status != http.StatusOK {
						t.Fatalf("got %d, %v; want the stream as it came, 200", status, err)
					}
				}
				if got := opened.Load(); got != tt.wantOpen {
					t.Errorf("breaker opened: %v, want %v", got, tt.wantOpen)
				}
			})
		})
	}
}

// A copy whose stream opens with an error event is a failed copy for
// Hedge: the first copy's error at 1.2 s does not win while the hedge
// (sent at 1 s, first token at 1.3 s) runs, and the hedge's stream is the
// one read, whole.
func TestFirstEventHedgeErrorNeverWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := httptestutil.SSE(events(httptestutil.AnthropicStart(), httptestutil.Keepalives(2, 600*time.Millisecond),
			one(httptestutil.AnthropicError("overloaded_error", "Overloaded")))...)
		second := events(httptestutil.AnthropicStart(), httptestutil.AnthropicText(300*time.Millisecond, 0, "fast"))
		rec := httptestutil.NewRecorder(httptestutil.Script(first, httptestutil.SSE(second...)))
		env := newFakeEnv(t, rec)
		var hooks hedgeCounts
		h := hooks.policy(policy.Hedge{Delay: time.Second})
		rt := New(Options{Base: env.base, Hedge: &h})
		start := time.Now()
		status, body, err := fetchStream(t, rt, "GET", env.url)
		if err != nil || status != 200 || body != render(second) {
			t.Fatalf("got %d %q, %v; want the hedge's stream %q", status, body, err, render(second))
		}
		if got, want := time.Since(start), 1300*time.Millisecond; got != want {
			t.Errorf("read after %v, want %v", got, want)
		}
		synctest.Wait()
		rec.WantCount(t, 2)
		hooks.want(t, 1, 1, 0) // the first copy failed on its own: nothing to cancel
	})
}

// Hooks.OnStreamCommit reports how each attempt's read ahead ended: an
// error event judged as its status, then a stream committed.
func TestOnStreamCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []StreamEvent
		rt := New(Options{
			Base: httptestutil.NewHandlerTransport(httptestutil.Script(
				httptestutil.AnthropicErrorAfterStart("overloaded_error"),
				httptestutil.SSE(okStream...),
			)),
			Retry: policy.Retry{Backoff: policy.Exponential(time.Second, time.Second)},
			Hooks: Hooks{OnStreamCommit: func(e StreamEvent) { got = append(got, e) }},
		})
		resp, err := (&http.Client{Transport: rt}).Get("http://api.test/v1/stream")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if len(got) != 2 {
			t.Fatalf("got %d events, want 2: %+v", len(got), got)
		}
		if got[0].Committed || got[0].Status != 529 {
			t.Errorf("first attempt: committed %v, status %d; want false, 529", got[0].Committed, got[0].Status)
		}
		if !got[1].Committed || got[1].Status != 200 || got[1].Err != nil {
			t.Errorf("second attempt: committed %v, status %d, err %v; want true, 200, nil", got[1].Committed, got[1].Status, got[1].Err)
		}
	})
}

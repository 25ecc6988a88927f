package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"runtime/debug"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/internal/slogevent"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

func TestSlogHooks(t *testing.T) {
	req, _ := http.NewRequest("POST", "https://api.test:8443/v1/charges?api_key=secret", nil)
	tests := []struct {
		name  string
		fire  func(Hooks)
		level string
		want  map[string]any
	}{
		{"attempt", func(h Hooks) {
			h.OnAttempt(policy.AttemptEvent{Request: req, Attempt: 2, Status: 503, Duration: 1500 * time.Millisecond})
		}, "DEBUG", map[string]any{"msg": slogevent.MsgAttempt, slogevent.AttrAttempt: 2.0, slogevent.AttrStatus: 503.0, slogevent.AttrDuration: 1.5e9}},
		{"retry on error", func(h Hooks) {
			h.OnRetry(policy.RetryEvent{Request: req, Attempt: 3, Wait: time.Second, Reason: "dial error", Err: errors.New("refused")})
		}, "INFO", map[string]any{"msg": slogevent.MsgRetry, slogevent.AttrAttempt: 3.0, slogevent.AttrWait: 1e9, slogevent.AttrReason: "dial error", slogevent.AttrError: "refused"}},
		{"give up", func(h Hooks) {
			h.OnGiveUp(policy.GiveUpEvent{Request: req, Attempts: 4, Reason: "status 503, attempts exhausted", Status: 503})
		}, "WARN", map[string]any{"msg": slogevent.MsgGiveUp, slogevent.AttrAttempts: 4.0, slogevent.AttrReason: "status 503, attempts exhausted", slogevent.AttrStatus: 503.0}},
		{"breaker opens", func(h Hooks) { h.OnBreakerStateChange("https://api.test", BreakerClosed, BreakerOpen) },
			"WARN", map[string]any{"msg": slogevent.MsgBreaker, slogevent.AttrKey: "https://api.test", slogevent.AttrFrom: "closed", slogevent.AttrTo: "open"}},
		{"breaker half-open", func(h Hooks) { h.OnBreakerStateChange("https://api.test", BreakerOpen, BreakerHalfOpen) },
			"INFO", map[string]any{"msg": slogevent.MsgBreaker, slogevent.AttrKey: "https://api.test", slogevent.AttrFrom: "open", slogevent.AttrTo: "half-open"}},
		{"rate limit wait", func(h Hooks) {
			h.OnRateLimitWait(ratelimit.WaitEvent{Request: req, Key: "https://api.test:8443", Wait: 2 * time.Second, Reason: ratelimit.ReasonQuota})
		}, "INFO", map[string]any{"msg": slogevent.MsgRateLimitWait, slogevent.AttrKey: "https://api.test:8443", slogevent.AttrWait: 2e9, slogevent.AttrReason: "quota"}},
		{"rate limit reject", func(h Hooks) {
			h.OnRateLimitReject(ratelimit.RejectEvent{Request: req, Key: "https://api.test:8443", Wait: time.Minute, Reason: ratelimit.ReasonRetryAfter})
		}, "WARN", map[string]any{"msg": slogevent.MsgRateLimitReject, slogevent.AttrKey: "https://api.test:8443", slogevent.AttrWait: 6e10, slogevent.AttrReason: "retry-after"}},
		{"hedge", func(h Hooks) {
			h.OnHedge(policy.HedgeEvent{Request: req, Copy: 2, Elapsed: 40 * time.Millisecond})
		}, "INFO", map[string]any{"msg": slogevent.MsgHedge, slogevent.AttrCopy: 2.0, slogevent.AttrElapsed: 4e7}},
		{"hedge won", func(h Hooks) {
			h.OnHedgeWon(policy.HedgeEvent{Request: req, Copy: 2, Elapsed: 55 * time.Millisecond, Status: 200})
		}, "INFO", map[string]any{"msg": slogevent.MsgHedgeWon, slogevent.AttrCopy: 2.0, slogevent.AttrElapsed: 5.5e7, slogevent.AttrStatus: 200.0}},
		{"copy canceled", func(h Hooks) {
			h.OnCopyCanceled(policy.HedgeEvent{Request: req, Copy: 1, Elapsed: 55 * time.Millisecond})
		}, "DEBUG", map[string]any{"msg": slogevent.MsgCopyCanceled, slogevent.AttrCopy: 1.0, slogevent.AttrElapsed: 5.5e7}},
		{"throttle", func(h Hooks) {
			h.OnThrottle(ThrottleEvent{Request: req, Host: "https://api.test:8443", Probability: 0.25})
		}, "WARN", map[string]any{"msg": slogevent.MsgThrottle, slogevent.AttrKey: "https://api.test:8443", slogevent.AttrProb: 0.25}},
		{"concurrency limit", func(h Hooks) {
			h.OnConcurrencyChange(ConcurrencyEvent{Host: "https://api.test:8443", From: 20, Limit: 18, InFlight: 20})
		}, "DEBUG", map[string]any{"msg": slogevent.MsgConcLimit, slogevent.AttrKey: "https://api.test:8443", slogevent.AttrLimFrom: 20.0, slogevent.AttrLimit: 18.0, slogevent.AttrInFlight: 20.0}},
		{"concurrency refuse", func(h Hooks) {
			h.OnConcurrencyRefuse(ConcurrencyEvent{Request: req, Host: "https://api.test:8443", From: 12, Limit: 12, InFlight: 12, Waited: 30 * time.Millisecond})
		}, "WARN", map[string]any{"msg": slogevent.MsgConcRefuse, slogevent.AttrKey: "https://api.test:8443", slogevent.AttrLimit: 12.0, slogevent.AttrInFlight: 12.0, slogevent.AttrWait: 3e7}},
		{"address ejected", func(h Hooks) {
			h.OnEject(EjectionEvent{Host: "api.test:8443", Address: "10.0.0.2", Failures: 5, Ejections: 2, Duration: time.Minute})
		}, "WARN", map[string]any{"msg": slogevent.MsgEject, slogevent.AttrKey: "api.test:8443", slogevent.AttrPeer: "10.0.0.2", slogevent.AttrFailures: 5.0, slogevent.AttrEjected: 2.0, slogevent.AttrEjection: 6e10}},
		{"failover", func(h Hooks) {
			h.OnFailover(FailoverEvent{Request: req, From: "https://api.test:8443", To: "https://eu.test", Reason: failoverOpen})
		}, "INFO", map[string]any{"msg": slogevent.MsgFailover, slogevent.AttrKey: "https://api.test:8443", slogevent.AttrOrigin: "https://eu.test", slogevent.AttrReason: "circuit open"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			tt.fire(SlogHooks(l))
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("log line %q: %v", buf.String(), err)
			}
			delete(got, "time")
			if got["level"] != tt.level {
				t.Errorf("level = %v, want %v", got["level"], tt.level)
			}
			delete(got, "level")
			want := tt.want
			if want["msg"] != slogevent.MsgBreaker && want["msg"] != slogevent.MsgEject && want["msg"] != slogevent.MsgConcLimit { // every event but a breaker's, an ejection's and a limit's has a request
				want[slogevent.AttrMethod], want[slogevent.AttrServer], want[slogevent.AttrPath] = "POST", "api.test:8443", "/v1/charges"
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("logged %v, want %v", got, want)
			}
			if bytes.Contains(buf.Bytes(), []byte("secret")) {
				t.Error("the query string was logged")
			}
		})
	}
}

func TestSlogHooksDisabledLevelLogsNothing(t *testing.T) {
	var buf bytes.Buffer
	h := SlogHooks(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})))
	req, _ := http.NewRequest("GET", "http://x.test/", nil)
	h.OnAttempt(policy.AttemptEvent{Request: req, Attempt: 1, Status: 200})
	h.OnRetry(policy.RetryEvent{Request: req, Attempt: 2})
	if buf.Len() != 0 {
		t.Errorf("logged %q at a disabled level", buf.String())
	}
}

type reviewGCountingErr struct{ n *int }

func (e reviewGCountingErr) Error() string { *e.n++; return "boom" }

// An event at a level that the logger does not enable costs only the
// enabled check: no error text, no allocation.
func TestSlogHooksDisabledCostsOnlyEnabledCheck(t *testing.T) {
	l := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	h := SlogHooks(l)
	req, _ := http.NewRequest("GET", "http://x.test/a", nil)
	var calls int
	err := reviewGCountingErr{&calls}
	h.OnAttempt(policy.AttemptEvent{Request: req, Attempt: 1, Err: err, Duration: time.Millisecond})
	h.OnRetry(policy.RetryEvent{Request: req, Attempt: 2, Err: err})
	h.OnGiveUp(policy.GiveUpEvent{Request: req, Attempts: 2, Err: err})
	if calls != 0 {
		t.Errorf("disabled level: err.Error() called %d times; want 0 (only the enabled check)", calls)
	}
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, Err: errors.New("connection refused")}
	cases := []struct {
		name string
		fire func()
	}{
		{"attempt status", func() { h.OnAttempt(policy.AttemptEvent{Request: req, Attempt: 1, Status: 200}) }},
		{"attempt error", func() { h.OnAttempt(policy.AttemptEvent{Request: req, Attempt: 1, Err: errors.ErrUnsupported}) }},
		{"attempt dial error", func() { h.OnAttempt(policy.AttemptEvent{Request: req, Attempt: 1, Err: dialErr}) }},
		{"retry", func() { h.OnRetry(policy.RetryEvent{Request: req, Attempt: 2, Status: 503}) }},
		{"hedge", func() { h.OnHedge(policy.HedgeEvent{Request: req, Copy: 2}) }},
	}
	for _, c := range cases {
		if a := testing.AllocsPerRun(100, c.fire); a != 0 {
			t.Errorf("%s at a disabled level: %v allocs per event, want 0 (only the enabled check)", c.name, a)
		}
	}
}

// A request the stack is handed with no URL is the caller's error and is
// reported as one; the logging hooks log it without its host and path,
// and do not panic.
func TestSlogHooksRequestWithoutURL(t *testing.T) {
	l := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt := New(Options{
		Base:      Func(func(*http.Request) (*http.Response, error) { return nil, errors.New("base: nil URL") }),
		RateLimit: ratelimit.Options{Rate: 0.001, Burst: 1, MaxWait: time.Millisecond},
		Hooks:     SlogHooks(l),
	})
	for i := range 2 {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("request %d with nil URL: panic %v\n%s", i+1, p, debug.Stack())
				}
			}()
			req := &http.Request{Method: "GET", Header: http.Header{}}
			if resp, err := rt.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
}

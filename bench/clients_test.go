package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/timeout"
	"github.com/go-resty/resty/v2"
	"github.com/hashicorp/go-retryablehttp"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// bodyKind says how an operation's request body is given.
type bodyKind int

const (
	noBody      bodyKind = iota // GET
	getBody                     // a *bytes.Reader, so http.NewRequest sets GetBody; []byte for native APIs
	plainReader                 // an io.Reader without GetBody: a one-shot stream
)

// op is one logical operation: a request whose response body is read to
// its end and closed.
type op struct {
	method  string
	url     string
	body    bodyKind
	payload []byte
}

// onlyReader hides every method but Read, so that neither net/http nor a
// peer can see a *bytes.Reader (and set GetBody or seek) underneath.
type onlyReader struct{ io.Reader }

// reqBody returns the body for o as a net/http user passes it.
func (o op) reqBody() io.Reader {
	switch o.body {
	case getBody:
		return bytes.NewReader(o.payload)
	case plainReader:
		return onlyReader{bytes.NewReader(o.payload)}
	}
	return nil
}

// nativeBody returns the body for o as a user of a library with its own
// request type passes it: the byte slice itself when it is rewindable
// (their cheapest path: no copy), a one-shot reader otherwise.
func (o op) nativeBody() any {
	switch o.body {
	case getBody:
		return o.payload
	case plainReader:
		return onlyReader{bytes.NewReader(o.payload)}
	}
	return nil
}

// client is one way of making calls: a library configured as its docs
// say, under the same base transport as every other client.
type client struct {
	name string
	// do sends o, reads the response body to its end, closes it, and
	// returns the status.
	do func(ctx context.Context, o op) (int, error)
}

// clientConfig is what a client is built from.
type clientConfig struct {
	// base sends each attempt.
	base http.RoundTripper
	// noWait makes every retry immediate, for benchmarks that measure the
	// cost of a retry rather than its sleep. The false value keeps each
	// library's documented waits.
	noWait bool
	// timeout is the whole-operation budget of the clients that have one;
	// 0 means sturdy's default, transport.DefaultTimeout.
	timeout time.Duration
}

func (c clientConfig) opTimeout() time.Duration {
	if c.timeout <= 0 {
		return transport.DefaultTimeout
	}
	return c.timeout
}

// clientKind builds a client from a config.
type clientKind struct {
	name string
	new  func(clientConfig) client
}

// The clients, in the order of the tables. bare comes first: every ratio
// is to it.
var (
	kindBare = clientKind{"bare", func(c clientConfig) client {
		return stdClient("bare", c.base)
	}}
	kindRetryablehttp = clientKind{"retryablehttp", func(c clientConfig) client {
		rc := newRetryablehttp(c)
		return client{"retryablehttp", func(ctx context.Context, o op) (int, error) {
			req, err := retryablehttp.NewRequestWithContext(ctx, o.method, o.url, o.nativeBody())
			if err != nil {
				return 0, err
			}
			resp, err := rc.Do(req)
			if err != nil {
				return 0, err
			}
			return finish(resp)
		}}
	}}
	kindRetryablehttpRT = clientKind{"retryablehttp-rt", func(c clientConfig) client {
		return stdClient("retryablehttp-rt", &retryablehttp.RoundTripper{Client: newRetryablehttp(c)})
	}}
	// kindRetryablehttpRTTimeout is retryablehttp-rt given the bound that
	// sturdy's default stack keeps on every operation: its HTTPClient has
	// the same Timeout (the documented way to bound go-retryablehttp's
	// requests), so that the two do the same work on a success.
	kindRetryablehttpRTTimeout = clientKind{"retryablehttp-rt-timeout", func(c clientConfig) client {
		rc := newRetryablehttp(c)
		rc.HTTPClient.Timeout = c.opTimeout()
		return stdClient("retryablehttp-rt-timeout", &retryablehttp.RoundTripper{Client: rc})
	}}
	kindFailsafe = clientKind{"failsafe", func(c clientConfig) client {
		return stdClient("failsafe", newFailsafe(c))
	}}
	kindResty = clientKind{"resty", func(c clientConfig) client {
		r := resty.NewWithClient(&http.Client{Transport: c.base}).
			SetLogger(quietLogger{}).
			SetRetryCount(3).
			AddRetryCondition(func(r *resty.Response, err error) bool {
				return err != nil || r.StatusCode() >= 500
			})
		if c.noWait {
			r.SetRetryWaitTime(0).SetRetryMaxWaitTime(0)
		}
		return client{"resty", func(ctx context.Context, o op) (int, error) {
			req := r.R().SetContext(ctx)
			if b := o.nativeBody(); b != nil {
				req.SetBody(b)
			}
			resp, err := req.Execute(o.method, o.url)
			if err != nil {
				return 0, err
			}
			return resp.StatusCode(), nil
		}}
	}}
	kindLoop = clientKind{"loop", func(c clientConfig) client {
		wait := 200 * time.Millisecond
		if c.noWait {
			wait = 0
		}
		return loopClient("loop", c.base, 4, wait)
	}}
	kindSturdy = clientKind{"sturdy", func(c clientConfig) client {
		o := transport.Options{Base: c.base, Timeout: c.timeout}
		if c.noWait {
			o.Retry.Backoff = noBackoff
		}
		return stdClient("sturdy", transport.New(o))
	}}
	kindSturdyRetry = clientKind{"sturdy-retry", func(c clientConfig) client {
		p := policy.Retry{}
		if c.noWait {
			p.Backoff = noBackoff
		}
		return stdClient("sturdy-retry", transport.Chain(c.base, transport.Retry(p)))
	}}
)

// allKinds are the clients of the overhead tables.
var allKinds = []clientKind{
	kindBare, kindRetryablehttp, kindRetryablehttpRT, kindFailsafe,
	kindResty, kindLoop, kindSturdy, kindSturdyRetry,
}

func noBackoff(int, time.Duration) time.Duration { return 0 }

// stdClient is a client that sends through an *http.Client whose
// transport is rt: how sturdy, failsafehttp and retryablehttp's
// RoundTripper are adopted under an SDK.
func stdClient(name string, rt http.RoundTripper) client {
	return httpClient(name, &http.Client{Transport: rt})
}

// httpClient is a client that sends through hc.
func httpClient(name string, hc *http.Client) client {
	return client{name, func(ctx context.Context, o op) (int, error) {
		req, err := http.NewRequestWithContext(ctx, o.method, o.url, o.reqBody())
		if err != nil {
			return 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		return finish(resp)
	}}
}

// finish reads resp's body to its end and closes it.
func finish(resp *http.Response) (int, error) {
	_, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

// newRetryablehttp is go-retryablehttp's NewClient with its defaults (5
// attempts, exponential backoff from 1 s to 30 s, retry on 429, 5xx but
// 501, and errors) but no logger: its default logger writes a line per
// request to stderr.
func newRetryablehttp(c clientConfig) *retryablehttp.Client {
	rc := retryablehttp.NewClient()
	rc.Logger = nil
	rc.HTTPClient = &http.Client{Transport: c.base}
	if c.noWait {
		rc.RetryWaitMin, rc.RetryWaitMax = 0, 0
	}
	return rc
}

// newFailsafe is failsafehttp with its documented retry policy
// (NewRetryPolicyBuilder: 3 attempts, no delay but Retry-After, retry on
// 429, 5xx but 501, and errors), a circuit breaker that counts errors and
// 5xx and opens after 5 failures in a row for 30 s (sturdy's defaults;
// failsafe's own default opens on the first failure and counts no
// response as one; ours leaves the caller's cancellations out, as
// sturdy's does), and a timeout per attempt.
func newFailsafe(c clientConfig) http.RoundTripper {
	rp := failsafehttp.NewRetryPolicyBuilder().Build()
	cb := circuitbreaker.NewBuilder[*http.Response]().
		HandleIf(func(r *http.Response, err error) bool {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return false // the caller's deadline says nothing about the host
			}
			return err != nil || r != nil && r.StatusCode >= 500
		}).
		WithFailureThreshold(5).
		WithDelay(30 * time.Second).
		Build()
	to := timeout.New[*http.Response](c.opTimeout())
	return failsafehttp.NewRoundTripper(c.base, rp, cb, to)
}

// loopClient is the retry loop people write by hand: up to attempts
// attempts, a wait that doubles from wait (no jitter), retry on errors
// and 5xx. Like most such loops it closes a failed response's body
// without reading it, and it buffers a one-shot body up front so it can
// send it again.
func loopClient(name string, base http.RoundTripper, attempts int, wait time.Duration) client {
	hc := &http.Client{Transport: base}
	return client{name, func(ctx context.Context, o op) (int, error) {
		payload := o.payload
		if o.body == plainReader {
			b, err := io.ReadAll(o.reqBody())
			if err != nil {
				return 0, err
			}
			payload = b
		}
		w := wait
		for i := 1; ; i++ {
			var body io.Reader
			if o.body != noBody {
				body = bytes.NewReader(payload)
			}
			req, err := http.NewRequestWithContext(ctx, o.method, o.url, body)
			if err != nil {
				return 0, err
			}
			resp, err := hc.Do(req)
			if i == attempts || err == nil && resp.StatusCode < 500 {
				if err != nil {
					return 0, err
				}
				return finish(resp)
			}
			if err == nil {
				resp.Body.Close()
			}
			if w > 0 {
				t := time.NewTimer(w)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return 0, ctx.Err()
				}
			}
			w *= 2
		}
	}}
}

// quietLogger drops resty's log lines: it writes a warning per failed
// attempt by default, which would be measured too.
type quietLogger struct{}

func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Warnf(string, ...any)  {}
func (quietLogger) Debugf(string, ...any) {}

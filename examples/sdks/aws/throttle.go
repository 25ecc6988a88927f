package aws

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// ErrorTypeHeader is the response header that carries an AWS error code,
// as "Code" or "Code:details". Some services send it; [ErrorCodes] adds it
// for those that put the code only in the body.
const ErrorTypeHeader = "X-Amzn-ErrorType"

// MaxErrorBody is how many bytes of an error body [ErrorCodes] reads to
// find the error code. The caller still receives the whole body.
const MaxErrorBody = 64 << 10

// ErrorCodes returns a RoundTripper that sends with base (nil means
// cleanhttp.DefaultPooledTransport()) and, on an error response (400 and
// above) with a JSON body and no X-Amzn-ErrorType header, reads the code
// from the body's "__type" or "code" member (AWS JSON and REST-JSON
// protocols) and sets the header to it. The body is read up to
// [MaxErrorBody] bytes and handed back whole. A body that is not JSON, or
// has no code in its first MaxErrorBody bytes, is left without the header.
// A body that delivers no byte for [transport.DefaultIdleTimeout] while it
// is read is cut: the attempt fails with the IdleTimeout's
// [*transport.DeadlineError] ([Transport] uses its Options' IdleTimeout).
func ErrorCodes(base http.RoundTripper) http.RoundTripper {
	return errorCodesIdle(base, transport.DefaultIdleTimeout)
}

// errorCodesIdle is ErrorCodes with a stall limit for the error body it
// reads: idle <= 0 means none.
func errorCodesIdle(base http.RoundTripper, idle time.Duration) http.RoundTripper {
	if base == nil {
		base = cleanhttp.DefaultPooledTransport()
	}
	return &errorCodes{next: base, idle: idle}
}

type errorCodes struct {
	next http.RoundTripper
	idle time.Duration // the longest the error body may stall while it is read; 0: no limit
}

func (t *errorCodes) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 || resp.Header.Get(ErrorTypeHeader) != "" || !isJSON(resp.Header.Get("Content-Type")) {
		return resp, err
	}
	prefix, readErr, cut := readStalling(resp.Body, t.idle)
	if cut {
		// The error body stalled: it is read beneath the stack's own idle
		// watch, which starts only once the response is handed on, so the
		// cut is made here, as that watch would make it.
		return nil, &transport.DeadlineError{Bound: "IdleTimeout", Limit: t.idle}
	}
	resp.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(prefix), resp.Body), body: resp.Body}
	if readErr != nil {
		return resp, nil
	}
	var e struct {
		Type  string `json:"__type"`
		Code  string `json:"code"`
		Code2 string `json:"Code"`
	}
	if json.Unmarshal(prefix, &e) != nil {
		return resp, nil
	}
	for _, c := range []string{e.Code, e.Code2, e.Type} {
		if c != "" {
			resp.Header.Set(ErrorTypeHeader, c)
			break
		}
	}
	return resp, nil
}

// readStalling reads up to MaxErrorBody bytes of body. With idle > 0, a
// Read that delivers nothing for idle closes the body, and cut reports it.
func readStalling(body io.ReadCloser, idle time.Duration) (data []byte, err error, cut bool) {
	r := io.LimitReader(body, MaxErrorBody)
	if idle <= 0 {
		data, err = io.ReadAll(r)
		return data, err, false
	}
	var fired atomic.Bool
	timer := time.AfterFunc(idle, func() {
		fired.Store(true)
		body.Close()
	})
	timer.Stop() // armed only while a Read is blocked
	data, err = io.ReadAll(&stallReader{r: r, timer: timer, idle: idle})
	timer.Stop()
	return data, err, fired.Load()
}

// stallReader arms timer for idle while each Read is blocked.
type stallReader struct {
	r     io.Reader
	timer *time.Timer
	idle  time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	s.timer.Reset(s.idle)
	n, err := s.r.Read(p)
	s.timer.Stop()
	return n, err
}

// CloseIdleConnections closes the idle connections of the base transport.
func (t *errorCodes) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type prefixedBody struct {
	io.Reader
	body io.Closer
}

func (b *prefixedBody) Close() error { return b.body.Close() }

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/x-amz-json-"))
}

// ErrorCode returns the AWS error code of h's X-Amzn-ErrorType header,
// without the "prefix#" or ":details" AWS may put around it:
// "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
// gives "ProvisionedThroughputExceededException". It returns "" when the
// header is absent.
func ErrorCode(h http.Header) string {
	c := h.Get(ErrorTypeHeader)
	if i := strings.IndexByte(c, ':'); i >= 0 {
		c = c[:i]
	}
	if i := strings.IndexByte(c, '#'); i >= 0 {
		c = c[i+1:]
	}
	return strings.TrimSpace(c)
}

// Classify is a [policy.Classifier] for AWS: an error response whose code
// (see [ErrorCode]) is one of the SDK's throttling codes
// (retry.DefaultThrottleErrorCodes: Throttling, ThrottlingException,
// ProvisionedThroughputExceededException, RequestLimitExceeded, SlowDown,
// ...) is retried, for any method, since the request was refused before
// it was acted on; everything else is decided by
// [policy.DefaultClassifier].
func Classify(o policy.Outcome) policy.Decision {
	if o.Err == nil && o.Response != nil && o.Response.StatusCode >= 400 {
		code := ErrorCode(o.Response.Header)
		if _, ok := retry.DefaultThrottleErrorCodes[code]; ok {
			d := policy.Decision{Retry: true, DidNotAct: true, Reason: "aws throttling " + code}
			d.RetryAfter, d.HasRetryAfter = policy.ParseRetryAfter(o.Response.Header, o.Now)
			return d
		}
	}
	return policy.DefaultClassifier(o)
}

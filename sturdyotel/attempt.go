package sturdyotel

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// attemptTransport makes a client span per request sent, as the HTTP
// client semantic conventions define it, and records its duration.
type attemptTransport struct {
	t         *Telemetry
	next      http.RoundTripper
	keyHeader string
}

// CloseIdleConnections forwards to the next RoundTripper.
func (a *attemptTransport) CloseIdleConnections() {
	if c, ok := a.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req under a span of its own, a child of the span in
// req's context. The span ends with the response body (read to the end
// or closed), or at once on an error.
func (a *attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil { // nothing to describe: let the base report the error
		return a.next.RoundTrip(req)
	}
	ctx := req.Context()
	attempt := transport.AttemptFromContext(ctx)
	copyN := transport.HedgeCopyFromContext(ctx)
	method, original := methodAttrs(req.Method)
	host, port := serverOf(req.URL)

	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, method)
	if original.Valid() {
		attrs = append(attrs, original)
	}
	attrs = append(attrs,
		semconv.ServerAddress(host),
		semconv.ServerPort(port),
		semconv.URLFull(redactedURL(req.URL)),
	)
	// Every request after the first of an operation is a resend: a
	// retry, or a hedge (a copy after the first).
	if resend := attempt - 1 + max(copyN-1, 0); resend > 0 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(resend))
	}
	attrs = append(attrs, attribute.Int(attrAttempt, attempt))
	if copyN > 0 {
		attrs = append(attrs, attribute.Int(attrCopy, copyN))
	}
	attrs = append(attrs, attribute.Bool(attrKeyPresent, req.Header.Get(a.keyHeader) != ""))

	sctx, span := a.t.tracer.Start(ctx, spanName(method),
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	var r *http.Request
	if len(a.t.props.Fields()) == 0 {
		r = req.WithContext(sctx) // nothing to write in the headers: no copy of them
	} else {
		r = req.Clone(sctx) // the caller's request is never modified
		a.t.props.Inject(sctx, propagation.HeaderCarrier(r.Header))
	}

	start := time.Now()
	resp, err := a.next.RoundTrip(r)
	d := time.Since(start)
	if resp == nil && err == nil {
		err = errNilResponse
	}

	var outcome attribute.KeyValue // status, or error.type for an error
	var errType attribute.KeyValue // error.type for an error status
	var proto attribute.KeyValue   // network.protocol.version, when the response says
	if err != nil {
		outcome = errorType(ctx, err)
	} else {
		outcome = semconv.HTTPResponseStatusCode(resp.StatusCode)
		if resp.StatusCode >= 400 {
			errType = semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode))
		}
		proto = protocolVersion(resp)
	}
	a.record(ctx, d, method, host, port, outcome, errType, proto)

	if !span.IsRecording() { // sampled out, or no SDK: nothing to add, no body to watch
		span.End()
		return resp, err
	}
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) && oe.Op == "dial" && oe.Addr != nil {
			if host, _, err := net.SplitHostPort(oe.Addr.String()); err == nil {
				span.SetAttributes(semconv.NetworkPeerAddress(host))
			}
		}
		span.SetAttributes(outcome)
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return resp, err
	}
	if a := transport.AddressOf(resp); a != "" { // sent through a per-address pool
		span.SetAttributes(semconv.NetworkPeerAddress(a))
	}
	span.SetAttributes(outcome)
	if proto.Valid() {
		span.SetAttributes(proto)
	}
	if errType.Valid() {
		span.SetAttributes(errType)
		span.SetStatus(codes.Error, "")
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		span.End()
		return resp, nil
	}
	resp.Body = endWithBody(ctx, resp.Body, span)
	return resp, nil
}

// record adds d to the conventions' http.client.request.duration, or,
// when an otelhttp Transport above records it for the whole operation, to
// sturdy.client.attempt.duration, so that no request is counted twice.
func (a *attemptTransport) record(ctx context.Context, d time.Duration, method attribute.KeyValue, host string, port int, outcome, errType, proto attribute.KeyValue) {
	h := a.t.reqDur.Inst()
	if _, above := otelhttp.ClientLabelerFromContext(ctx); above {
		h = a.t.attemptDur
	}
	if h == nil || !h.Enabled(ctx) {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, method, semconv.ServerAddress(host), semconv.ServerPort(port), outcome)
	if errType.Valid() {
		attrs = append(attrs, errType)
	}
	if proto.Valid() {
		attrs = append(attrs, proto)
	}
	h.Record(ctx, d.Seconds(), metric.WithAttributes(attrs...))
}

var errNilResponse = errors.New("sturdyotel: RoundTripper returned a nil *Response with a nil error")

// spanBody ends an attempt's span when its body is read to the end or
// closed, whichever comes first.
type spanBody struct {
	io.ReadCloser
	ctx   context.Context // the request's: a failed read's error.type reads it
	span  trace.Span
	ended atomic.Bool
}

// spanRWBody keeps the io.Writer of a 101 Switching Protocols body.
type spanRWBody struct{ *spanBody }

func (b spanRWBody) Write(p []byte) (int, error) { return b.ReadCloser.(io.Writer).Write(p) }

func endWithBody(ctx context.Context, body io.ReadCloser, span trace.Span) io.ReadCloser {
	sb := &spanBody{ReadCloser: body, ctx: ctx, span: span}
	if _, ok := body.(io.ReadWriteCloser); ok {
		return spanRWBody{sb}
	}
	return sb
}

func (b *spanBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.end()
	case err != nil && !b.ended.Load():
		b.span.SetAttributes(errorType(b.ctx, err))
		b.span.SetStatus(codes.Error, err.Error())
	}
	return n, err
}

func (b *spanBody) Close() error {
	b.end()
	return b.ReadCloser.Close()
}

func (b *spanBody) end() {
	if b.ended.CompareAndSwap(false, true) {
		b.span.End()
	}
}

// methodAttrs returns http.request.method, "_OTHER" for a method the
// conventions do not know, with http.request.method_original then.
func methodAttrs(m string) (method, original attribute.KeyValue) {
	switch m {
	case "":
		return semconv.HTTPRequestMethodGet, attribute.KeyValue{} // net/http sends "" as GET
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace, "QUERY":
		return semconv.HTTPRequestMethodKey.String(m), attribute.KeyValue{}
	}
	return semconv.HTTPRequestMethodOther, semconv.HTTPRequestMethodOriginal(m)
}

// protocolVersion is network.protocol.version for resp: "1.1", "2", "3";
// nothing when resp does not say (a RoundTripper that sets no version).
func protocolVersion(resp *http.Response) attribute.KeyValue {
	switch {
	case resp.ProtoMajor == 1 && resp.ProtoMinor == 1:
		return semconv.NetworkProtocolVersion("1.1")
	case resp.ProtoMajor == 1 && resp.ProtoMinor == 0:
		return semconv.NetworkProtocolVersion("1.0")
	case resp.ProtoMajor >= 2:
		return semconv.NetworkProtocolVersion(strconv.Itoa(resp.ProtoMajor))
	}
	return attribute.KeyValue{}
}

// spanName is the conventions' client span name: the method, or "HTTP"
// for one they do not know.
func spanName(method attribute.KeyValue) string {
	if m := method.Value.AsString(); m != "_OTHER" {
		return m
	}
	return "HTTP"
}

// serverOf returns u's host and port, the scheme's default port when u
// names none.
func serverOf(u *url.URL) (string, int) {
	host, port := u.Hostname(), u.Port()
	if p, err := strconv.Atoi(port); err == nil {
		return host, p
	}
	if u.Scheme == "https" {
		return host, 443
	}
	return host, 80
}

// sensitiveQuery are the query parameters whose values the conventions
// ask url.full to redact: they carry signatures and keys.
var sensitiveQuery = []string{"AWSAccessKeyId", "Signature", "sig", "X-Goog-Signature"}

// redactedURL is u for url.full: credentials and signed query values
// replaced by "REDACTED", as the conventions ask.
func redactedURL(u *url.URL) string {
	c := *u
	if c.User != nil {
		if _, ok := c.User.Password(); ok {
			c.User = url.UserPassword("REDACTED", "REDACTED")
		} else {
			c.User = url.User("REDACTED")
		}
	}
	if c.RawQuery != "" {
		for _, k := range sensitiveQuery {
			if strings.Contains(c.RawQuery, k+"=") {
				q := c.Query()
				for _, k := range sensitiveQuery {
					if q.Has(k) {
						q.Set(k, "REDACTED")
					}
				}
				c.RawQuery = q.Encode()
				break
			}
		}
	}
	return c.String()
}

// errorType is error.type for err, which ended a request of ctx: a word
// for sturdy's refusals ("circuit_open", "throttled", "quota_exhausted",
// "concurrency_limit"), "canceled" or "timeout" for a context's end or a
// network timeout, else the error's type, as the conventions suggest.
func errorType(ctx context.Context, err error) attribute.KeyValue {
	var ne net.Error
	switch {
	case errors.Is(err, transport.ErrCircuitOpen):
		return semconv.ErrorTypeKey.String("circuit_open")
	case errors.Is(err, transport.ErrThrottled):
		return semconv.ErrorTypeKey.String("throttled")
	case errors.Is(err, ratelimit.ErrQuotaExhausted):
		return semconv.ErrorTypeKey.String("quota_exhausted")
	case errors.Is(err, transport.ErrConcurrencyLimit):
		return semconv.ErrorTypeKey.String("concurrency_limit")
	case canceled(ctx, err):
		return semconv.ErrorTypeKey.String("canceled")
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return semconv.ErrorTypeKey.String("timeout")
	}
	return semconv.ErrorType(err)
}

// canceled reports whether err ended a request of ctx that was canceled:
// err is context.Canceled, or ctx ended as context.Canceled with a cause
// that is not a deadline, as a caller's cancel(cause) ends it; net/http
// then returns the cause. A bound of sturdy's cancels with a
// [*transport.DeadlineError], a timeout. It is the rule that the core
// judges an attempt by (Outcome.Canceled), kept here since the core's
// is internal.
func canceled(ctx context.Context, err error) bool {
	return errors.Is(err, context.Canceled) ||
		ctx.Err() == context.Canceled && !errors.Is(context.Cause(ctx), context.DeadlineExceeded)
}

package policy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Outcome is what one attempt ended with, as seen by a [Classifier].
type Outcome struct {
	// Request is the attempt's request.
	Request *http.Request
	// Response is the attempt's response; nil when Err is set. Its body
	// must not be read: a problem body is already parsed into Problem.
	Response *http.Response
	// Err is the attempt's error; nil when Response is set.
	Err error
	// Problem is the response's RFC 9457 problem details, when it had any.
	Problem *Problem
	// Idempotent reports whether sending the request again is safe: its
	// method is idempotent or it carries an idempotency key. See
	// [IsIdempotent].
	Idempotent bool
	// Keyed reports whether the request carries an idempotency key.
	Keyed bool
	// Now is the time the outcome was seen, for Retry-After dates.
	Now time.Time
}

// Decision is a [Classifier]'s verdict on an [Outcome].
type Decision struct {
	// Retry reports whether another attempt is worth making.
	Retry bool
	// Reason says why, in a few stable words for logs and hooks:
	// "status 503", "network error", "problem is_retriable=false", ...
	Reason string
	// RetryAfter is the wait the server asked for (Retry-After,
	// retry-after-ms); valid when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

// Classifier decides whether an attempt's outcome is worth retrying. It
// must be safe for concurrent use. Custom classifiers can call
// [DefaultClassifier] for the cases they do not handle.
type Classifier func(Outcome) Decision

// RetriableError is implemented by errors that know whether the operation
// they ended may be retried. [DefaultClassifier] obeys the first such error
// in an error's chain: an open circuit breaker or an exhausted quota says
// false, so it is escalated to the caller rather than waited on.
type RetriableError interface {
	error
	Retriable() bool
}

// DefaultClassifier is the classifier of the zero [Retry]. In order:
//
//   - The caller's own cancellation ([context.Canceled]) is never retried.
//   - An error that implements [RetriableError] decides for itself.
//   - A request that net/http refuses to send ([CheckRequest]: a bad
//     scheme, control characters in a header) is not retried.
//   - A failed dial (the request surely never left) is retried for any
//     method. TLS certificate errors are not retried. Other network errors,
//     attempt timeouts included, are retried when the request is idempotent.
//   - A response below 400 is final: a success is never retried.
//   - An error response's explicit directive decides next: "x-should-retry:
//     true|false" (OpenAI, Anthropic) or "Stripe-Should-Retry".
//   - Then an RFC 9457 problem body's is_retriable (or its common
//     spellings), both ways.
//   - Then the status: 408, 429, 500, 502, 503, 504 and 529 (overloaded)
//     are retriable; 409 is retriable only when the request carries an
//     idempotency key, because under the IETF Idempotency-Key draft it
//     means a request with the same key is still in flight, and a later
//     attempt gets its stored result; all other statuses are final.
//
// Whatever the response says, a request that is not idempotent is not
// retried: a POST or PATCH without an idempotency key may have had its
// side effect already. The wait the server asked for (Retry-After,
// retry-after-ms) is returned with every decision on an error response; a
// Retry-After date is measured from the response's Date header when it
// has one, so that clock skew between client and server does not matter.
func DefaultClassifier(o Outcome) Decision {
	if o.Err != nil {
		return classifyError(o)
	}
	if o.Response == nil {
		return Decision{Reason: "no response"}
	}
	resp := o.Response
	if resp.StatusCode < 400 {
		return Decision{Reason: "status " + strconv.Itoa(resp.StatusCode)}
	}
	d := Decision{}
	d.RetryAfter, d.HasRetryAfter = ResponseRetryAfter(resp.Header, o.Now)

	retry, reason, decided := directive(resp.Header)
	if !decided && o.Problem != nil && o.Problem.Retriable != nil {
		retry, decided = *o.Problem.Retriable, true
		reason = "problem is_retriable=" + strconv.FormatBool(retry)
	}
	if !decided {
		retry, reason = retriableStatus(resp.StatusCode, o.Keyed)
	}
	if retry && !o.Idempotent {
		retry, reason = false, reason+", not idempotent"
	}
	d.Retry, d.Reason = retry, reason
	return d
}

func retriableStatus(code int, keyed bool) (bool, string) {
	reason := "status " + strconv.Itoa(code)
	switch code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout, 529:
		return true, reason
	case http.StatusConflict:
		return keyed, reason
	}
	return false, reason
}

// directive reads the server's explicit retry directive, if any.
func directive(h http.Header) (retry bool, reason string, ok bool) {
	for _, name := range [...]string{"X-Should-Retry", "Stripe-Should-Retry"} {
		v := h.Get(name)
		if v == "" {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "true":
			return true, strings.ToLower(name) + "=true", true
		case "false":
			return false, strings.ToLower(name) + "=false", true
		}
	}
	return false, "", false
}

// ResponseRetryAfter is [ParseRetryAfter] for a response's header h: a
// Retry-After date is measured from the response's own Date header when it
// has a valid one, so that a skewed client clock neither stretches nor
// shrinks the wait; else from now.
func ResponseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := h["Date"]; len(v) > 0 && len(h["Retry-After"]) > 0 {
		if t, err := http.ParseTime(v[0]); err == nil {
			now = t
		}
	}
	return ParseRetryAfter(h, now)
}

func classifyError(o Outcome) Decision {
	err := o.Err
	if errors.Is(err, context.Canceled) {
		return Decision{Reason: "canceled"}
	}
	var re RetriableError
	if errors.As(err, &re) {
		if re.Retriable() {
			return Decision{Retry: true, Reason: "error says retriable"}
		}
		return Decision{Reason: "error not retriable"}
	}
	if isCertError(err) {
		return Decision{Reason: "tls certificate error"}
	}
	if o.Request != nil && CheckRequest(o.Request) != nil {
		return Decision{Reason: "invalid request"}
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return Decision{Retry: true, Reason: "dial error"}
	}
	reason := "network error"
	if errors.Is(err, context.DeadlineExceeded) {
		reason = "attempt timeout"
	}
	if !o.Idempotent {
		return Decision{Reason: reason + ", not idempotent"}
	}
	return Decision{Retry: true, Reason: reason}
}

func isCertError(err error) bool {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
	)
	return errors.As(err, &unknown) || errors.As(err, &invalid) ||
		errors.As(err, &hostname) || errors.As(err, &verify)
}

// IsIdempotent reports whether req may be sent more than once without a
// second side effect: GET, HEAD, OPTIONS, TRACE, PUT and DELETE are
// idempotent by RFC 9110 §9.2.2; any other method only when the request
// carries the idempotency key header keyHeader ("Idempotency-Key" when
// empty).
func IsIdempotent(req *http.Request, keyHeader string) bool {
	if idempotentMethod(req.Method) {
		return true
	}
	if keyHeader == "" {
		keyHeader = "Idempotency-Key"
	}
	return req.Header.Get(keyHeader) != ""
}

func idempotentMethod(m string) bool {
	switch m {
	case "", "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

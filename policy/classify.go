package policy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
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
	// Attempt is the attempt's number: 1 for the first.
	Attempt int
	// Keyed reports whether the request carries an idempotency key
	// ([HasKey]): every attempt of an operation carries the same one.
	Keyed bool
	// NotConnected reports that the attempt ended before any connection to
	// the server was made: a failed dial, a TLS handshake that failed or
	// timed out, a proxy that refused. The server cannot have seen the
	// request. Package transport watches for it only on requests that are
	// not [SafeToResend].
	NotConnected bool
	// CallerEnded reports that the caller's own context had ended when
	// the attempt did: it was canceled, or its deadline passed. Such an
	// outcome says nothing of the host ([Judge]).
	CallerEnded bool
	// Canceled reports that the attempt's context had been canceled, not
	// cut by a deadline: by the caller, with or without a cause
	// ([context.WithCancelCause]), or for a hedge copy that lost. net/http
	// then returns the cancel's cause, not [context.Canceled]: this field
	// says what the error cannot. Such an outcome is no loss and is not
	// retried.
	Canceled bool
	// Now is the time the outcome was seen, for Retry-After dates.
	Now time.Time
}

// Decision is a [Classifier]'s verdict on an [Outcome].
type Decision struct {
	// Retry reports whether another attempt is worth making: the outcome
	// is transient.
	Retry bool
	// DidNotAct reports that the outcome proves the server did not act on
	// the request. Sending it again is then safe whatever the request is.
	// The connection was never made, a 429, or the server said so:
	// x-should-retry: true, Stripe-Should-Retry: true, or a problem with
	// is_retriable: true. Without it, a retriable outcome is retried only
	// for a request that is [SafeToResend]; see [Retry.Next].
	DidNotAct bool
	// Reason says why, in a few stable words for logs and hooks:
	// "status 503", "dial error", "problem is_retriable=false", ...
	Reason string
	// RetryAfter is the wait the server asked for (Retry-After,
	// retry-after-ms); valid when HasRetryAfter.
	RetryAfter time.Duration
	// HasRetryAfter says that the server asked for a wait. RetryAfter holds
	// it, and zero means "now".
	HasRetryAfter bool
}

// Classifier decides whether an attempt's outcome is worth retrying, and
// whether it proves that the server did not act. It must be safe for
// concurrent use. Custom classifiers can call [DefaultClassifier] for the
// cases they do not handle. A classifier never makes a request safe to send
// twice. [Retry.Next] retries a request that is not [SafeToResend] only on
// a Decision with DidNotAct.
type Classifier func(Outcome) Decision

// RetriableError is implemented by errors that know whether the operation
// they ended may be retried. [DefaultClassifier] obeys the first such error
// in an error's chain. An open circuit breaker or an exhausted quota says
// false, so the caller hears of it at once.
type RetriableError interface {
	error
	// Retriable reports whether the operation the error ended may be
	// tried again.
	Retriable() bool
}

// DefaultClassifier is the classifier of the zero [Retry]. In order:
//
//   - The caller's own cancellation ([Outcome].Canceled, or an error
//     that is [context.Canceled]) is never retried.
//   - An error that implements [RetriableError] decides for itself.
//   - TLS certificate errors are not retried.
//   - A request that cannot be sent as written ([IsCallerError]) is not
//     retried, nor is a failure of the client that no retry can fix
//     ([LocalFinal]: response headers over the transport's limit).
//   - An attempt that never made a connection ([Outcome].NotConnected) is
//     retried, and the server did not act on it.
//   - So is an outcome in which net/http proves that the server did not
//     process the request ([NotProcessed]).
//   - Other network errors, attempt timeouts included, are retried. The
//     server may have acted.
//   - A response below 400 is final: a success is never retried.
//   - An error response's directive decides next: "x-should-retry:
//     true|false" (OpenAI, Anthropic) or "Stripe-Should-Retry". True also
//     says the server did not act.
//   - Then an RFC 9457 problem body's is_retriable decides, both ways.
//     True also says the server did not act.
//   - Then the status. 429 is retried and proves the server did not act.
//     408, 500, 502, 503, 504 and 529 are retried, but the server may have
//     acted.
//   - A 409 is retried only when the same idempotency key may still be in
//     flight. The request must carry a key, and an earlier attempt must
//     have sent it, or the response says so. It says so with Retry-After,
//     or with a problem whose type, title or detail names idempotency.
//   - All other statuses are final.
//
// Whether a retriable outcome is retried also depends on the request.
// [Retry.Next] sends a request again only when it is [SafeToResend] or the
// decision has DidNotAct. Every decision on an error response carries the
// wait the server asked for (Retry-After, retry-after-ms). A Retry-After
// date is measured from the response's Date header when it has one.
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
	if decided {
		d.Retry, d.DidNotAct, d.Reason = retry, retry, reason
		return d
	}
	d.Reason = "status " + strconv.Itoa(resp.StatusCode)
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
		d.Retry, d.DidNotAct = true, true
	case http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout, 529:
		d.Retry = true
	case http.StatusConflict:
		d.Retry = o.Keyed && (o.Attempt > 1 || d.HasRetryAfter || mentionsIdempotency(o.Problem))
		if d.Retry {
			d.Reason = "status 409, key in flight"
		}
	}
	return d
}

// mentionsIdempotency reports whether a 409's problem details say that a
// request with the same idempotency key is still being processed, as the
// IETF Idempotency-Key draft's example and idempotency.Handler do.
func mentionsIdempotency(p *Problem) bool {
	if p == nil {
		return false
	}
	for _, s := range [...]string{p.Type, p.Title, p.Detail} {
		if strings.Contains(strings.ToLower(s), "idempotency") {
			return true
		}
	}
	return false
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

func classifyError(o Outcome) Decision {
	err := o.Err
	if o.canceled() {
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
	if IsCallerError(o.Request, err) {
		return Decision{Reason: "invalid request"}
	}
	if row, ok := LocalFinal(err); ok {
		return Decision{Reason: "local failure: " + row.Name}
	}
	if notConnected(&o) {
		reason := "no connection"
		if !o.NotConnected {
			reason = "dial error"
		}
		return Decision{Retry: true, DidNotAct: true, Reason: reason}
	}
	if row, ok := NotProcessed(err); ok {
		return Decision{Retry: true, DidNotAct: true, Reason: "not processed: " + row.Name}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Decision{Retry: true, Reason: "attempt timeout"}
	}
	return Decision{Retry: true, Reason: "network error"}
}

// canceled reports whether o's attempt was canceled: o.Canceled says
// so, or its error is [context.Canceled], a cancel without a cause, for
// an outcome whose maker did not say. It is the one test of a cancel
// for [Judge], the classifier and [FailsOver]; [Retry.Next] reads
// o.Canceled beside the operation's cause.
func (o *Outcome) canceled() bool { return o.Canceled || errors.Is(o.Err, context.Canceled) }

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
